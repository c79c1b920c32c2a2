"""What a shared run does when its store fails, against a real redis-server (``redis_server.py``)
and a local TCP proxy in front of it (``tcp_proxy.py``): Redis killed mid-run and restarted with and
without its data, a connection cut half-way through a write-back, a slow link, a long outage.
After each, every call that ran is counted once (in Redis, in each process's view and in the view of
a process that joins afterwards) and a kill made meanwhile stands (docs/workers.md, "When Redis
fails"). After each, every process's copy of the run equals a fresh load from Redis (the state
digest, ``store_digest.py``). Time is real here: counts are small, timeouts short, and every wait
is bounded.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from redis_server import RedisServer
from store_digest import assert_copies_agree
from store_worker import fetch
from tcp_proxy import Proxy

import fuzeguard
from fuzeguard import Config, LoopDetected, guard
from fuzeguard._private.store import outage, replica, scripts


@pytest.fixture(autouse=True)
def quick_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(outage, "RETRY_AFTER", 0.05)


@pytest.fixture
def proxy(own_redis: RedisServer) -> Iterator[Proxy]:
    p = Proxy(own_redis.port)
    yield p
    p.close()


@guard(layers=["limits"])
def step(i: Any) -> Any:
    return i


def shared(url: str, name: str, **settings: Any) -> fuzeguard.Run:
    return fuzeguard.run(name, store=url, config=Config(), **settings)


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def recovered(*runs: fuzeguard.Run) -> bool:
    """Each run's process has reached Redis again and written back what it did meanwhile."""
    for run in runs:
        run.stats()  # tries again when due
    return all(run._store is not None and run._store.outage is None  # type: ignore[attr-defined]
               for run in runs)


def counted(server: RedisServer, name: str) -> int:
    return int(server.client().hget(f"fuzeguard:{{{name}}}:m", "calls") or 0)


def seen_by_a_newcomer(server: RedisServer, name: str) -> int:
    return shared(server.url, name).stats().calls


def attempt(run: fuzeguard.Run, fn: Callable[[Any], Any], arg: Any) -> bool:
    try:
        run.bind(fn)(arg)
        return True
    except LoopDetected:
        return False


@pytest.mark.parametrize("persist", [False, True], ids=["without-data", "with-data"])
def test_redis_restarted_mid_run_counts_every_call_once_and_keeps_the_kill(
    tmp_path: Path, persist: bool
) -> None:
    server = RedisServer(tmp_path, persist=persist)
    server.start()
    try:
        with structlog.testing.capture_logs():
            a = shared(server.url, "restart", max_calls=8)
            b = shared(server.url, "restart", max_calls=8)
            ran = 0
            for i in range(3):
                ran += attempt(a, fetch, i) + attempt(b, fetch, 100 + i)
            a.stats()
            b.stats()  # both copies up to date: 6 calls
            server.stop()
            # Judged in each process on its copy (6 calls seen): each makes 2, then its copy
            # reaches max_calls = 8 and kills the run.
            outage = [attempt(a, fetch, 10 + i) for i in range(3)]
            outage += [attempt(b, fetch, 110 + i) for i in range(3)]
            assert outage == [True, True, False, True, True, False]
            ran += sum(outage)
            server.start()
            until(lambda: recovered(a, b))
            assert counted(server, "restart") == ran == 10
            assert a.stats().calls == b.stats().calls == seen_by_a_newcomer(server, "restart") == ran
            newcomer = shared(server.url, "restart", max_calls=1000)
            assert not attempt(newcomer, fetch, 999)  # the kill made during the outage stands
            assert newcomer.killed is not None and newcomer.id == a.id == b.id
            assert_copies_agree(server.url, "restart", a, b, newcomer)
    finally:
        server.stop()


def test_a_write_back_cut_half_way_is_counted_once(own_redis: RedisServer, proxy: Proxy) -> None:
    import hashlib

    with structlog.testing.capture_logs():
        run = shared(proxy.url, "cut")
        for i in range(5):
            run.bind(step)(i)
        proxy.down()
        for i in range(50):
            run.bind(step)(("outage", i))
        assert run.stats().locally_judged == 50
        own_redis.client().script_load(scripts.MERGE)  # the write-back is one EVALSHA
        proxy.cut_on(hashlib.sha1(scripts.MERGE.encode()).hexdigest().encode())
        proxy.up()
        until(lambda: recovered(run))
    assert proxy.cuts == 1  # Redis wrote it back, the answer was lost, it was written again
    assert counted(own_redis, "cut") == 55 == seen_by_a_newcomer(own_redis, "cut")
    assert run.stats().calls == 55
    assert_copies_agree(own_redis.url, "cut", run)


def test_a_slow_link_costs_a_call_no_more_than_the_time_budget_and_counts_each_call_once(
    own_redis: RedisServer, proxy: Proxy
) -> None:
    """The budget is a quarter of a second and the link four times slower: a busy machine (a
    shared CI runner) delays a round trip by tens of milliseconds, not by that much. With a
    50 ms budget, the run's very first read could time out there, which lost the calls made
    meanwhile (the next test)."""
    with structlog.testing.capture_logs():
        run = shared(proxy.url, "slow", store_timeout=0.25)
        for i in range(3):
            run.bind(step)(i)
        proxy.delay = 1.0  # every answer comes after the time budget: commits land, unanswered
        longest = 0.0
        for i in range(3, 8):
            started = time.monotonic()
            run.bind(step)(i)
            longest = max(longest, time.monotonic() - started)
        proxy.delay = 0.0
        until(lambda: recovered(run))
    assert longest < 0.25 * 3  # waiting for an answer takes 1 s
    assert counted(own_redis, "slow") == 8 == seen_by_a_newcomer(own_redis, "slow")
    assert run.stats().calls == 8
    assert_copies_agree(own_redis.url, "slow", run)


def test_calls_made_before_the_first_read_of_the_run_succeeded_are_written_back(
    own_redis: RedisServer, proxy: Proxy
) -> None:
    """Found under a CPU load: the run's first read timed out, and once the store answered the
    process took the run as Redis had it and dropped the calls it had made meanwhile, from
    Redis and from its own count (budgets undercounted)."""
    with structlog.testing.capture_logs() as logs:
        proxy.delay = 1.0  # slower than the budget from the start
        run = shared(proxy.url, "unread", store_timeout=0.25)
        for i in range(3):
            run.bind(step)(i)
        proxy.delay = 0.0
        until(lambda: recovered(run))
    assert [e["event"] for e in logs] == ["fuzeguard.store_unavailable",
                                          "fuzeguard.store_recovered"]
    assert counted(own_redis, "unread") == 3 == seen_by_a_newcomer(own_redis, "unread")
    assert run.stats().calls == 3


def test_an_async_worker_s_event_loop_is_never_blocked_by_the_store(
    own_redis: RedisServer, proxy: Proxy
) -> None:
    """A loop blocked by a round trip would miss its heartbeat for the whole budget; a busy
    machine delays it by tens of milliseconds: the budget is half a second, the link slower."""
    timeout = 0.5

    @guard(layers=["limits"])
    async def astep(i: Any) -> Any:
        return i

    async def main() -> tuple[float, int, fuzeguard.Run]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def heartbeat() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        beat = asyncio.create_task(heartbeat())
        made = 0
        async with shared(proxy.url, "async-link", store_timeout=timeout) as run:
            for i in range(3):
                await astep(i)
                made += 1
            proxy.delay = 1.5
            for i in range(3, 8):
                await astep(i)
                made += 1
            proxy.delay = 0.0
            for i in range(8, 500):
                await astep(i)
                made += 1
                if run._store.outage is None:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.01)
            done.set()
            await beat
        return max(gaps), made, run

    with structlog.testing.capture_logs():
        longest, made, run = asyncio.run(main())
    assert longest < timeout
    assert counted(own_redis, "async-link") == made == seen_by_a_newcomer(own_redis, "async-link")
    assert_copies_agree(own_redis.url, "async-link", run)


def test_memory_stays_bounded_during_a_ten_thousand_call_outage(
    own_redis: RedisServer, proxy: Proxy
) -> None:
    with structlog.testing.capture_logs():
        run = shared(proxy.url, "long-outage")
        run.bind(step)(0)
        proxy.down()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(10_000):
                run.bind(step)(("outage", i))
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(run._store.outage.pending) == 1  # type: ignore[attr-defined]
        proxy.up()
        until(lambda: recovered(run))
    assert grown < 1_000_000
    assert counted(own_redis, "long-outage") == 10_001 == seen_by_a_newcomer(own_redis, "long-outage")
    assert_copies_agree(own_redis.url, "long-outage", run)


@guard(name="failing_lookup", early_warnings=0)  # the kill's replication, not its grading
def failing_lookup(x: str) -> str:
    raise KeyError(f"{x} not found")


def repeated(run: fuzeguard.Run, times: int) -> list[str]:
    """``failing_lookup("same")`` made ``times`` times in ``run``: what each did."""
    out = []
    for _ in range(times):
        try:
            run.bind(failing_lookup)("same")
        except KeyError:
            out.append("ran")
        except LoopDetected:
            out.append("refused")
    return out


def test_a_kill_made_during_an_outage_stands_after_others_moved_past_a_snapshot(
    own_redis: RedisServer, proxy: Proxy
) -> None:
    """Third review e05: the process killed during an outage reloaded its copy from the
    snapshot another process committed meanwhile and wrote its kill back without booking it:
    Redis said killed, and the process that made the kill ran the loop again."""
    with structlog.testing.capture_logs():
        a = shared(proxy.url, "snapshotted")
        a.bind(step)(-1)
        proxy.down()
        assert repeated(a, 3) == ["ran", "ran", "refused"]
        with shared(own_redis.url, "snapshotted") as b:
            for i in range(2 * replica.SNAPSHOT_EVERY):
                b.bind(step)(i)
        proxy.up()
        until(lambda: recovered(a))
        assert a.killed is not None
        assert a.stats().calls == 3 + 2 * replica.SNAPSHOT_EVERY  # its own outage calls too
        assert repeated(a, 1) == ["refused"]
        assert_copies_agree(own_redis.url, "snapshotted", a, b)
    assert own_redis.client().hget("fuzeguard:{snapshotted}:m", "killed") == b"1"


def test_a_run_closed_during_an_outage_writes_its_calls_and_kill_back_once_redis_answers(
    own_redis: RedisServer, proxy: Proxy
) -> None:
    """Third review e13: closing a shared run during an outage dropped what it did meanwhile
    (its calls and kill) without a word, and the task retried elsewhere repeated the loop."""
    with structlog.testing.capture_logs() as logs:
        with shared(proxy.url, "closed-out", store_timeout=0.2) as a:
            proxy.down()
            assert repeated(a, 3) == ["ran", "ran", "refused"]
        pending = [e for e in logs if e["event"] == "fuzeguard.store_backlog_pending"]
        # Its two calls: written in the outage's sums, or sent with no answer (in doubt).
        assert [(e["calls"] + e["in_doubt"], e["killed"]) for e in pending] == [(2, True)]
        proxy.up()
        with shared(own_redis.url, "closed-out") as retried:  # the task, tried again
            assert repeated(retried, 1) == ["refused"]
            assert retried.stats().calls == 2
        assert_copies_agree(own_redis.url, "closed-out", a, retried)


def test_a_write_back_never_made_is_logged_with_what_was_lost(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fuzeguard._private.store import backlog

    monkeypatch.setattr(backlog, "RETRY_EVERY", 0.01)
    with structlog.testing.capture_logs() as logs:
        with shared(proxy.url, "never-back", store_timeout=0.2, store_ttl=0.05) as a:
            proxy.down()
            repeated(a, 3)
        until(lambda: any(e["event"] == "fuzeguard.store_backlog_lost" for e in logs))
    lost = [e for e in logs if e["event"] == "fuzeguard.store_backlog_lost"]
    assert [(e["log_level"], e["calls"] + e["in_doubt"], e["killed"]) for e in lost] == [
        ("error", 2, True)]
