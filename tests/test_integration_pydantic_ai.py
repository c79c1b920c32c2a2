"""Pydantic AI with ``LoopGuardToolset``: a scripted model that loops forever, under each action
(real pydantic-ai-slim package, no network)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.pydantic_ai import LoopGuardToolset, loop_guard
from tests.stuck_agents import ACTIONS, VARIANTS, Tally, check_run, script, tools


class Stuck:
    """A ``FunctionModel`` body that calls a tool every turn, following ``script``."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.turns = 0
        self.shown: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in getattr(messages[-1], "parts", []):
            if isinstance(part, ToolReturnPart):
                self.shown.append(str(part.content))
        name, args = script(self.variant, self.turns)
        self.turns += 1
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{self.turns}")])


def _agent(action: str, variant: str, tally: Tally) -> tuple[Agent[None, str], Stuck]:
    model = Stuck(variant)
    toolset = loop_guard(FunctionToolset(tools(tally)), on_loop=ACTIONS[action],
                         on_detect=tally.on_detect)
    return Agent(FunctionModel(model), toolsets=[toolset]), model


def _run(agent: Agent[None, str], *, use_async: bool = False) -> tuple[str, BaseException | None]:
    """``run_sync`` with Pydantic AI's default usage limits (50 requests); how it ended."""
    try:
        with capture_logs(), fuzeguard.run("task"):
            if use_async:
                asyncio.run(agent.run("find me a laptop"))
            else:
                agent.run_sync("find me a laptop")
    except UsageLimitExceeded as exc:
        return "UsageLimitExceeded (request_limit 50)", exc
    except LoopDetected as exc:
        return "LoopDetected raised", exc
    return "returned", None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally = Tally()
    agent, model = _agent(action, variant, tally)
    ended, _ = _run(agent)
    check_run("pydantic_ai", action, variant, tally, shown=model.shown, turns=model.turns, ended=ended)


def test_a_kill_ends_the_run_with_loop_detected() -> None:
    tally = Tally()
    agent, model = _agent("kill", "same", tally)
    _, exc = _run(agent)
    assert isinstance(exc, LoopDetected) and exc.detection.fn == "search"
    assert tally.total == 3 and model.turns == 4


def test_a_skip_returns_the_message_as_the_tools_result_and_the_tool_never_runs_again() -> None:
    tally = Tally()
    agent, model = _agent("skip", "alternate", tally)
    ended, _ = _run(agent)
    assert ended == "UsageLimitExceeded (request_limit 50)"
    assert tally.total == 7
    assert all(text.startswith("You are going round in a cycle") for text in model.shown[7:])


def test_the_ladder_ends_an_alternation_at_its_tenth_call() -> None:
    tally = Tally()
    agent, model = _agent("ladder", "alternate", tally)
    ended, _ = _run(agent)
    assert ended == "LoopDetected raised"
    assert model.turns == 10 and tally.total == 8


def test_the_async_run_is_guarded_the_same_way() -> None:
    tally = Tally()
    agent, model = _agent("kill", "alternate", tally)
    ended, _ = _run(agent, use_async=True)
    assert ended == "LoopDetected raised"
    assert tally.total == 7 and model.turns == 8


def test_the_guard_survives_the_toolset_being_copied_for_a_run() -> None:
    """Pydantic AI rebuilds wrapper toolsets per run (dataclasses.replace): the options stay."""
    toolset = loop_guard(FunctionToolset([]), on_loop="skip")
    copy = dataclasses.replace(toolset, wrapped=FunctionToolset([]))
    assert isinstance(copy, LoopGuardToolset) and copy.calls is toolset.calls
