"""Runs: context scoping, threads and tasks, exact counts, sticky kills, stats, reset, turns (SPEC §2)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import fuzeguard
from fuzeguard import FuzeguardError, LoopDetected, guard


def make_tool(name: str = "tool", **options: object):  # type: ignore[no-untyped-def]
    def tool(x: object) -> object:
        return x

    tool.__name__ = name
    return guard(tool, **options)


def test_run_is_current_inside_with_and_restored_after() -> None:
    outer = fuzeguard.current_run()
    with fuzeguard.run("a") as r:
        assert fuzeguard.current_run() is r
    assert fuzeguard.current_run() is outer


def test_async_with_opens_a_run() -> None:
    async def main() -> None:
        async with fuzeguard.run("a") as r:
            assert fuzeguard.current_run() is r

    asyncio.run(main())


def test_nested_run_is_its_own_run_while_open() -> None:
    tool = make_tool()
    with fuzeguard.run("outer") as outer:
        tool(1)
        with fuzeguard.run("inner") as inner:
            tool(2)
            tool(3)
        tool(4)
    assert outer.stats().calls == 2
    assert inner.stats().calls == 2


def test_calls_outside_any_run_go_to_the_implicit_run() -> None:
    tool = make_tool()
    tool(1)
    tool(2)
    implicit = fuzeguard.current_run()
    assert implicit.name == "implicit"
    assert implicit.stats().calls == 2


def test_asyncio_tasks_created_inside_a_run_belong_to_it() -> None:
    tool = make_tool()

    async def work(i: int) -> None:
        await asyncio.sleep(0)
        tool(i)

    async def main() -> int:
        async with fuzeguard.run() as r:
            await asyncio.gather(*(asyncio.create_task(work(i)) for i in range(10)))
            return r.stats().calls

    assert asyncio.run(main()) == 10


def test_asyncio_to_thread_carries_the_run() -> None:
    tool = make_tool()

    async def main() -> int:
        async with fuzeguard.run() as r:
            await asyncio.to_thread(tool, 1)
            return r.stats().calls

    assert asyncio.run(main()) == 1


def test_bind_carries_the_run_into_an_executor_thread() -> None:
    tool = make_tool()
    with fuzeguard.run() as r, ThreadPoolExecutor(4) as pool:
        list(pool.map(r.bind(tool), range(8)))
    assert r.stats().calls == 8


def test_attach_as_initializer_makes_a_pool_join_the_run() -> None:
    tool = make_tool()
    with fuzeguard.run() as r:
        with ThreadPoolExecutor(4, initializer=r.attach) as pool:
            list(pool.map(tool, range(8)))
        assert r.stats().calls == 8


def test_plain_thread_without_bind_does_not_join_the_run() -> None:
    """Threads do not inherit context variables: documented, so users bind them."""
    tool = make_tool()
    with fuzeguard.run() as r:
        t = threading.Thread(target=tool, args=(1,))
        t.start()
        t.join()
    assert r.stats().calls == 0


def test_sixteen_threads_times_a_thousand_calls_count_exactly() -> None:
    """Thread safety: 16 threads x 1,000 calls into one run record exactly 16,000 calls."""
    tools = [make_tool(f"tool{i % 4}", max_iterations=100_000) for i in range(16)]
    barrier = threading.Barrier(16)

    def worker(i: int) -> None:
        barrier.wait()
        for j in range(1000):
            tools[i](f"{i}-{j}")

    with fuzeguard.run() as r:
        threads = [threading.Thread(target=r.bind(worker), args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stats = r.stats()
    assert stats.calls == 16_000
    assert stats.calls_by_fn == {f"tool{k}": 4000 for k in range(4)}
    assert stats.detections == 0


def test_two_hundred_concurrent_asyncio_runs_never_see_each_others_calls() -> None:
    @guard(max_iterations=10)
    async def tool(x: int) -> int:
        await asyncio.sleep(0)
        return x

    async def one(i: int) -> tuple[int, int]:
        async with fuzeguard.run(f"r{i}") as r:
            for j in range(10):
                await tool(j)
            return r.stats().calls, r.stats().detections

    async def main() -> list[tuple[int, int]]:
        return await asyncio.gather(*(one(i) for i in range(200)))

    assert asyncio.run(main()) == [(10, 0)] * 200


def test_kill_is_sticky_for_every_later_call_in_the_run() -> None:
    """A framework that swallows LoopDetected and retries cannot keep a dead run going."""
    ran = []

    @guard(max_iterations=1)
    def first(x: int) -> int:
        ran.append(x)
        return x

    other = make_tool("other")
    with fuzeguard.run() as r:
        first(1)
        with pytest.raises(LoopDetected) as killed:
            first(2)
        with pytest.raises(LoopDetected) as again:
            other(3)
        with pytest.raises(LoopDetected):
            first(4)
    assert ran == [1]
    assert again.value.detection == killed.value.detection
    assert r.stats().killed
    assert r.killed is not None and r.killed.layer == "iterations"


def test_kill_in_one_run_does_not_affect_another() -> None:
    tool = make_tool(max_iterations=1)
    with fuzeguard.run(), pytest.raises(LoopDetected):
        tool(1)
        tool(2)
    with fuzeguard.run() as fresh:
        assert tool(3) == 3
    assert fresh.stats().calls == 1


def test_loop_detected_carries_the_detection_and_the_stats() -> None:
    tool = make_tool(max_iterations=2)
    with fuzeguard.run("ticket-4711") as r, pytest.raises(LoopDetected) as info:
        for i in range(3):
            tool(i)
    exc = info.value
    assert exc.detection.layer == "iterations"
    assert exc.detection.run_id == r.id
    assert exc.detection.call_index == 3
    assert exc.detection.action == "kill"
    assert exc.stats.calls == 2
    assert exc.stats.name == "ticket-4711"
    assert isinstance(exc, RuntimeError)


def test_stats_report_calls_errors_cost_detections_and_limits() -> None:
    """groq-code-cli /stats: usage against every limit."""

    @guard(cost=0.5)
    def flaky(x: int) -> int:
        if x % 2:
            raise ValueError(x)
        return x

    with fuzeguard.run("s", max_calls=10, max_cost=5) as r:
        for i in range(4):
            try:
                flaky(i)
            except ValueError:
                pass
    s = r.stats()
    assert (s.calls, s.errors, s.consecutive_errors, s.cost) == (4, 2, 1, 2.0)
    assert s.calls_by_fn == {"flaky": 4}
    assert s.limits["max_calls"].used == 4 and s.limits["max_calls"].limit == 10
    assert s.limits["max_cost"].used == 2.0 and s.limits["max_cost"].limit == 5
    assert s.limits["max_iterations"].limit == 25  # the built-in cap in force
    assert s.limits["max_errors"].limit is None


def test_reset_clears_history_counters_and_a_kill() -> None:
    """groq-code-cli /clear: resets all counters and timers."""
    tool = make_tool(max_iterations=1)
    with fuzeguard.run() as r:
        tool(1)
        with pytest.raises(LoopDetected):
            tool(2)
        r.reset()
        assert tool(3) == 3
        assert r.stats().calls == 1
        assert r.stats().resets == 1
        assert not r.stats().killed


def test_reset_is_bounded_by_max_resets() -> None:
    """groq-code-cli: at most 2 resets by default."""
    with fuzeguard.run() as r:
        r.reset()
        r.reset()
        with pytest.raises(FuzeguardError, match="max_resets = 2"):
            r.reset()


def test_max_resets_is_configurable_per_run() -> None:
    with fuzeguard.run(max_resets=0) as r, pytest.raises(FuzeguardError):
        r.reset()


def test_end_turn_restarts_the_per_turn_budget() -> None:
    """groq-code-cli: the consecutive tool call counter resets when the model answers."""
    tool = make_tool()
    with fuzeguard.run(max_calls_per_turn=2) as r:
        tool(1)
        tool(2)
        r.end_turn()
        tool(3)
        tool(4)
        assert r.stats().turn == 2
        with pytest.raises(LoopDetected) as info:
            tool(5)
    assert info.value.detection.pattern == "max_calls_per_turn"


def test_history_is_bounded_whatever_the_number_of_calls() -> None:
    """SPEC §3: memory per run does not grow with the number of calls."""
    tool = make_tool(max_iterations=10**9)
    with fuzeguard.run() as r:
        for i in range(5000):
            tool(i)
    assert len(r.history) <= 100  # the longest window a default layer reads (cycle: 5 x 20 laps)
    assert len(r._by_args) <= len(r.history)


def test_run_accepts_a_dict_config_and_settings_overrides() -> None:
    tool = make_tool()
    with fuzeguard.run(config={"defaults": {"max_iterations": 1}}), pytest.raises(LoopDetected):
        tool(1)
        tool(2)


def test_run_rejects_unknown_settings_with_a_suggestion() -> None:
    with pytest.raises(TypeError, match="did you mean 'max_calls'"):
        fuzeguard.run(max_call=3)


def test_first_use_of_the_implicit_run_is_logged_once() -> None:
    import structlog.testing

    tool = make_tool()
    with structlog.testing.capture_logs() as logs:
        tool(1)
        tool(2)
    assert [e["event"] for e in logs] == ["fuzeguard.implicit_run"]


def _events(logs: list[dict[str, object]], name: str) -> list[dict[str, object]]:
    return [e for e in logs if e["event"] == name]


def test_a_run_created_without_with_is_named_when_a_call_misses_it() -> None:
    """A newcomer's review: ``run = fuzeguard.run("x")`` without ``with`` sent the calls to the
    implicit run, and the message did not name the run that was never entered."""
    import structlog.testing

    tool = make_tool()
    run = fuzeguard.run("ticket-4711")
    with structlog.testing.capture_logs() as logs:
        tool(1)
        tool(2)
    [warning] = _events(logs, "fuzeguard.run_not_entered")
    assert warning["run_name"] == "ticket-4711" and warning["log_level"] == "warning"
    message = str(warning["message"])
    assert "fuzeguard.run('ticket-4711')) but never entered" in message
    assert "with fuzeguard.run('ticket-4711') as run:" in message
    assert run.stats().calls == 0


def test_a_run_entered_in_time_is_not_warned_about() -> None:
    import structlog.testing

    tool = make_tool()
    with structlog.testing.capture_logs() as logs:
        with fuzeguard.run("ticket"):
            tool(1)
        tool(2)  # after the run: the implicit run, as meant
    assert [e["event"] for e in logs] == ["fuzeguard.implicit_run"]


def test_a_tool_run_in_a_thread_pool_inside_a_run_says_why_it_missed_the_run() -> None:
    """A newcomer's review: tools run in the application's ThreadPoolExecutor inside a run landed
    in the implicit run, with a message naming neither the cause nor the fix."""
    import structlog.testing

    tool = make_tool()
    with structlog.testing.capture_logs() as logs, fuzeguard.run("ticket") as run:
        with ThreadPoolExecutor(1, thread_name_prefix="tools") as pool:
            pool.submit(tool, 1).result()
            pool.submit(tool, 2).result()
            pool.submit(run.bind(tool), 3).result()  # the fix: the call reaches the run
    [warning] = _events(logs, "fuzeguard.call_outside_run")
    message = str(warning["message"])
    assert "in thread 'tools_0'" in message and "run \"ticket\" is open in thread 'MainThread'" in message
    assert "executor.submit(run.bind(tool), ...)" in message and "initializer=run.attach" in message
    assert run.stats().calls == 1


def test_calls_after_a_resume_outside_the_with_block_are_told_to_enter_it_again() -> None:
    """A newcomer's review: ``run.resume()`` after the ``with`` block had ended sent the next
    call silently to the implicit run."""
    import structlog.testing

    tool = make_tool()
    with fuzeguard.run("ticket") as run, pytest.raises(LoopDetected):
        for _ in range(5):
            tool("same")
    with structlog.testing.capture_logs() as logs:
        run.resume(extra_calls=5)
        tool("other")
    [warning] = _events(logs, "fuzeguard.run_not_entered")
    assert "resumed after its `with` block ended" in str(warning["message"])
    assert "`with run:`" in str(warning["message"])


def test_run_decorates_a_function_with_a_fresh_run_per_call() -> None:
    """tenacity and stamina users write ``@fuzeguard.run("x")``: it was a TypeError."""
    tool = make_tool()
    seen: list[tuple[str | None, int]] = []

    @fuzeguard.run("ticket", max_calls=10)
    def task(n: int) -> str:
        """Handle one ticket."""
        for i in range(n):
            tool(i)
        run = fuzeguard.current_run()
        seen.append((run.name, run.stats().calls))
        return "done"

    assert task(2) == "done" and task(3) == "done"
    assert seen == [("ticket", 2), ("ticket", 3)]  # each call its own run
    assert task.__name__ == "task" and task.__doc__ == "Handle one ticket."


def test_run_decorates_a_coroutine_function() -> None:
    tool = make_tool()

    @fuzeguard.run("async-ticket")
    async def task() -> tuple[str | None, int]:
        tool(1)
        run = fuzeguard.current_run()
        return run.name, run.stats().calls

    assert asyncio.run(task()) == ("async-ticket", 1)


def test_run_as_a_decorator_of_a_generator_says_how_to_open_the_run() -> None:
    def steps():  # type: ignore[no-untyped-def]
        yield 1

    with pytest.raises(TypeError, match="for a generator, open the run inside it"):
        fuzeguard.run("x")(steps)
