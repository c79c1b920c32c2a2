"""One run, many tasks, threads and event loops; and an implicit run that one detection cannot take
down for good (docs/concepts.md, "One run, many tasks, threads and loops" and "The implicit run")."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import LoopDetected, guard


def test_a_run_entered_by_two_overlapping_tasks_serves_both() -> None:
    """r12: the second task's exit reset the first task's token: ValueError in both."""
    shared = fuzeguard.run("shared")
    second_inside = asyncio.Event()
    first_left = asyncio.Event()

    @guard(name="a", layers=["limits"])
    async def a(q: str) -> str:
        return q

    async def first() -> bool:
        async with shared:
            await a("first")
            await second_inside.wait()
        first_left.set()
        return fuzeguard.current_run() is shared

    async def second() -> bool:
        async with shared:
            await a("second")
            second_inside.set()
            await first_left.wait()  # still inside after the first left
            await a("second again")
            inside = fuzeguard.current_run() is shared
        return inside and fuzeguard.current_run() is not shared

    async def main() -> list[bool]:
        return await asyncio.gather(first(), second())

    assert asyncio.run(main()) == [False, True]
    assert shared.stats().calls == 3


def test_a_run_used_from_two_event_loops_counts_both_and_closes_its_trace_last(
    tmp_path: Path,
) -> None:
    """r11: a run entered with ``async with`` in two threads, each with its own event loop,
    crashed both; the trace was closed while one was still inside."""
    trace = tmp_path / "t.jsonl"
    shared = fuzeguard.run("shared", trace=str(trace))
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []
    after_exit: list[object] = []

    @guard(name="a", layers=["limits"])
    async def a(q: str) -> str:
        return q

    async def first() -> None:
        async with shared:
            await a("x1")
            a_inside.set()
            assert b_inside.wait(30)
        after_exit.append(fuzeguard.current_run())
        a_left.set()

    async def second() -> None:
        assert a_inside.wait(30)
        async with shared:
            await a("y1")
            b_inside.set()
            assert a_left.wait(30)
            await a("y2-still-inside")

    def in_own_loop(coro: object) -> None:
        try:
            asyncio.run(coro())  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    with structlog.testing.capture_logs():
        threads = [threading.Thread(target=in_own_loop, args=(c,)) for c in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert after_exit != [shared]
    assert shared.stats().calls == 3
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [line["args"]["q"] for line in lines] == ["x1", "y1", "y2-still-inside"]


def test_runs_left_in_another_order_than_entered_restore_each_context() -> None:
    outer, inner = fuzeguard.run("outer"), fuzeguard.run("inner")
    outer.__enter__()
    inner.__enter__()
    outer.__exit__(None, None, None)
    assert fuzeguard.current_run() is inner
    inner.__exit__(None, None, None)
    assert fuzeguard.current_run().name == "implicit"


def test_a_kill_in_a_shared_run_stops_every_task_in_it() -> None:
    shared = fuzeguard.run("shared")

    @guard(name="same")
    async def same(q: str) -> str:
        return "same"

    async def looping() -> None:
        async with shared:
            for _ in range(6):
                await same("q")

    async def other() -> None:
        async with shared:
            await same("something else")

    async def main() -> None:
        with pytest.raises(LoopDetected):
            await looping()
        with pytest.raises(LoopDetected):
            await other()

    with structlog.testing.capture_logs():
        asyncio.run(main())


# --------------------------------------------------------------------------- the implicit run


def test_one_bad_request_in_a_server_without_runs_refuses_only_itself() -> None:
    """r24: after one kill in the implicit run, 975 of the next 1,000 requests were refused."""

    @guard(name="stuck")
    def stuck(q: str) -> str:
        return "same"

    @guard(name="get_user")
    def get_user(uid: int) -> dict[str, int]:
        return {"uid": uid}

    with structlog.testing.capture_logs():
        with pytest.raises(LoopDetected):
            for _ in range(6):
                stuck("q")  # one bad request, no fuzeguard.run()
        served = [get_user(i) for i in range(1000)]
    assert len(served) == 1000


def test_after_a_kill_the_next_call_outside_any_run_goes_to_a_fresh_implicit_run() -> None:
    tool = guard(lambda q: "same", name="tool")
    with structlog.testing.capture_logs() as logs:
        killed = fuzeguard.current_run()
        with pytest.raises(LoopDetected):
            for _ in range(6):
                tool("q")
        assert fuzeguard.current_run() is not killed
        assert tool("other") == "same"  # a fresh history: the first call of the new run
    fresh = fuzeguard.current_run()
    assert killed.stats().killed and not fresh.stats().killed
    assert fresh.stats().calls == 1
    restarted = [e for e in logs if e["event"] == "fuzeguard.implicit_run_restarted"]
    assert len(restarted) == 1
    assert restarted[0]["previous_run_id"] == killed.id and restarted[0]["run_id"] == fresh.id
    assert restarted[0]["log_level"] == "warning"


def test_a_kill_of_the_implicit_run_sticks_for_the_call_that_looped() -> None:
    """Before, a caller that caught LoopDetected and went on ran the tool 23 times in 30
    identical calls: each kill restarted the implicit run with an empty history."""
    ran = []

    @guard
    def tool(q: str) -> str:
        ran.append(q)
        return "same"

    stopped = 0
    with structlog.testing.capture_logs() as logs:
        for _ in range(30):
            try:
                tool("q")
            except LoopDetected as exc:
                stopped += 1
                assert exc.detection.layer == "dedup" and exc.detection.fn == "tool"
        assert tool("another question") == "same"  # other calls go on in the fresh run
    assert ran.count("q") <= 4 and stopped == 30 - ran.count("q")  # ran only until the kill
    assert len([e for e in logs if e["event"] == "fuzeguard.implicit_run_restarted"]) == 1
    assert not fuzeguard.current_run().stats().killed


def test_the_implicit_run_judges_a_killed_call_afresh_after_the_stuck_ttl() -> None:
    """Third review, an observation: a server killed for one user's loop refused that call
    (``get_status(5)``) to every user for the process's life."""
    from freezegun import freeze_time

    from fuzeguard._private.runs.implicit import ImplicitRun

    ran: list[int] = []

    @guard
    def read_job(job: int) -> str:
        ran.append(job)
        return "running"

    with freeze_time("2026-01-01 12:00:00") as clock, structlog.testing.capture_logs():
        with pytest.raises(LoopDetected):
            for _ in range(6):
                read_job(5)
        with pytest.raises(LoopDetected):
            read_job(5)  # another user, at once: refused
        clock.tick(ImplicitRun.STUCK_TTL - 1)
        with pytest.raises(LoopDetected):
            read_job(5)
        clock.tick(2)
        assert read_job(5) == "running"  # judged afresh
    assert ran == [5] * 5  # four before the kill, one once the refusal lapsed


def test_a_kill_stays_sticky_inside_an_explicit_run() -> None:
    tool = guard(lambda q: "same", name="tool")
    other = guard(lambda q: q, name="other")
    with structlog.testing.capture_logs(), fuzeguard.run():
        with pytest.raises(LoopDetected):
            for _ in range(6):
                tool("q")
        with pytest.raises(LoopDetected):
            other("fresh")
