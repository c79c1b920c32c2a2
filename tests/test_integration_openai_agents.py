"""OpenAI Agents SDK with ``LoopGuard``: a scripted model that loops forever, under each action
(real openai-agents package, no network)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
from agents.exceptions import MaxTurnsExceeded, ToolInputGuardrailTripwireTriggered
from openai.types.responses import ResponseFunctionToolCall
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.openai_agents import LoopGuard
from tests.stuck_agents import ACTIONS, VARIANTS, Tally, check_run, script, tools


@pytest.fixture(autouse=True)
def _no_trace_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


class StuckModel(Model):
    """Calls a tool every turn, following ``script``; keeps what the tools answered."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.turns = 0
        self.shown: list[str] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                           **kwargs: Any) -> ModelResponse:
        if isinstance(input, list):
            outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if outputs:
                self.shown.append(str(outputs[-1]["output"]))
        name, args = script(self.variant, self.turns)
        self.turns += 1
        call = ResponseFunctionToolCall(id=f"c{self.turns}", call_id=f"c{self.turns}",
                                        type="function_call", name=name, arguments=json.dumps(args))
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _agent(action: str, variant: str, tally: Tally, **tool_options: Any) -> tuple[Agent[Any], StuckModel]:
    model = StuckModel(variant)
    agent = Agent(name="shopper", model=model,
                  tools=[function_tool(f, **tool_options) for f in tools(tally)])
    LoopGuard(on_loop=ACTIONS[action], on_detect=tally.on_detect).protect(agent)
    return agent, model


def _run(agent: Agent[Any]) -> tuple[str, BaseException | None]:
    """``Runner.run`` with its default ``max_turns`` (10); how it ended."""
    async def main() -> None:
        with capture_logs(), fuzeguard.run("task"):
            await Runner.run(agent, "find me a laptop")

    try:
        asyncio.run(main())
    except MaxTurnsExceeded as exc:
        return "MaxTurnsExceeded (max_turns 10)", exc
    except ToolInputGuardrailTripwireTriggered as exc:
        return "ToolInputGuardrailTripwireTriggered (LoopDetected)", exc
    return "returned", None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally = Tally()
    agent, model = _agent(action, variant, tally)
    ended, _ = _run(agent)
    check_run("openai_agents", action, variant, tally, shown=model.shown, turns=model.turns, ended=ended)


def test_a_kill_ends_runner_run_with_the_loop_detected_as_output_info() -> None:
    tally = Tally()
    agent, model = _agent("kill", "same", tally)
    _, exc = _run(agent)
    assert isinstance(exc, ToolInputGuardrailTripwireTriggered)
    error = exc.output.output_info
    assert isinstance(error, LoopDetected) and error.detection.layer == "dedup"
    assert error.stats.calls == 3 and tally.total == 3 and model.turns == 4


def test_a_kill_ends_the_run_even_when_the_tools_catch_exceptions() -> None:
    """Whatever failure_error_function is: the guardrail acts before the tool runs."""
    tally = Tally()
    agent, _ = _agent("kill", "alternate", tally, failure_error_function=lambda ctx, e: "oops")
    ended, _ = _run(agent)
    assert ended == "ToolInputGuardrailTripwireTriggered (LoopDetected)"
    assert tally.total == 7


def test_a_skip_shows_the_model_the_message_and_the_tool_never_runs_again() -> None:
    tally = Tally()
    agent, model = _agent("skip", "same", tally)
    ended, _ = _run(agent)
    assert ended == "MaxTurnsExceeded (max_turns 10)"
    assert tally.total == 3
    assert all(text.startswith("You called `search` with the same arguments") for text in model.shown[3:])


def test_the_ladder_ends_an_alternation_within_the_default_ten_turns() -> None:
    tally = Tally()
    agent, model = _agent("ladder", "alternate", tally)
    ended, _ = _run(agent)
    assert ended == "ToolInputGuardrailTripwireTriggered (LoopDetected)"
    assert model.turns == 10 and tally.total == 8


def test_warn_lets_every_call_run_until_max_turns() -> None:
    tally = Tally()
    agent, model = _agent("warn", "same", tally)
    ended, _ = _run(agent)
    assert ended == "MaxTurnsExceeded (max_turns 10)"
    assert tally.total == model.turns == 10


def test_protecting_an_agent_twice_adds_the_guardrails_once() -> None:
    tally = Tally()
    agent, _ = _agent("kill", "same", tally)
    guard = LoopGuard()
    guard.protect(agent)
    guard.protect(agent)
    tool = agent.tools[0]
    assert isinstance(tool.tool_input_guardrails, list)
    assert tool.tool_input_guardrails.count(guard.input_guardrail) == 1
