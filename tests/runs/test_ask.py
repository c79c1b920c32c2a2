"""The ``ask`` action: a person answers continue, skip or kill; no answer in time is a kill, and a
continue raises the bar instead of switching the guard off."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from pathlib import Path
from typing import Any

import pytest
import structlog

import fuzeguard
from fuzeguard import ConfigError, LoopDetected, guard
from fuzeguard._private.runs.ask import Question
from fuzeguard.testing import capture_detections

# The ask action itself is tested here: the 3rd identical call is a loop acted on at once
# (graded evidence is tested in test_evidence_grades.py).
ACT_AT_ONCE: dict[str, Any] = {"early_warnings": 0, "streak_threshold": 3}


def _tool() -> object:
    @guard(on_loop=["ask", "kill"], **ACT_AT_ONCE)
    def web_search(query: str) -> str:
        return "3 results for " + query

    return web_search


def test_continue_lets_the_call_go_ahead_with_a_warning() -> None:
    asked: list[Question] = []

    def ask(question: Question) -> str:
        asked.append(question)
        return "continue"

    search = _tool()
    with fuzeguard.run("t", ask=ask) as run, capture_detections() as found:
        for _ in range(4):
            assert search("same") == "3 results for same"  # type: ignore[operator]
    assert len(asked) == 1
    assert asked[0].detection.layer == "dedup" and asked[0].fn == "web_search"
    assert asked[0].run is run
    assert found[-1].action == "warn" and run.killed is None


def test_continue_raises_the_bar_instead_of_allowing_always() -> None:
    asked: list[int] = []

    def ask(question: Question) -> str:
        asked.append(question.detection.call_index)
        return "continue"

    search = _tool()
    with fuzeguard.run("t", ask=ask) as run:
        for _ in range(14):
            search("same")  # type: ignore[operator]
    # Asked at the 3rd identical call; then only warned, and asked again past a higher bar
    # each time: never killed (no kill without an answer), never silenced for good.
    assert asked == [3, 6, 12]
    assert run.killed is None


def test_skip_answers_for_the_tool() -> None:
    search = _tool()
    with fuzeguard.run("t", ask=lambda q: "skip") as run:
        for _ in range(2):
            search("same")  # type: ignore[operator]
        answer = search("same")  # type: ignore[operator]
    assert "same arguments" in answer
    assert run.stats().skipped == 1 and run.killed is None


def test_kill_ends_the_run() -> None:
    search = _tool()
    with fuzeguard.run("t", ask=lambda q: "kill") as run, pytest.raises(LoopDetected) as caught:
        for _ in range(4):
            search("same")  # type: ignore[operator]
    assert caught.value.detection.action == "kill" and run.killed is not None


def test_no_answer_within_the_timeout_kills_the_run() -> None:
    release = threading.Event()

    def ask(question: Question) -> str:
        release.wait()  # a person who never answers in time
        return "continue"

    search = _tool()
    try:
        with fuzeguard.run("t", ask=ask, ask_timeout=0) as run, pytest.raises(LoopDetected):
            for _ in range(4):
                search("same")  # type: ignore[operator]
        assert run.killed is not None
    finally:
        release.set()


def test_an_unresolved_future_times_out_as_a_kill() -> None:
    pending: concurrent.futures.Future[str] = concurrent.futures.Future()
    search = _tool()
    with fuzeguard.run("t", ask=lambda q: pending, ask_timeout=0) as run:
        with pytest.raises(LoopDetected):
            for _ in range(4):
                search("same")  # type: ignore[operator]
    assert run.killed is not None


def test_a_future_answered_by_another_thread_is_the_answer() -> None:
    def ask(question: Question) -> concurrent.futures.Future[str]:
        answer: concurrent.futures.Future[str] = concurrent.futures.Future()
        threading.Thread(target=answer.set_result, args=("skip",)).start()
        return answer

    search = _tool()
    with fuzeguard.run("t", ask=ask) as run:
        for _ in range(3):
            search("same")  # type: ignore[operator]
    assert run.stats().skipped == 1


def test_an_async_callback_is_awaited() -> None:
    async def ask(question: Question) -> str:
        await asyncio.sleep(0)
        return "skip"

    search = _tool()
    with fuzeguard.run("t", ask=ask) as run:
        for _ in range(3):
            search("same")  # type: ignore[operator]
    assert run.stats().skipped == 1


def test_an_async_guarded_tool_asks_too() -> None:
    @guard(on_loop=["ask", "kill"], **ACT_AT_ONCE)
    async def fetch(url: str) -> str:
        return "page"

    async def main() -> int:
        async with fuzeguard.run("t", ask=lambda q: "skip") as run:
            for _ in range(3):
                await fetch("https://example.com")
            return run.stats().skipped

    assert asyncio.run(main()) == 1


@pytest.mark.parametrize("callback", [lambda q: "yes", lambda q: 1 / 0, None])
def test_a_wrong_answer_a_failing_callback_or_none_at_all_kills(callback: object) -> None:
    search = _tool()
    with fuzeguard.run("t", ask=callback) as run, pytest.raises(LoopDetected):  # type: ignore[arg-type]
        for _ in range(4):
            search("same")  # type: ignore[operator]
    assert run.killed is not None


def test_ask_is_an_action_of_the_ladder_and_its_callback_must_be_a_function() -> None:
    with pytest.raises(ConfigError, match='"ask"'):
        fuzeguard.Config.from_dict({"defaults": {"on_loop": ["warn", "aks"]}})
    with pytest.raises(TypeError, match="ask="):
        fuzeguard.run(ask="continue")  # type: ignore[arg-type]


def test_replay_of_a_ladder_with_ask_answers_kill_without_asking(tmp_path: Path) -> None:
    from fuzeguard._private.reports.replay import replay

    lines = "".join(f'{{"fn":"web_search","args":{{"q":"x"}},"result":"r","ts":{i}}}\n'
                    for i in range(6))
    trace = tmp_path / "t.jsonl"
    trace.write_text(lines, encoding="utf-8")
    config = fuzeguard.Config.from_dict({"defaults": {"on_loop": ["ask", "kill"]}})
    [summary] = replay([str(trace)], config)
    assert [k.detection.action for k in summary.kills] == ["kill"]
    assert summary.kills[0].call == 5  # warned at the 3rd and 4th (a streak), a loop at the 5th


def test_an_async_tool_awaits_the_answer_off_the_event_loop() -> None:
    """Third review e01: the question waited on the event loop's thread, so every other task of
    the loop stopped, and an answer given through the loop (an approval page served by the app)
    never arrived: the run was killed at ask_timeout."""

    @guard(on_loop=["ask", "kill"], **ACT_AT_ONCE)
    async def fetch(url: str) -> str:
        return "page"

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[str] = asyncio.Queue()
        ticks: list[int] = []

        async def other_task() -> None:  # another session of the server, then the person
            for i in range(5):
                await asyncio.sleep(0)
                ticks.append(i)
            await answers.put("skip")

        def ask(question: Question) -> str:
            return asyncio.run_coroutine_threadsafe(answers.get(), loop).result(timeout=10)

        async with fuzeguard.run("t", ask=ask, ask_timeout=10) as run:
            await fetch("https://example.com")
            await fetch("https://example.com")
            task = asyncio.create_task(other_task())
            await fetch("https://example.com")  # asked: answered by the loop's other task
            await task
            return len(ticks), run.stats().skipped

    assert asyncio.run(main()) == (5, 1)


def test_a_callback_still_hanging_answers_later_questions_kill_at_once() -> None:
    """Third review e09: each unanswered question left a thread (and its run) behind, without
    bound; 200 questions left 200 threads."""
    release = threading.Event()

    def hanging(question: Question) -> str:
        release.wait(30)  # an approval service that never answers
        return "continue"

    search = _tool()
    before = {t for t in threading.enumerate() if t.name == "fuzeguard-ask"}
    try:
        with structlog.testing.capture_logs() as logs:
            for i in range(20):
                with pytest.raises(LoopDetected), fuzeguard.run(f"r{i}", ask=hanging,
                                                                ask_timeout=0.01):
                    for _ in range(4):
                        search("same")  # type: ignore[operator]
        waiting = {t for t in threading.enumerate() if t.name == "fuzeguard-ask"} - before
    finally:
        release.set()
    assert len(waiting) == 1
    reasons = [e["message"] for e in logs if e["event"] == "fuzeguard.ask_unanswered"]
    assert len(reasons) == 20 and "ask_timeout" in reasons[0]
    assert all("still running from an earlier question" in r for r in reasons[1:])


def test_a_dismissed_async_answer_is_a_kill_not_a_cancelled_error() -> None:
    """Third review e10: an async callback whose pending answer was cancelled (the person closed
    the dialog) raised asyncio.CancelledError out of the tool call, which an asyncio agent reads
    as its own task cancelled."""

    async def ask(question: Question) -> str:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        answer.cancel()  # dismissed
        return await answer

    search = _tool()
    with structlog.testing.capture_logs() as logs, pytest.raises(LoopDetected), \
            fuzeguard.run("t", ask=ask) as run:
        for _ in range(4):
            search("same")  # type: ignore[operator]
    assert run.killed is not None
    unanswered = [e for e in logs if e["event"] == "fuzeguard.ask_unanswered"]
    assert "CancelledError" in unanswered[0]["error"]


def test_an_async_generator_tool_awaits_the_answer_off_the_event_loop() -> None:
    """The ``ask`` action from an async generator (a streamed tool) never blocks the event loop
    either: the person answers through the loop's other task."""

    @guard(on_loop=["ask", "kill"], **ACT_AT_ONCE)
    async def stream(url: str) -> Any:
        yield "page"

    async def main() -> tuple[list[list[str]], int]:
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[str] = asyncio.Queue()

        def ask(question: Question) -> str:
            return asyncio.run_coroutine_threadsafe(answers.get(), loop).result(timeout=10)

        async def person() -> None:
            await asyncio.sleep(0)
            await answers.put("continue")

        async with fuzeguard.run("t", ask=ask, ask_timeout=10) as run:
            got = [await _collect(stream("u")), await _collect(stream("u"))]
            third, _ = await asyncio.gather(_collect(stream("u")), person())
            return [*got, third], run.stats().calls

    assert asyncio.run(main()) == ([["page"]] * 3, 3)


async def _collect(chunks: Any) -> list[Any]:
    return [c async for c in chunks]
