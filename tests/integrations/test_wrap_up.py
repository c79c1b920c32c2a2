"""The final answer a model writes after a kill (``integrations/_shared/wrap_up.py``), framework apart:
when it is asked for, and what a failed or late answer gives. Each integration's own tests ask a
scripted model through the real framework."""

from __future__ import annotations

import asyncio
import threading

import pytest
from structlog.testing import capture_logs

from fuzeguard import Detection
from fuzeguard.integrations._shared.wrap_up import WrapUp, answer

LOOP = Detection(layer="dedup", fn="search", message="You called `search` 3 times.")


def _limit(pattern: str) -> Detection:
    return Detection(layer="limits", fn="search", message="Budget spent.", kind="limit",
                     pattern=pattern)


def test_a_loop_or_a_call_budget_asks_for_the_answer_a_cost_or_time_budget_does_not() -> None:
    """One more model call after ``max_cost`` or ``max_duration`` would go past the budget."""
    wrap_up = WrapUp()
    assert wrap_up.wanted(LOOP) and wrap_up.wanted(_limit("max_calls"))
    assert not wrap_up.wanted(_limit("max_cost")) and not wrap_up.wanted(_limit("max_duration"))
    assert not WrapUp(enabled=False).wanted(LOOP)


def test_an_answer_that_fails_or_is_late_gives_none_and_is_logged() -> None:
    release = threading.Event()

    def late() -> str:
        release.wait()
        return "too late"

    def broken() -> str:
        raise ConnectionError("the provider is down")

    wrap_up = WrapUp(timeout=0.01)
    with capture_logs() as logs:
        assert wrap_up.ask(LOOP, broken) is None
        assert wrap_up.ask(LOOP, late) is None
        release.set()
        assert wrap_up.ask(LOOP, lambda: "written") == "written"
    assert [e["error"] for e in logs] == ["ConnectionError: the provider is down",
                                          "no answer within 0.01 s"]


def test_a_coroutine_answer_is_bounded_the_same_way() -> None:
    async def late() -> str:
        await asyncio.Event().wait()
        return "never"

    async def written() -> str:
        return "written"

    wrap_up = WrapUp(timeout=0.01)
    with capture_logs() as logs:
        assert asyncio.run(wrap_up.aask(LOOP, late)) is None
        assert asyncio.run(wrap_up.aask(LOOP, written)) == "written"
    assert [e["event"] for e in logs] == ["fuzeguard.wrap_up_failed"]


def test_the_final_answer_is_the_models_text_or_the_canned_one() -> None:
    assert answer(LOOP, "Here is what I found.") == "Here is what I found."
    for nothing in (None, "", "  \n"):
        assert answer(LOOP, nothing).startswith("Stopped: the agent was looping (dedup")


def test_bad_settings_are_refused_with_what_they_take() -> None:
    with pytest.raises(TypeError, match="wrap_up takes True or False, got 'yes'"):
        WrapUp("yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wrap_up_timeout takes a number of seconds above 0"):
        WrapUp(timeout=-1)


def test_final_asks_the_model_only_when_wanted_and_reads_its_reply() -> None:
    asked: list[str] = []

    def model() -> dict[str, str | None]:
        asked.append("asked")
        return {"text": "Here is what I found."}

    def read(reply: dict[str, str | None]) -> str | None:
        return reply["text"]

    assert WrapUp().final(LOOP, model, read) == "Here is what I found."
    assert WrapUp(enabled=False).final(LOOP, model, read).startswith("Stopped:")
    assert WrapUp().final(_limit("max_cost"), model, read).startswith("Stopped:")
    assert asked == ["asked"]  # neither the disabled wrap-up nor a spent budget asks the model
    with capture_logs():
        assert WrapUp().final(LOOP, lambda: {"text": None}, read).startswith("Stopped:")

    async def amodel() -> dict[str, str | None]:
        return {"text": "Written."}

    assert asyncio.run(WrapUp().afinal(LOOP, amodel, read)) == "Written."
    assert asyncio.run(WrapUp(enabled=False).afinal(LOOP, amodel, read)).startswith("Stopped:")
