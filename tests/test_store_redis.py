"""A run shared across processes through a real redis-server (``tests/redis_server.py``).

Worker processes are ``tests/store_worker.py``; they start together at a barrier. Time in these
tests is real where Redis is involved (TTLs, a paused server): every wait is bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from redis_server import RedisServer
from store_worker import ask, fetch, letters  # the same tools the worker processes call

import fuzeguard
from fuzeguard import Config, LoopDetected, StoreUnavailable, guard
from fuzeguard._private.store import redis as redis_store

WORKER = Path(__file__).with_name("store_worker.py")




def shared(server: RedisServer, name: str = "ticket-4711", **settings: Any) -> fuzeguard.Run:
    return fuzeguard.run(name, store=server.url, config=Config(), **settings)


def workers(server: RedisServer, name: str, *commands: list[str]) -> list[dict[str, Any]]:
    """Start one worker per command, release them together, and return what each printed."""
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), mode, server.url, name, *rest],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for mode, *rest in commands
    ]
    client = server.client()
    client.rpush(f"go:{name}", *(["go"] * len(procs)))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# ---------------------------------------------------------------------------- sharing


def test_eight_processes_of_a_thousand_calls_count_exactly(redis_server: RedisServer) -> None:
    with shared(redis_server, "count-8") as run:
        got = workers(redis_server, "count-8", *[["count", "1000"]] * 8)
        stats = run.stats()
    assert [g["made"] for g in got] == [1000] * 8
    assert stats.calls == 8000
    assert stats.calls_by_fn == {"fetch": 8000}


def test_max_calls_stops_a_run_of_eight_processes_at_exactly_the_limit(
    redis_server: RedisServer,
) -> None:
    limit = json.dumps({"max_calls": 5000})  # every worker runs with the same settings
    with shared(redis_server, "cap-8", max_calls=5000) as run:
        got = workers(redis_server, "cap-8", *[["count", "1000", limit]] * 8)
        stats = run.stats()
    assert [(g["locally_judged"], g["store_errors"]) for g in got] == [(0, 0)] * 8
    assert sum(g["made"] for g in got) == 5000
    assert any(g.get("killed") for g in got)
    assert stats.calls == 5000 and stats.killed


def _one_process_index() -> int:
    with fuzeguard.run("alone", config=Config()):
        for _ in range(20):
            try:
                ask("same question")
            except LoopDetected as exc:
                return exc.detection.call_index
    raise AssertionError("the loop was not caught in one process")


def test_a_loop_alternating_between_two_workers_is_caught_at_the_one_process_index(
    redis_server: RedisServer,
) -> None:
    expected = _one_process_index()
    with shared(redis_server, "ping-pong"):
        redis_server.client().rpush("turn:ping-pong:A", "go")
        got = workers(redis_server, "ping-pong",
                      ["ping-pong", "20", "{}", "A", "B"], ["ping-pong", "20", "{}", "B", "A"])
    # One worker's call is caught at the index one process catches it at; the other worker's
    # next call is then refused by that same kill.
    assert [g["caught"] for g in got] == [expected, expected]


def test_a_kill_in_one_worker_refuses_calls_in_every_worker(redis_server: RedisServer) -> None:
    with shared(redis_server, "killed", max_calls=1) as run:
        fetch(0)
        with pytest.raises(LoopDetected):
            fetch(1)  # the run is killed here, in this process
        got = workers(redis_server, "killed", ["kill", "0", json.dumps({"max_calls": 1000})])
        assert run.killed is not None
    assert got[0]["refused"] is True


def test_a_kill_in_another_process_refuses_calls_here(redis_server: RedisServer) -> None:
    with shared(redis_server, "killed-there", max_calls=3) as run:
        got = workers(redis_server, "killed-there", ["count", "10", json.dumps({"max_calls": 3})])
        assert got[0]["made"] == 3 and got[0]["killed"]
        with pytest.raises(LoopDetected):
            fetch(99)
        assert run.stats().killed


def test_every_process_sees_the_same_run_id(redis_server: RedisServer) -> None:
    with shared(redis_server, "one-id") as run:
        got = workers(redis_server, "one-id", ["count", "1"])
    assert got[0]["worker"] == run.id


def test_end_turn_in_one_process_starts_a_new_turn_in_all(redis_server: RedisServer) -> None:
    with shared(redis_server, "turns", max_calls_per_turn=2) as a:
        b = shared(redis_server, "turns", max_calls_per_turn=2)
        a.bind(fetch)(1)
        b.bind(fetch)(2)
        b.end_turn()
        a.bind(fetch)(3)
        a.bind(fetch)(4)
        assert b.stats().turn == 2 and b.stats().turn_calls == 2
        with pytest.raises(LoopDetected):
            b.bind(fetch)(5)


def test_reset_in_one_process_clears_the_run_in_all(redis_server: RedisServer) -> None:
    with shared(redis_server, "resets", max_calls=2) as a:
        b = shared(redis_server, "resets", max_calls=2)
        a.bind(fetch)(1)
        b.bind(fetch)(2)
        b.reset()
        a.bind(fetch)(3)  # allowed again: the reset cleared the count everywhere
        assert a.stats().calls == 1 and a.stats().resets == 1
        assert b.stats().calls == 1


def test_a_reset_and_a_turn_made_in_another_process_reach_this_one_s_subscribers(
    redis_server: RedisServer,
) -> None:
    """They are booked while the run's lock is held, and delivered with this process's next
    event (docs/concepts.md, "Run events")."""
    from fuzeguard.events import RunReset, TurnEnded

    with shared(redis_server, "heard") as a:
        b = shared(redis_server, "heard")
        heard: list[object] = []
        a.subscribe(heard.append, RunReset, TurnEnded)
        a.bind(fetch)(1)
        b.end_turn()
        b.reset()
        assert heard == []
        a.bind(fetch)(2)
    assert [type(e).__name__ for e in heard] == ["TurnEnded", "RunReset"]


def test_max_resets_counts_resets_made_in_every_process(redis_server: RedisServer) -> None:
    with shared(redis_server, "max-resets", max_resets=1) as a:
        b = shared(redis_server, "max-resets", max_resets=1)
        a.reset()
        with pytest.raises(fuzeguard.FuzeguardError, match="max_resets"):
            b.reset()


def test_cost_spent_in_one_process_counts_toward_max_cost_in_another(
    redis_server: RedisServer,
) -> None:
    priced = guard(fetch.__wrapped__, name="priced", cost=0.5, max_iterations=10**9)
    with shared(redis_server, "cost", max_cost=1.0) as a:
        b = shared(redis_server, "cost", max_cost=1.0)
        a.bind(priced)(1)
        b.bind(priced)(2)
        with pytest.raises(LoopDetected) as caught:
            a.bind(priced)(3)
        assert caught.value.detection.pattern == "max_cost"


def test_max_duration_counts_from_the_run_s_first_call_in_any_process(
    redis_server: RedisServer,
) -> None:
    from freezegun import freeze_time

    with freeze_time("2026-01-01 00:00:00") as clock:
        with shared(redis_server, "duration", max_duration=60) as a:
            a.bind(fetch)(1)
            clock.tick(61)
            b = shared(redis_server, "duration", max_duration=60)
            with pytest.raises(LoopDetected) as caught:
                b.bind(fetch)(2)
    assert caught.value.detection.pattern == "max_duration"


def test_history_is_bounded_by_the_windows_the_layers_need(redis_server: RedisServer) -> None:
    with shared(redis_server, "bounded") as run:
        for i in range(1000):
            fetch(i)
        client = redis_server.client()
        kept = client.llen("fuzeguard:{bounded}:e")
        assert kept < redis_store.SNAPSHOT_EVERY
        assert len(run.history) == run._capacity


# ---------------------------------------------------------------------------- parent runs


def test_a_subagent_s_calls_count_toward_its_parent_s_max_calls_in_memory() -> None:
    with fuzeguard.run("parent", config=Config(), max_calls=3) as parent:
        fetch(1)
        with fuzeguard.run("child", config=Config(), parent=parent) as child:
            fetch(2)
            fetch(3)
            with pytest.raises(LoopDetected) as caught:
                fetch(4)
        assert child.stats().calls == 2
        assert parent.stats().calls == 3
    assert caught.value.detection.pattern == "parent.max_calls"


def test_a_subagent_s_cost_counts_toward_its_parent_s_max_cost_in_memory() -> None:
    with fuzeguard.run("parent", config=Config(), max_cost=1.0) as parent:
        with fuzeguard.run("child", config=Config(), parent=parent):
            fuzeguard.add_cost(1.5)
            with pytest.raises(LoopDetected) as caught:
                fetch(1)
        assert parent.stats().cost == 1.5
    assert caught.value.detection.pattern == "parent.max_cost"


def test_a_subagent_s_calls_count_toward_its_parent_s_max_calls_on_redis(
    redis_server: RedisServer,
) -> None:
    with shared(redis_server, "boss", max_calls=3) as parent:
        fetch(1)
        got = workers(redis_server, "sub", ["count", "10", json.dumps({"parent": "boss"})])
        assert got[0]["made"] == 2 and got[0]["killed"]
        assert parent.stats().calls == 3
        with pytest.raises(LoopDetected):
            fetch(2)


def test_a_subagent_s_cost_counts_toward_its_parent_s_max_cost_on_redis(
    redis_server: RedisServer,
) -> None:
    with shared(redis_server, "boss-cost", max_cost=1.0) as parent:
        with fuzeguard.run("sub-cost", config=Config(), parent=parent):
            fuzeguard.add_cost(2.0)
            with pytest.raises(LoopDetected) as caught:
                fetch(1)
        assert parent.stats().cost == 2.0
    assert caught.value.detection.pattern == "parent.max_cost"


def test_a_parent_named_by_its_name_needs_a_shared_store() -> None:
    with pytest.raises(TypeError, match="needs a shared store"):
        fuzeguard.run("child", config=Config(), parent="parent")


def test_a_shared_run_s_parent_must_be_on_the_same_store(redis_server: RedisServer) -> None:
    local = fuzeguard.run("local-parent", config=Config())
    with pytest.raises(TypeError, match="same store"):
        shared(redis_server, "child", parent=local)


def test_a_subagent_of_a_shared_run_lives_on_its_parent_s_store(redis_server: RedisServer) -> None:
    with shared(redis_server, "boss-store") as parent:
        child = fuzeguard.run("sub-store", config=Config(), parent=parent)
        child.bind(fetch)(1)
        assert redis_server.client().exists("fuzeguard:{sub-store}:m")


# ---------------------------------------------------------------------------- lifetime


def test_the_run_s_keys_expire_after_the_ttl(redis_server: RedisServer) -> None:
    client = redis_server.client()
    run = shared(redis_server, "expires", store_ttl=0.3)
    run.bind(fetch)(1)
    assert client.exists("fuzeguard:{expires}:m")
    until(lambda: not client.exists("fuzeguard:{expires}:m", "fuzeguard:{expires}:e"))


def test_activity_renews_the_ttl(redis_server: RedisServer) -> None:
    client = redis_server.client()
    run = shared(redis_server, "renewed", store_ttl=60)
    run.bind(fetch)(1)
    client.pexpire("fuzeguard:{renewed}:m", 1000)
    run.bind(fetch)(2)
    assert client.pttl("fuzeguard:{renewed}:m") > 50_000


def test_closing_the_run_that_created_it_deletes_its_state(redis_server: RedisServer) -> None:
    client = redis_server.client()
    with shared(redis_server, "closed"):
        fetch(1)
        assert client.exists("fuzeguard:{closed}:m")
    assert not client.exists("fuzeguard:{closed}:m", "fuzeguard:{closed}:e")


def test_closing_a_run_that_joined_keeps_the_state(redis_server: RedisServer) -> None:
    client = redis_server.client()
    with shared(redis_server, "joined"):
        with shared(redis_server, "joined"):
            fetch(1)
        assert client.exists("fuzeguard:{joined}:m")


# ---------------------------------------------------------------------------- failures


@pytest.fixture
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_store, "RETRY_AFTER", 0.05)


def _logged(events: list[dict[str, Any]], name: str) -> int:
    return sum(1 for e in events if e["event"] == name)


def test_calls_go_on_while_redis_is_down_and_are_counted_when_it_is_back(
    own_redis: RedisServer, quick_retry: None
) -> None:
    with structlog.testing.capture_logs() as logs:
        with shared(own_redis, "outage") as run:
            for i in range(5):
                fetch(i)
            own_redis.stop()
            for i in range(5, 15):
                assert fetch(i) == f"page {letters(i)}"  # judged here, not broken
            stats = run.stats()
            assert stats.locally_judged == 10 and stats.store_outages == 1
            own_redis.start()  # empty: Redis lost the run
            time.sleep(0.06)
            fetch(15)
            other = shared(own_redis, "outage")
            assert other.stats().calls == 16
    assert _logged(logs, "fuzeguard.store_unavailable") == 1


def test_changes_made_during_an_outage_are_written_when_redis_is_back(
    own_redis: RedisServer, quick_retry: None
) -> None:
    with shared(own_redis, "backlog") as run:
        fetch(0)
        other = shared(own_redis, "backlog")
        other.bind(fetch)(1)
        own_redis.pause()
        try:
            for i in range(2, 6):
                fetch(i)
        finally:
            own_redis.resume()
        time.sleep(0.06)
        fetch(6)
        assert other.stats().calls == 7 == run.stats().calls


def test_a_paused_redis_costs_a_call_no_more_than_the_time_budget(
    own_redis: RedisServer, quick_retry: None
) -> None:
    with shared(own_redis, "paused", store_timeout=0.05) as run:
        fetch(0)
        own_redis.pause()
        try:
            started = time.monotonic()
            for i in range(1, 4):
                assert fetch(i) == f"page {letters(i)}"
            elapsed = time.monotonic() - started
        finally:
            own_redis.resume()
        assert elapsed < 1.0
        time.sleep(0.06)
        fetch(4)
        # The commit that timed out reached Redis when it resumed: it is not counted twice.
        assert shared(own_redis, "paused").stats().calls == 5 == run.stats().calls


def test_fail_closed_refuses_calls_while_redis_is_down(
    own_redis: RedisServer, quick_retry: None
) -> None:
    careful = guard(fetch.__wrapped__, name="careful", fail_closed=True, max_iterations=10**9)
    with shared(own_redis, "closed-fail"):
        careful(0)
        own_redis.stop()
        with pytest.raises(StoreUnavailable):
            careful(1)
        own_redis.start()
        time.sleep(0.06)
        assert careful(2) == f"page {letters(2)}"


def test_the_outage_is_logged_once_and_the_recovery_once(
    own_redis: RedisServer, quick_retry: None
) -> None:
    with structlog.testing.capture_logs() as logs:
        with shared(own_redis, "logged"):
            fetch(0)
            own_redis.stop()
            for i in range(1, 20):
                fetch(i)
                time.sleep(0.01)
            own_redis.start()
            time.sleep(0.06)
            fetch(20)
    assert _logged(logs, "fuzeguard.store_unavailable") == 1
    assert _logged(logs, "fuzeguard.store_recovered") == 1


def test_a_run_opened_while_redis_is_down_goes_on_in_this_process(quick_retry: None) -> None:
    run = fuzeguard.run("nowhere", store="redis://127.0.0.1:1/0", config=Config())
    with run:
        assert fetch(1) == f"page {letters(1)}"
    assert run.stats().locally_judged == 1


# ---------------------------------------------------------------------------- configuration


def test_the_store_comes_from_the_config_file(redis_server: RedisServer, tmp_path: Path) -> None:
    path = tmp_path / "fuze.toml"
    path.write_text(f'[defaults]\nstore = "{redis_server.url}"\n')
    with fuzeguard.run("from-file", config=str(path)):
        fetch(1)
        assert redis_server.client().exists("fuzeguard:{from-file}:m")


def test_fuze_store_overrides_the_config_file(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fuze.toml"
    path.write_text('[defaults]\nstore = "redis://127.0.0.1:1/0"\n')
    monkeypatch.setenv("FUZE_STORE", redis_server.url)
    with fuzeguard.run("from-env", config=str(path)) as run:
        fetch(1)
        assert run.stats().store_errors == 0
        assert redis_server.client().exists("fuzeguard:{from-env}:m")


def test_a_store_that_is_not_a_redis_url_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "fuze.toml"
    path.write_text('[defaults]\nstore = "localhost:6379"\n')
    with pytest.raises(fuzeguard.ConfigError, match=r"defaults\.store.*redis://"):
        Config.load(path)


def test_a_shared_run_needs_a_name(redis_server: RedisServer) -> None:
    with pytest.raises(TypeError, match="needs a name"):
        fuzeguard.run(store=redis_server.url, config=Config())


def test_a_run_without_a_store_has_no_store() -> None:
    assert fuzeguard.run("local", config=Config())._store is None


# ---------------------------------------------------------------------------- traces


def test_each_worker_s_trace_names_the_shared_run_and_the_worker(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with shared(redis_server, "traced") as run:
        got = workers(redis_server, "traced",
                      ["count", "3", json.dumps({"trace": str(tmp_path / "a.jsonl")})],
                      ["count", "3", json.dumps({"trace": str(tmp_path / "b.jsonl")})])
        lines = [json.loads(line) for name in ("a", "b")
                 for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
    assert {g["made"] for g in got} == {3}
    assert {line["run"] for line in lines} == {run.id}
    assert len({line["worker"] for line in lines}) == 2
    assert all(isinstance(line["at"], float) for line in lines)


def test_replaying_every_worker_s_trace_merged_by_time_reproduces_the_shared_judgement(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    from fuzeguard._private.replay import Replayer

    traces = [str(tmp_path / "A.jsonl"), str(tmp_path / "B.jsonl")]
    with shared(redis_server, "replayed"):
        redis_server.client().rpush("turn:replayed:A", "go")
        got = workers(
            redis_server, "replayed",
            ["ping-pong", "20", json.dumps({"trace": traces[0]}), "A", "B"],
            ["ping-pong", "20", json.dumps({"trace": traces[1]}), "B", "A"],
        )
    live = {g["caught"] for g in got}
    summary = Replayer(Config()).replay_merged(traces)
    assert [k.call for k in summary.kills] == sorted(live)
    assert [d.detection.layer for d in summary.detections] == ["dedup"]


def test_replay_never_opens_the_store_the_config_names(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fuzeguard._private.replay import Replayer

    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"fn": "fetch", "args": {"i": 1}, "run": "live-run",
                                 "run_info": {"name": "live-run"}}) + "\n")
    monkeypatch.setenv("FUZE_STORE", redis_server.url)
    Replayer(Config()).replay_file(str(trace))
    assert redis_server.client().keys("fuzeguard:*") == []


def test_a_call_interrupted_in_one_process_is_no_longer_in_flight_in_another(
    redis_server: RedisServer,
) -> None:
    @guard
    def interrupted(i: int) -> str:
        raise KeyboardInterrupt

    with shared(redis_server, "interrupted") as a:
        b = shared(redis_server, "interrupted")
        with pytest.raises(KeyboardInterrupt):
            a.bind(interrupted)(1)
        b.stats()  # brings b's copy up to the log
        assert a._running == {} and b._running == {}
        assert b.stats().calls == 1
