"""smolagents ``ToolCallingAgent`` with guarded tools and ``stop_on_kill``: a scripted model that
loops forever, under each action (real smolagents package, no network)."""

from __future__ import annotations

from typing import Any

import pytest
from smolagents import ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.smolagents import guarded_tool, stop_on_kill
from tests.stuck_agents import ACTIONS, VARIANTS, Behaviour, Tally, check, script, short, tools


class StuckModel(Model):
    """Calls a tool every step, following ``script``; keeps what the tools answered."""

    def __init__(self, variant: str) -> None:
        super().__init__(model_id="stuck")
        self.variant = variant
        self.turns = 0
        self.shown: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        last = messages[-1]
        content = last["content"] if isinstance(last, dict) else last.content
        text = " ".join(c.get("text", "") for c in content) if isinstance(content, list) else str(content)
        if "Observation:" in text or "Error" in text:
            self.shown.append(text)
        if tools_to_call_from is None:  # the max-steps prompt asks for a plain final answer
            return ChatMessage(role=MessageRole.ASSISTANT, content="I could not finish.")
        name, args = script(self.variant, self.turns)
        self.turns += 1
        call = ChatMessageToolCall(id=f"c{self.turns}", type="function",
                                   function=ChatMessageToolCallFunction(name=name, arguments=args))
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def _agent(action: str, variant: str, tally: Tally, *, callback: bool = True) -> tuple[Any, StuckModel]:
    model = StuckModel(variant)
    agent_tools = [guarded_tool(f, on_loop=ACTIONS[action], on_detect=tally.on_detect)
                   for f in tools(tally)]
    agent = ToolCallingAgent(tools=agent_tools, model=model, verbosity_level=0,
                             step_callbacks=[stop_on_kill] if callback else [])
    return agent, model


def _run(agent: Any) -> tuple[str, Any]:
    """``agent.run`` with its default ``max_steps`` (20); how it ended."""
    try:
        with capture_logs(), fuzeguard.run("task"):
            answer = agent.run("find me a laptop")
    except LoopDetected as exc:
        return "LoopDetected raised by stop_on_kill", exc
    return f"returned {answer!r} after max_steps {agent.max_steps}", answer


def _model_shown(model: StuckModel) -> str | None:
    for text in model.shown:
        for marker in ("You called", "You are going", "You have", "The last", "LoopDetected"):
            at = text.find(marker)
            if at >= 0:
                return short(text[at:])
    return None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally = Tally()
    agent, model = _agent(action, variant, tally)
    ended, _ = _run(agent)
    check("smolagents", action, variant, Behaviour(
        tool_runs=tally.total,
        after_first_detection=tally.after_detection,
        model_turns=model.turns,
        ended=ended,
        model_shown=_model_shown(model),
    ))


def test_stop_on_kill_ends_the_run_with_loop_detected_before_the_model_is_asked_again() -> None:
    tally = Tally()
    agent, model = _agent("kill", "same", tally)
    _, exc = _run(agent)
    assert isinstance(exc, LoopDetected) and exc.detection.layer == "dedup"
    assert tally.total == 3 and model.turns == 4


def test_without_the_callback_a_kill_does_not_end_the_run() -> None:
    """What the callback is for: smolagents shows the error and goes on to max_steps."""
    tally = Tally()
    agent, model = _agent("kill", "same", tally, callback=False)
    _, answer = _run(agent)
    assert answer == "I could not finish." and model.turns == agent.max_steps
    assert tally.total == 3


def test_a_skip_shows_the_model_the_message_and_the_tool_never_runs_again() -> None:
    tally = Tally()
    agent, model = _agent("skip", "alternate", tally)
    ended, _ = _run(agent)
    assert ended.startswith("returned") and tally.total == 7
    assert "You are going round in a cycle" in model.shown[7]


def test_the_ladder_ends_an_alternation_at_its_tenth_call() -> None:
    tally = Tally()
    agent, model = _agent("ladder", "alternate", tally)
    ended, _ = _run(agent)
    assert ended == "LoopDetected raised by stop_on_kill"
    assert model.turns == 10 and tally.total == 8
