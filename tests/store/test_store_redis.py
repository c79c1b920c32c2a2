"""A run shared across processes through a real redis-server (``tests/helpers/redis_server.py``).

Worker processes are ``tests/helpers/store_worker.py``; they start together at a barrier. Time in these
tests is real where Redis is involved (TTLs, a paused server): every wait is bounded.
"""

from __future__ import annotations

import asyncio
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
from store_digest import assert_copies_agree
from store_worker import ask, fetch, letters  # the same tools the worker processes call

import fuzeguard
from fuzeguard import Config, LoopDetected, StoreUnavailable, guard
from fuzeguard._private.store import events, outage, replica
from fuzeguard.testing import capture_detections

WORKER = Path(__file__).resolve().parents[1] / "helpers" / "store_worker.py"




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


def test_scripts_redis_no_longer_holds_are_loaded_again(redis_server: RedisServer) -> None:
    """The scripts are called by their digest: when Redis no longer holds them (``SCRIPT FLUSH``,
    a restarted server), the next call loads them again, and no call is judged out of reach."""
    with shared(redis_server, "flushed", max_calls=3) as run:
        fetch(1)
        redis_server.client().script_flush()
        fetch(2)
        redis_server.client().script_flush()
        fetch(3)
        with pytest.raises(LoopDetected):
            fetch(4)
        stats = run.stats()
    assert (stats.calls, stats.store_errors, stats.locally_judged) == (3, 0, 0)
    assert redis_server.client().hget("fuzeguard:{flushed}:m", "calls") == b"3"


def test_two_copies_taking_turns_make_one_snapshot_per_multiple_of_the_snapshot_interval(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies of a run that take turns (each commit finds the other's events first) make
    one snapshot per ``SNAPSHOT_EVERY`` events between them, not one per commit that another
    process's events turn down; the snapshots land, so Redis keeps few events; and a process
    that joins from them holds what both copies hold."""
    made: list[int] = []
    snapshot = events.snapshot

    def counted(run: fuzeguard.Run, encoded: Any = None) -> str:
        made.append(run._attempts)
        return snapshot(run, encoded)

    monkeypatch.setattr(events, "snapshot", counted)
    a, b = shared(redis_server, "turns"), shared(redis_server, "turns")
    for i in range(100):
        a.bind(fetch)(2 * i)
        b.bind(fetch)(2 * i + 1)
    a.stats(), b.stats()
    length = int(redis_server.client().hget("fuzeguard:{turns}:m", "seq"))
    assert length >= 400  # a decision and a completion per call
    assert 0 < len(made) <= length // replica.SNAPSHOT_EVERY + 1
    assert redis_server.client().llen("fuzeguard:{turns}:e") < 2 * replica.SNAPSHOT_EVERY
    assert assert_copies_agree(redis_server.url, "turns", a, b)["calls"] == 200
    a.close(), b.close()


def test_history_is_bounded_by_the_windows_the_layers_need(redis_server: RedisServer) -> None:
    with shared(redis_server, "bounded") as run:
        for i in range(1000):
            fetch(i)
        client = redis_server.client()
        kept = client.llen("fuzeguard:{bounded}:e")
        assert kept < replica.SNAPSHOT_EVERY
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


def test_closing_the_run_that_came_first_keeps_its_state_for_the_others(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    with shared(redis_server, "closed"):
        fetch(1)
    assert client.exists("fuzeguard:{closed}:m")
    with shared(redis_server, "closed") as later:
        assert later.stats().calls == 1


def test_ending_a_run_deletes_it_and_a_worker_still_inside_starts_afresh(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    a = shared(redis_server, "ended", max_calls=2)
    b = shared(redis_server, "ended", max_calls=2)
    a.bind(fetch)(1)
    b.bind(fetch)(2)
    old_id = a.id
    a.end()
    assert not client.exists("fuzeguard:{ended}:m", "fuzeguard:{ended}:e")
    b.bind(fetch)(3)  # not refused by max_calls = 2: a fresh run, not the old one written back
    assert b.stats().calls == 1 and b.id != old_id
    assert a.stats().calls == 1 and a.id == b.id


def test_fuze_end_ends_a_shared_run(redis_server: RedisServer) -> None:
    import io

    from fuzeguard._private.cli import main

    with shared(redis_server, "ended-by-cli"):
        fetch(1)
    assert main(["end", "ended-by-cli", "--store", redis_server.url]) == 0
    assert not redis_server.client().exists("fuzeguard:{ended-by-cli}:m")
    from fuzeguard._private import cli

    out = io.StringIO()
    assert cli.end("nothing-here", store=redis_server.url, namespace=None, out=out) == 0
    assert "nothing to end" in out.getvalue()


def _staggered(server: RedisServer, name: str, count: int, settings: dict[str, Any]) -> list[int]:
    """Four workers that start and finish at different moments, none holding the run for the
    others: one alone, then two together, then the last one once one of those has left."""
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), "count", server.url, name, str(count),
                          json.dumps(settings)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    client = server.client()
    made: list[int] = []

    def release(n: int) -> None:
        client.rpush(f"go:{name}", *(["go"] * n))

    def first_done() -> subprocess.Popen[str]:
        deadline = time.monotonic() + 240
        while True:
            for proc in procs:
                if proc.poll() is not None:
                    procs.remove(proc)
                    out, err = proc.communicate()
                    assert proc.returncode == 0, err
                    made.append(json.loads(out)["made"])
                    return proc
            assert time.monotonic() < deadline
            time.sleep(0.01)

    release(1)
    first_done()
    release(2)
    first_done()
    release(1)
    while procs:
        first_done()
    return made


def test_four_workers_that_come_and_go_make_exactly_max_calls(redis_server: RedisServer) -> None:
    made = _staggered(redis_server, "come-and-go", 20, {"max_calls": 40})
    assert sum(made) == 40 and made[0] == 20
    assert int(redis_server.client().hget("fuzeguard:{come-and-go}:m", "calls") or 0) == 40


def test_a_kill_refuses_the_calls_of_a_worker_that_joins_later(redis_server: RedisServer) -> None:
    first = workers(redis_server, "killed-before", ["count", "10", json.dumps({"max_calls": 3})])
    assert first[0]["made"] == 3 and first[0]["killed"]
    later = workers(redis_server, "killed-before", ["kill", "0", json.dumps({"max_calls": 1000})])
    assert later[0]["refused"] is True


def test_a_parent_s_budget_holds_across_child_runs_in_other_processes(
    redis_server: RedisServer,
) -> None:
    with shared(redis_server, "boss-of-three", max_calls=10):
        fetch(1)
    children = [["count", "10", json.dumps({"parent": "boss-of-three", "run": f"child-{i}"})]
                for i in range(3)]
    got = workers(redis_server, "children-of-boss", *children)
    assert sum(g["made"] for g in got) == 9
    with shared(redis_server, "boss-of-three", max_calls=10) as parent:
        assert parent.stats().calls == 10
        with pytest.raises(LoopDetected):
            fetch(2)


def test_closing_a_run_that_joined_keeps_the_state(redis_server: RedisServer) -> None:
    client = redis_server.client()
    with shared(redis_server, "joined"):
        with shared(redis_server, "joined"):
            fetch(1)
        assert client.exists("fuzeguard:{joined}:m")


# ---------------------------------------------------------------------------- failures


@pytest.fixture
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "RETRY_AFTER", 0.05)


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
            assert_copies_agree(own_redis.url, "outage", run, other)
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
        assert_copies_agree(own_redis.url, "backlog", run, other)


def test_a_paused_redis_costs_a_call_no_more_than_the_time_budget(
    own_redis: RedisServer, quick_retry: None
) -> None:
    # A quarter of a second: a busy machine (a shared CI runner) delays a round trip by tens of
    # milliseconds, which a 50 ms budget took for an outage after Redis resumed.
    with shared(own_redis, "paused", store_timeout=0.25) as run:
        fetch(0)
        own_redis.pause()
        try:
            longest = 0.0
            for i in range(1, 4):
                started = time.monotonic()
                assert fetch(i) == f"page {letters(i)}"
                longest = max(longest, time.monotonic() - started)
        finally:
            own_redis.resume()
        assert longest < 0.25 * 3  # a paused Redis never answers: only the budget bounds it
        time.sleep(0.06)
        fetch(4)
        # The commit that timed out reached Redis when it resumed: it is not counted twice.
        assert shared(own_redis, "paused").stats().calls == 5 == run.stats().calls
        assert_copies_agree(own_redis.url, "paused", run)


def test_fail_closed_refuses_calls_while_redis_is_down(
    own_redis: RedisServer, quick_retry: None
) -> None:
    careful = guard(fetch.__wrapped__, name="careful", fail_closed=True, max_iterations=10**9)
    with shared(own_redis, "closed-fail") as run:
        careful(0)
        own_redis.stop()
        with pytest.raises(StoreUnavailable):
            careful(1)
        own_redis.start()
        time.sleep(0.06)
        assert careful(2) == f"page {letters(2)}"
        assert_copies_agree(own_redis.url, "closed-fail", run)


def test_the_outage_is_logged_once_and_the_recovery_once(
    own_redis: RedisServer, quick_retry: None
) -> None:
    with structlog.testing.capture_logs() as logs:
        with shared(own_redis, "logged") as run:
            fetch(0)
            own_redis.stop()
            for i in range(1, 20):
                fetch(i)
                time.sleep(0.01)
            own_redis.start()
            time.sleep(0.06)
            fetch(20)
            assert_copies_agree(own_redis.url, "logged", run)
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
    path.write_text(f'[defaults]\nstore = "{redis_server.url}"\nstore_namespace = "app"\n')
    with fuzeguard.run("from-file", config=str(path)):
        fetch(1)
        assert redis_server.client().exists("fuzeguard:app:{from-file}:m")


def test_fuze_store_overrides_the_config_file(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fuze.toml"
    path.write_text('[defaults]\nstore = "redis://127.0.0.1:1/0"\nstore_namespace = "app"\n')
    monkeypatch.setenv("FUZE_STORE", redis_server.url)
    with fuzeguard.run("from-env", config=str(path)) as run:
        fetch(1)
        assert run.stats().store_errors == 0
        assert redis_server.client().exists("fuzeguard:app:{from-env}:m")


def test_a_store_that_is_not_a_redis_url_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "fuze.toml"
    path.write_text('[defaults]\nstore = "localhost:6379"\n')
    with pytest.raises(fuzeguard.ConfigError, match=r"defaults\.store.*redis://"):
        Config.load(path)


def test_a_store_url_with_a_mistyped_scheme_is_a_config_error_that_hides_its_password() -> None:
    with pytest.raises(fuzeguard.ConfigError, match=r"redis://") as caught:
        fuzeguard.run("typo", store="reddis://:hunter2@cache.internal:6379/0", config=Config())
    assert "hunter2" not in str(caught.value)


def test_without_the_redis_package_a_named_run_is_judged_here_and_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # as if installed without the redis extra
    with structlog.testing.capture_logs() as logs:
        with fuzeguard.run("no-package", store="redis://127.0.0.1:1/0", config=Config()) as run:
            outcomes = []
            for _ in range(5):
                try:
                    ask("same question")
                    outcomes.append("ran")
                except LoopDetected:
                    outcomes.append("refused")
            assert run.stats().calls == outcomes.count("ran")
    assert "refused" in outcomes
    [logged] = [e for e in logs if e["event"] == "fuzeguard.store_misconfigured"]
    assert "pip install 'fuzeguard[redis]'" in logged["message"]
    with pytest.raises(fuzeguard.ConfigError, match=r"fuzeguard\[redis\]"):
        fuzeguard.run("no-package", store="redis://127.0.0.1:1/0", config=Config(),
                      fail_closed=True)


def test_fuze_check_shows_fuze_store_and_fuze_trace_and_fails_on_a_store_that_cannot_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from fuzeguard._private.cli import check

    path = tmp_path / "fuze.toml"
    path.write_text('[defaults]\nstore_namespace = "app"\n')
    monkeypatch.setenv("FUZE_STORE", "redis://:hunter2@cache.internal:6379/0")
    monkeypatch.setenv("FUZE_TRACE", "traces/")
    out = io.StringIO()
    assert check(str(path), out=out, err=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    assert any(line.startswith("store ") and "redis://:***@cache.internal:6379/0" in line
               and "# environment FUZE_STORE" in line for line in lines)
    assert any(line.startswith("trace ") and "# environment FUZE_TRACE" in line for line in lines)
    assert "hunter2" not in out.getvalue()
    for store, problem in (("localhost:6379", "redis://"), ("redis://h:6379/0", None)):
        monkeypatch.setenv("FUZE_STORE", store)
        err = io.StringIO()
        no_namespace = tmp_path / "bare.toml"
        no_namespace.write_text("[defaults]\n")
        assert check(str(no_namespace), out=io.StringIO(), err=err) == 2
        assert (problem or "store_namespace") in err.getvalue()
    monkeypatch.setitem(sys.modules, "redis", None)
    err = io.StringIO()
    assert check(str(path), out=io.StringIO(), err=err) == 2
    assert "pip install 'fuzeguard[redis]'" in err.getvalue()


def test_a_password_is_masked_in_every_form_a_store_url_carries_it() -> None:
    from fuzeguard._private.configuration.validation import masked_url

    for url in ("redis://:hunter2@h:6379/0", "redis://user:hunter2@h:6379/0",
                "redis://h:6379/0?password=hunter2", "unix:///run/redis.sock?db=0&password=hunter2",
                "rediss://h:6379/0?db=1&Password=hunter2&x=1"):
        assert "hunter2" not in masked_url(url) and "***" in masked_url(url)
    assert masked_url("redis://h:6379/0?db=1") == "redis://h:6379/0?db=1"


def test_an_outage_log_never_shows_the_store_s_password() -> None:
    url = "redis://127.0.0.1:1/0?password=hunter2"
    with structlog.testing.capture_logs() as logs:
        with fuzeguard.run("masked", store=url, config=Config()):
            fetch(1)
    assert any(e["event"] == "fuzeguard.store_unavailable" for e in logs)
    assert "hunter2" not in repr(logs)


def test_a_store_from_the_config_needs_a_namespace_and_namespaces_stay_apart(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUZE_STORE", redis_server.url)
    with pytest.raises(fuzeguard.ConfigError, match="store_namespace"):
        fuzeguard.run("task", config=Config())
    billing = Config.from_dict({"defaults": {"store_namespace": "billing", "max_calls": 1}})
    search = Config.from_dict({"defaults": {"store_namespace": "search", "max_calls": 1}})
    with fuzeguard.run("task", config=billing):
        fetch(1)
        with pytest.raises(LoopDetected):
            fetch(2)  # billing's task is killed by its max_calls...
    with fuzeguard.run("task", config=search):
        fetch(3)  # ... search's task of the same name is another run
    assert redis_server.client().exists("fuzeguard:billing:{task}:m", "fuzeguard:search:{task}:m") == 2


@pytest.mark.parametrize("setting", [{"store_ttl": float("inf")}, {"store_ttl": 1e300},
                                     {"store_timeout": 1e300}, {"store_timeout": float("inf")}])
def test_store_ttl_and_store_timeout_are_bounded(setting: dict[str, float]) -> None:
    key = next(iter(setting))
    with pytest.raises(fuzeguard.ConfigError, match=key):
        Config.from_dict({"defaults": setting})
    with pytest.raises(fuzeguard.ConfigError, match=key):
        fuzeguard.run("bounded", store="redis://127.0.0.1:1/0", config=Config(), **setting)


def test_an_infinite_cost_is_left_out_and_the_run_stays_shared(redis_server: RedisServer) -> None:
    with structlog.testing.capture_logs() as logs, shared(redis_server, "infinite") as run:
        fetch(1)
        fuzeguard.add_cost(float("inf"))  # logged and not counted: the agent goes on
        fetch(2)
        assert run.stats().store_errors == 0 and run.stats().cost == 0.0
    assert any(e["event"] == "fuzeguard.cost_rejected" for e in logs)
    assert shared(redis_server, "infinite").stats().calls == 2


def test_an_infinite_cost_from_a_cost_function_is_left_out_of_a_shared_run(
    redis_server: RedisServer,
) -> None:
    priced = guard(fetch.__wrapped__, name="priced-inf", cost=lambda result: float("inf"))
    with structlog.testing.capture_logs() as logs, shared(redis_server, "inf-cost") as run:
        priced(1)
        fetch(2)
        assert run.stats().store_errors == 0 and run.stats().cost == 0.0
    assert any(e["event"] == "fuzeguard.cost_failed" for e in logs)
    assert shared(redis_server, "inf-cost").stats().calls == 2


def test_the_fingerprints_a_shared_run_keeps_in_redis_are_keyed(redis_server: RedisServer) -> None:
    @guard(layers=["limits"])
    def login(user: str, password: str) -> str:
        return "ok"

    with shared(redis_server, "keyed") as run:
        login("alice", "hunter2")
        plan = login.guard.plan(run.config)  # what anyone with the package can compute
        plain = plan.fingerprint_args(plan.binder.arguments(("alice", "hunter2"), {})).hex()
        stored = b"".join(redis_server.client().lrange("fuzeguard:{keyed}:e", 0, -1))
        stored += redis_server.client().hget("fuzeguard:{keyed}:m", "snap") or b""
        fuzeguard.run("keyed", store=redis_server.url, config=Config()).stats()  # flushes nothing
    assert plain.encode() not in stored and b'"fp":"' in stored


def test_a_call_costs_one_round_trip(redis_server: RedisServer) -> None:
    client = redis_server.client()
    with shared(redis_server, "round-trips") as run:
        fetch(0)  # the run is loaded, the scripts known
        client.config_resetstat()
        for i in range(1, 201):
            fetch(i)
        scripts = client.info("commandstats")
        assert run.stats().calls == 201
    # Every command a script runs is counted too; what a client sent is the scripts themselves.
    sent = {name: stat["calls"] for name, stat in scripts.items()
            if name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script|load")}
    assert sent == {"cmdstat_evalsha": 200}


def test_an_async_tool_s_cost_reaches_the_other_processes_when_its_call_ends(
    redis_server: RedisServer,
) -> None:
    import asyncio

    @guard(name="apriced", cost=0.5, max_iterations=10**9)
    async def apriced(i: int) -> str:
        return f"page {letters(i)}"

    async def main(run: fuzeguard.Run) -> None:
        async with run:
            await apriced(1)
            await apriced(2)

    asyncio.run(main(shared(redis_server, "async-cost")))
    other = shared(redis_server, "async-cost")
    assert other.stats().cost == 1.0 and other.stats().calls == 2


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
    from fuzeguard._private.reports.replay import Replayer

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
    assert [d.detection.layer for d in summary.detections] == ["dedup"] * 3  # warned twice, then killed


def test_replay_never_opens_the_store_the_config_names(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fuzeguard._private.reports.replay import Replayer

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


def test_a_worker_that_loses_a_commit_needs_one_more_round_trip_only(
    redis_server: RedisServer,
) -> None:
    """Eight processes on one run: a decision that another process committed before is made again
    on the state the lost round trip brought and committed in a second round trip, whatever the
    others did meanwhile, so a call costs at most two scripts (plus each worker's load and final
    write), and every call is counted once."""
    client = redis_server.client()

    def scripts() -> int:
        stats = client.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{n}", {}).get("calls", 0)) for n in ("eval", "evalsha"))

    before = scripts()
    got = workers(redis_server, "two-trips", *[["count", "300"]] * 8)
    trips = scripts() - before
    assert [g["made"] for g in got] == [300] * 8
    assert trips <= 2 * 2400 + 4 * 8, trips
    with shared(redis_server, "two-trips") as run:
        assert run.stats().calls == 2400 and run.stats().calls_by_fn == {"fetch": 2400}


def _asking_search() -> Callable[..., str]:
    # The ask action in a shared run is tested here, not the grading: the 3rd identical call is
    # asked about (early_warnings = 0).
    @guard(name="asked_search", on_loop=["ask", "kill"], early_warnings=0)
    def asked_search(query: str) -> str:
        return "3 results for " + query

    return asked_search


@pytest.mark.parametrize(("reply", "fourth"), [("continue", "3 results for same"),
                                               ("skip", None), ("kill", LoopDetected)])
def test_ask_in_a_shared_run_puts_the_question_and_shares_only_the_answer(
    redis_server: RedisServer, reply: str, fourth: Any
) -> None:
    asked: list[str] = []

    def ask(question: Any) -> str:
        asked.append(question.fn)
        return reply

    search = _asking_search()
    name = f"ask-{reply}"
    with shared(redis_server, name, ask=ask) as run:
        search("same")
        search("same")
        if fourth is LoopDetected:
            with pytest.raises(LoopDetected):
                search("same")
        else:
            got = search("same")
            assert got == fourth if fourth is not None else got != "3 results for same"
    assert asked == ["asked_search"]
    with shared(redis_server, name) as other:  # what every process sees
        assert (other.killed is not None) == (reply == "kill")
        assert other.stats().calls == (3 if reply == "continue" else 2)
    assert (run.killed is not None) == (reply == "kill")


@pytest.mark.parametrize("from_snapshot", [False, True])
def test_a_continue_given_in_one_process_raises_the_bar_in_every_process(
    redis_server: RedisServer, from_snapshot: bool
) -> None:
    """A person let a loop go on in one process: another process of the run detects the same
    pattern again and warns, below the raised bar, instead of taking the ladder's next step (a
    kill) or asking again; whether it reads the answer from the run's events or, joining after
    many more calls, from its snapshot."""
    asked: list[str] = []

    def answer(question: Any) -> str:
        asked.append(question.fn)
        return "continue"

    search = _asking_search()
    name = f"bar-{from_snapshot}"
    with shared(redis_server, name, ask=answer) as first:
        for _ in range(3):
            search("same")  # the third is asked about, and let go on
        raised = dict(first._bars)
        if from_snapshot:
            for i in range(2 * replica.SNAPSHOT_EVERY):
                fetch(i)
    assert asked == ["asked_search"]
    with shared(redis_server, name, ask=answer) as other, capture_detections() as found:
        if from_snapshot:
            assert redis_server.client().llen(f"fuzeguard:{{{name}}}:e") < replica.SNAPSHOT_EVERY
            search("same")
            search("same")
        assert search("same") == "3 results for same"
    assert asked == ["asked_search"]  # not asked again, not killed
    assert other.killed is None
    assert len(raised) == 1 and other._bars == raised  # the same bar in both processes
    assert [(d.layer, d.action) for d in found][-1:] == [("dedup", "warn")]


def test_a_snapshot_restores_all_the_state_the_layers_and_the_ladder_read() -> None:
    """A process that joins a shared run from its snapshot holds what every other process holds:
    counters, history, each pattern's hits, the turn it last stepped in, and the raised bars."""

    @guard(name="snap_search", on_loop="warn")
    def snap_search(query: str) -> str:
        return "3 results for " + query

    with fuzeguard.run("snap", config=Config()) as run:
        for _ in range(3):
            for _ in range(4):
                snap_search("same")
            run.end_turn()
        fetch(1)
        with run._lock:
            run._raise_bar(run.detections[0])
            text = events.snapshot(run)
    # each part is there to restore, what the model was told included (graded evidence)
    assert run._turns_marked and run._hit_turns and run._bars and run._warned and run._told_at
    copy = fuzeguard.run("snap-copy", config=Config())
    with copy._lock:
        events.restore(copy, text)
    for part in ("_attempts", "_calls", "_skipped", "_errors", "_cost", "_turn", "_turn_calls",
                 "_calls_by_fn", "_detections", "_detections_by_layer", "_hits", "_bars",
                 "_hit_turns", "_turns_marked", "_warned", "_told_at", "_told_turn"):
        assert getattr(copy, part) == getattr(run, part), part
    assert [(r.fn, r.index, r.args_fp, r.result_fp) for r in copy.history] == [
        (r.fn, r.index, r.args_fp, r.result_fp) for r in run.history]


def test_ask_in_a_shared_run_does_not_block_the_event_loop(redis_server: RedisServer) -> None:
    import threading

    released = threading.Event()

    def ask(question: Any) -> str:  # answered only once a task on the loop has run
        return "continue" if released.wait(timeout=10) else "kill"

    @guard(name="async_asked", on_loop=["ask", "kill"])
    async def async_asked(query: str) -> str:
        return "3 results for " + query

    async def main() -> str:
        async def release() -> None:
            await asyncio.sleep(0)
            released.set()

        async with shared(redis_server, "ask-async", ask=ask, ask_timeout=20):
            await async_asked("same")
            await async_asked("same")
            third, _ = await asyncio.gather(async_asked("same"), release())
            return third

    assert asyncio.run(main()) == "3 results for same"


def test_the_ask_callback_of_a_shared_run_may_read_the_run_and_other_threads_go_on(
    redis_server: RedisServer,
) -> None:
    """Third review e02: the callback ran under the run's lock, so one that read
    ``question.run.report()`` (as docs/stopped.md suggests) waited for it until ask_timeout (a
    kill), and every other thread of the run stood still meanwhile."""
    import threading

    other_done = threading.Event()
    read: list[int] = []

    def ask(question: Any) -> str:
        read.append(question.run.report().calls)
        worker = threading.Thread(target=question.run.bind(fetch), args=(7,))
        worker.start()  # another thread's call of the same run, while the person reads
        worker.join(5)
        if not worker.is_alive():
            other_done.set()
        return "continue"

    search = _asking_search()
    with shared(redis_server, "ask-reads", ask=ask, ask_timeout=10) as run:
        for _ in range(3):
            search("same")
    assert read == [2] and other_done.is_set()
    assert run.killed is None and run.stats().calls == 4


def test_redis_holds_no_redacted_argument_of_a_failed_call(redis_server: RedisServer) -> None:
    """Third review e07: dedup keeps the text of a failed call's arguments, and the shared run
    wrote it to Redis with the password, the API key and the bearer token in clear, while the
    trace and the report redact them."""
    password, api_key, bearer = "hunter2-Pa55word", "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e", "s3cr3t-bv"

    @guard(name="login", on_loop="warn")
    def login(user: str, password: str, api_key: str, headers: dict[str, str]) -> str:
        raise PermissionError("access denied")

    with shared(redis_server, "secrets") as run:
        for _ in range(4):
            with pytest.raises(PermissionError):
                login("bob", password, api_key, {"Authorization": "Bearer " + bearer})
        mine = [r.features for r in run.history]
    client = redis_server.client()
    stored = b"".join(
        b"".join(client.lrange(key, 0, -1)) if client.type(key) == b"list"
        else b"".join(b"".join(pair) for pair in client.hgetall(key).items())
        for key in client.scan_iter("fuzeguard:*")
    )
    assert b"bob" in stored  # the text is there, its secrets are not
    for secret in (password, api_key, bearer):
        assert secret.encode() not in stored
        assert secret not in repr(mine)  # this process books what the others read
    assert run.detections  # the failing attempts are still caught
