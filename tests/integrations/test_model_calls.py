"""Model calls as part of an invocation (``integrations/_shared/model_calls.py``), framework apart: what
is judged, what is only counted, and the limit. The integrations' own tests drive the same
recorder with each framework's real package and a scripted model."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._shared.calls import final_answer
from fuzeguard.integrations._shared.model_calls import ModelCalls, asked


def _record(recorder: ModelCalls, run: Run, times: int, **call: Any) -> list[Any]:
    with capture_logs():
        return [recorder.record(run, **call) for _ in range(times)]


def test_the_same_text_again_and_again_that_does_not_end_the_task_is_ended_at_the_third() -> None:
    """A model that answers the same text turn after turn without the framework taking it as
    final (a reply it cannot parse, a structured output that fails the same way)."""
    calls, run = ModelCalls(), Run("agent", store=None)
    found = _record(calls, run, 3, calls=[], text="Thought: I should search.", rejected=False,
                    final=False)
    assert found[:2] == [None, None]
    assert found[2] is not None and found[2].fn == "model.text"
    assert found[2].message.startswith("You answered with the same text again and again")


def test_the_same_rejected_call_is_ended_and_its_message_names_the_tool() -> None:
    calls, run = ModelCalls(), Run("agent", store=None)
    found = _record(calls, run, 3, calls=[("web_browse", {"url": "x"})], text=None, rejected=True,
                    final=False)
    assert found[2] is not None and found[2].layer == "dedup"
    assert "`web_browse`" in found[2].message


def test_calls_the_framework_accepted_are_counted_never_judged() -> None:
    """A poller's model asks for the same status check every turn: the tool calls are judged in
    the invocation's run, where the poll is known; the model calls are only counted."""
    calls, run = ModelCalls(), Run("agent", store=None)
    found = _record(calls, run, 40, calls=[("get_status", {"job": "j-7"})], text=None,
                    rejected=False, final=False, tokens=120)
    assert found == [None] * 40
    stats = calls.run_of(run).stats()
    assert stats.calls == 40 and stats.cost == 40 * 120 and calls.run_of(run).name == "agent/model"


def test_max_model_calls_refuses_the_call_after_the_limit_before_it_is_made() -> None:
    calls, run = ModelCalls(max_model_calls=2), Run("agent", store=None)
    assert calls.over_limit(run) is None
    _record(calls, run, 2, calls=[("search", {"q": "a"})], text=None, rejected=False, final=False)
    with capture_logs() as logs:
        found = calls.over_limit(run)
    assert found is not None and found.kind == "limit" and found.pattern == "max_model_calls"
    assert [e["event"] for e in logs] == ["fuzeguard.limit_reached"]
    with pytest.raises(ValueError, match="max_model_calls takes a whole number of 1 or more"):
        ModelCalls(max_model_calls=True)  # type: ignore[arg-type]


def test_each_invocation_has_its_own_model_calls_run_closed_with_it() -> None:
    calls = ModelCalls()
    first, second = Run("a", store=None), Run("b", store=None)
    assert calls.run_of(first) is calls.run_of(first) is not calls.run_of(second)
    kept = calls.run_of(first)
    calls.close(first)
    assert calls.run_of(first) is not kept


def test_a_model_call_is_recorded_with_its_calls_in_order_or_a_digest_of_its_text() -> None:
    assert asked([("a", {"x": 1}), ("b", {})], None) == {"calls": ['a({"x": 1})', "b({})"]}
    assert asked([], "same  ") == asked([], "same") != asked([], "other")
    assert set(asked([], "secret text")) == {"text"} and "secret" not in asked([], "secret")["text"]


def test_the_canned_answer_of_a_model_loop_names_the_model_call_it_was_ended_at() -> None:
    calls, run = ModelCalls(), Run("agent", store=None)
    found = _record(calls, run, 3, calls=[("web_browse", {"url": "x"})], text=None, rejected=True,
                    final=False)
    assert found[2] is not None
    assert final_answer(found[2]).startswith(
        "Stopped: the agent was looping (dedup at model call 3, `model.rejected`).")
