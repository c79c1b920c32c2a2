"""Calls in flight count (SPEC §4): a call that has started and not finished is part of the run for
every layer that counts calls, its result unknown; concurrent identical calls are judged like
sequential ones (LangGraph's ToolNode and the OpenAI Agents SDK run parallel tool calls at once)."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import LoopDetected, guard


def _outcomes(results: list[Any]) -> list[str]:
    return [type(r).__name__ if isinstance(r, BaseException) else "ran" for r in results]


def test_six_identical_gathered_calls_are_stopped_at_the_third_start() -> None:
    """r22: all six ran and nothing fired, because dedup only counted completed calls."""
    gate = asyncio.Event()

    @guard(name="web_search")
    async def web_search(query: str) -> str:
        await gate.wait()  # all six are in flight before any returns
        return "3 results"

    async def open_gate() -> None:
        await asyncio.sleep(0)
        gate.set()

    async def main() -> tuple[list[Any], Any]:
        async with fuzeguard.run() as run:
            results = await asyncio.gather(
                *(web_search("same") for _ in range(6)), open_gate(), return_exceptions=True
            )
            return results[:6], run.stats()

    with structlog.testing.capture_logs():
        results, stats = asyncio.run(main())
    assert _outcomes(results) == ["ran"] * 2 + ["LoopDetected"] * 4
    assert stats.calls == 2
    assert stats.detections_by_layer == {"dedup": 1}  # the kill at the 3rd


def test_six_identical_calls_from_threads_are_stopped_at_the_third_start() -> None:
    """r10: six threads calling at once all ran."""
    release = threading.Event()
    arrived = threading.Semaphore(0)
    outcomes: list[str] = []

    @guard(name="slow")
    def slow(query: str) -> str:
        arrived.release()
        release.wait(30)
        return "same"

    def worker() -> None:
        try:
            slow("q")
            outcomes.append("ran")
        except LoopDetected:
            outcomes.append("LoopDetected")
            arrived.release()

    with structlog.testing.capture_logs(), fuzeguard.run() as run:
        threads = [threading.Thread(target=run.bind(worker)) for _ in range(6)]
        for t in threads:
            t.start()
        for _ in range(6):  # two calls inside the tool, four refused: all decided
            assert arrived.acquire(timeout=30)
        release.set()
        for t in threads:
            t.join()
    assert sorted(outcomes) == ["LoopDetected"] * 4 + ["ran"] * 2
    assert run.stats().calls == 2


def test_a_call_in_flight_is_in_the_history_with_an_unknown_result() -> None:
    """A call decided while another runs (here: a tool called from inside a tool) sees the
    running one in the history, its result unknown."""
    seen: list[tuple[str, bool, bool]] = []

    @dataclass(frozen=True, slots=True)
    class Look:
        name: ClassVar[str] = "look"

        def check(self, run: Any, call: Any) -> None:
            seen.extend((r.fn, r.result_fp is None, r.in_flight) for r in run.history)

    @guard(name="inner", layers=[Look()])
    def inner(x: int) -> str:
        return "inner done"

    @guard(name="outer")
    def outer(x: int) -> str:
        return inner(x)

    with fuzeguard.run() as run:
        outer(1)
    assert seen == [("outer", True, True)]
    # The outer call's record took the place of its in-flight one: both are complete now.
    assert [(r.fn, r.index, r.result_fp is not None, r.in_flight) for r in run.history] == [
        ("outer", 1, True, False), ("inner", 2, True, False)
    ]


def test_a_completed_call_takes_the_place_of_its_in_flight_record() -> None:
    gate = asyncio.Event()

    @guard(name="fetch")
    async def fetch(url: str) -> str:
        await gate.wait()
        return "<html>" + url

    async def open_gate() -> None:
        await asyncio.sleep(0)
        gate.set()

    async def main() -> Any:
        async with fuzeguard.run() as run:
            await asyncio.gather(*(fetch(u) for u in "abc"), open_gate())
            return run

    run = asyncio.run(main())
    assert [r.index for r in run.history] == [1, 2, 3]
    assert all(r.result_fp is not None for r in run.history)
    assert {len(run.same_args(r.args_fp)) for r in run.history} == {1}


def test_a_cancelled_call_leaves_no_record() -> None:
    started = asyncio.Event()

    @guard(name="hang")
    async def hang(x: int) -> None:
        started.set()
        await asyncio.Event().wait()

    async def main() -> Any:
        async with fuzeguard.run() as run:
            task = asyncio.create_task(hang(1))
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return run

    run = asyncio.run(main())
    assert list(run.history) == [] and run.same_args(b"") == ()
    assert run.stats().calls == 1


def test_a_generator_closed_early_leaves_no_record() -> None:
    @guard(name="rows")
    def rows(n: int) -> Any:
        yield from range(n)

    with fuzeguard.run() as run:
        stream = rows(10)
        next(stream)
        stream.close()
    assert list(run.history) == []


def test_sequential_calls_see_only_completed_records() -> None:
    """Unchanged sequential behaviour: by the time the next call starts, the previous one is a
    completed record."""
    seen: list[bool] = []

    @guard(name="step", layers=[])
    def step(n: int) -> int:
        seen.append(all(r.result_fp is not None for r in list(fuzeguard.current_run().history)[:-1]))
        return n

    with fuzeguard.run():
        for n in range(5):
            step(n)
    assert seen == [True] * 5


def test_concurrent_calls_with_different_arguments_are_not_a_cycle() -> None:
    """Concurrent calls start in whatever order the scheduler picks: two tools called in parallel
    with ever new arguments interleave their names, which is no ping-pong."""
    gate = asyncio.Event()

    @guard(name="read")
    async def read(path: str) -> str:
        await gate.wait()
        return "text of " + path

    @guard(name="stat")
    async def stat(path: str) -> str:
        await gate.wait()
        return "size of " + path

    async def open_gate() -> None:
        await asyncio.sleep(0)
        gate.set()

    async def main() -> Any:
        async with fuzeguard.run() as run:
            calls = [(read if i % 2 else stat)(f"file{i}") for i in range(12)]
            await asyncio.gather(*calls, open_gate())
            return run

    run = asyncio.run(main())
    assert run.stats().calls == 12 and run.detections == ()


def test_a_call_in_flight_across_a_reset_is_recorded_after_it() -> None:
    """``run.reset()`` while a call runs forgets it as in flight; when it ends it is recorded in
    the fresh history like any completed call."""

    @guard(name="outer")
    def outer(x: int) -> str:
        fuzeguard.current_run().reset()
        return "done"

    with fuzeguard.run() as run:
        outer(1)
        outer(2)  # its reset clears the history, outer(1) included
    assert [(r.fn, r.in_flight, r.result_fp is not None) for r in run.history] == [
        ("outer", False, True)
    ]
