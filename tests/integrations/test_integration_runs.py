"""Which run an integration judges a tool call in: one run per agent invocation, the user's run
when one is open, a child run for a nested invocation, one run per key for a conversation."""

from __future__ import annotations

import asyncio
import gc

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.events import RunClosed
from fuzeguard.integrations._shared.calls import ToolCalls, final_answer, stop_message, with_notes
from fuzeguard.integrations._shared.runs import InvocationRuns, KeyedRuns, invocation, user_run


def _loop(calls: ToolCalls, n: int) -> list[object]:
    return [calls.call("search", {"q": "same"}, lambda: "same")[0] for _ in range(n)]


def test_each_invocation_is_a_run_of_its_own_when_the_user_opened_none() -> None:
    calls = ToolCalls()
    with invocation("agent") as first:
        outcomes = _loop(calls, 5)
    assert outcomes[-1].killed is not None  # type: ignore[attr-defined]
    with invocation("agent") as second:
        outcome = _loop(calls, 1)[0]
    assert first is not second
    assert outcome.runs  # type: ignore[attr-defined]
    assert fuzeguard.current_run() is not first and fuzeguard.current_run() is not second


def test_concurrent_invocations_never_count_against_each_other() -> None:
    calls = ToolCalls()

    async def request(i: int) -> bool:
        with invocation("agent"):
            outcome, _ = await calls.acall("search", {"q": "laptops"}, _answer)
            return outcome.runs

    async def _answer() -> str:
        await asyncio.sleep(0)
        return "3 results"

    async def main() -> list[bool]:
        return await asyncio.gather(*(request(i) for i in range(8)))

    assert asyncio.run(main()) == [True] * 8


def test_a_run_the_user_opened_wins_over_the_invocation() -> None:
    with fuzeguard.run("ticket") as mine:
        assert user_run() is mine
        with invocation("agent") as run:
            assert run is mine
    assert user_run() is None


def test_a_nested_invocation_is_a_child_run_whose_calls_count_toward_its_parent() -> None:
    calls = ToolCalls()
    with invocation("outer") as outer:
        calls.call("plan", {}, lambda: "ok")
        with invocation("inner") as inner:
            assert inner is not outer
            assert user_run() is None
            for i in range(3):
                calls.call("step", {"i": i}, lambda: "ok")
        with invocation("second") as second:
            assert second is not inner
    assert (outer.stats().calls, inner.stats().calls) == (4, 3)


def test_the_loop_detected_of_a_kill_reports_the_run_that_was_killed() -> None:
    calls = ToolCalls()
    with invocation("agent") as run:
        outcome = _loop(calls, 5)[-1]
    error = outcome.error()  # type: ignore[attr-defined]
    assert isinstance(error, LoopDetected)
    assert error.stats.run_id == run.id and error.stats.calls == 4 and error.stats.killed


def test_invocation_runs_keep_one_run_per_owner_and_close_it_when_the_owner_goes() -> None:
    class State:
        pass

    runs = InvocationRuns()
    a, b = State(), State()
    assert runs.run_for(a, "agent") is runs.run_for(a, "agent")
    assert runs.run_for(a, "agent") is not runs.run_for(b, "agent")
    closed = []
    run_b = runs.run_for(b, "agent")
    run_b.subscribe(lambda e: closed.append(e), RunClosed)
    del b
    gc.collect()
    assert len(closed) == 1
    with fuzeguard.run() as mine:
        assert runs.run_for(a, "agent") is mine


def test_invocation_runs_key_an_owner_without_weak_references_by_id() -> None:
    runs = InvocationRuns()
    owner = {"thread": 1}
    assert runs.run_for(owner, "agent") is runs.run_for(owner, "agent")
    run = runs.run_for(owner, "agent")
    runs.end(owner)
    assert runs.run_for(owner, "agent") is not run


def test_keyed_runs_make_a_conversation_of_several_invocations_one_run() -> None:
    conversations = KeyedRuns("chat", limit=2)
    calls = ToolCalls()
    for _ in range(5):
        with conversations.run_for("thread-1"), invocation("agent"):
            outcome, _ = calls.call("search", {"q": "same"}, lambda: "same")
    assert outcome.killed is not None
    with conversations.run_for("thread-2"), invocation("agent"):
        assert calls.call("search", {"q": "same"}, lambda: "same")[0].runs
    conversations.get("thread-3")
    assert len(conversations) == 2


def test_a_warned_result_carries_a_note_and_a_kill_a_final_answer() -> None:
    calls = ToolCalls(on_loop="warn")
    with fuzeguard.run():
        outcomes = _loop(calls, 4)
    warned = outcomes[-1].warning  # type: ignore[attr-defined]
    assert warned is not None and outcomes[0].warning is None  # type: ignore[attr-defined]
    assert with_notes("3 results", outcomes[-1]).endswith(warned.message)
    assert with_notes({"a": 1}, outcomes[-1]) == {"a": 1}
    assert final_answer(warned).startswith("Stopped: the agent was looping")
    assert "no tool will run again" in stop_message(warned)
