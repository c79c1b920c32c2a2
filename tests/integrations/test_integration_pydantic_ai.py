"""Pydantic AI with ``LoopGuardToolset``: a scripted model that loops forever, under each action
(real pydantic-ai-slim package, no network)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry, NativeOutput, PromptedOutput, RunContext
from pydantic_ai.exceptions import UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.pydantic_ai import LoopGuard, LoopGuardToolset, loop_guard
from tests.helpers.stuck_agents import (
    ACTIONS,
    LEGIT_ANSWER,
    VARIANTS,
    WRAP_UP,
    Tally,
    check_batch_ended,
    check_legit_answered,
    check_run,
    limit_reached,
    lookup,
    model_loop_calls,
    run_stuck,
    script,
    tools,
)


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
    tally, model, ended, _ = run_stuck(_agent, _run, action, variant)
    check_run("pydantic_ai", action, variant, tally, shown=model.shown, turns=model.turns, ended=ended)


def test_a_kill_ends_the_run_with_loop_detected() -> None:
    tally, model, _, exc = run_stuck(_agent, _run, "kill", "same")
    assert isinstance(exc, LoopDetected) and exc.detection.fn == "search"
    assert tally.total == 4 and model.turns == 5  # warned at the 3rd and 4th call


def test_a_skip_returns_the_message_as_the_tools_result_and_escalates_to_a_kill() -> None:
    tally, model, ended, exc = run_stuck(_agent, _run, "skip", "alternate")
    assert ended == "LoopDetected raised"
    assert tally.total == 7 and exc.stats.calls == 7  # type: ignore[union-attr]
    assert len(model.shown) == 9
    assert all(text.startswith("You are going round in a cycle") for text in model.shown[7:])


def test_the_ladder_ends_an_alternation_at_its_tenth_call() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "ladder", "alternate")
    assert ended == "LoopDetected raised"
    assert model.turns == 10 and tally.total == 8


def test_the_async_run_is_guarded_the_same_way() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "kill", "alternate", use_async=True)
    assert ended == "LoopDetected raised"
    assert tally.total == 7 and model.turns == 8


def test_the_guard_survives_the_toolset_being_copied_for_a_run() -> None:
    """Pydantic AI rebuilds wrapper toolsets per run (dataclasses.replace): the options stay."""
    toolset = loop_guard(FunctionToolset([]), on_loop="skip")
    copy = dataclasses.replace(toolset, wrapped=FunctionToolset([]))
    assert isinstance(copy, LoopGuardToolset) and copy.calls is toolset.calls


class Request:
    """A server's model: a request for "loop" searches for ever; any other request searches
    once, then answers with what it found."""

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked = str(messages[0].parts[0].content)  # type: ignore[union-attr]
        returned = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, ToolReturnPart)]
        if returned and asked != "loop":
            return ModelResponse(parts=[TextPart(f"answer to {asked}: {returned[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("search", {"query": "laptops"},
                                                 tool_call_id=f"c{len(messages)}")])


def _guarded(tally: Tally, body: object, **options: object) -> Agent[None, str]:
    """An agent whose tools are given as ``tools=`` and by decorator, guarded by the capability."""
    search, *others = tools(tally)
    agent: Agent[None, str] = Agent(FunctionModel(body), tools=others,  # type: ignore[arg-type]
                                    capabilities=[LoopGuard(**options)])  # type: ignore[arg-type]
    agent.tool_plain(search)
    return agent


def test_a_server_that_only_adds_the_capability_keeps_concurrent_requests_apart() -> None:
    tally = Tally()
    agent = _guarded(tally, Request())

    async def request(text: str) -> str:
        return (await agent.run(text)).output

    async def main() -> list[str]:
        return await asyncio.gather(*(request(f"r{i}") for i in range(6)), request("loop"))

    with capture_logs():
        *answers, looped = asyncio.run(main())
        assert answers == [f"answer to r{i}: 3 results for laptops" for i in range(6)]
        assert looped.startswith("Stopped: the agent was looping")
        assert tally.total - 6 <= 5
        later = agent.run_sync("later").output
    assert later == "answer to later: 3 results for laptops"


def test_the_capability_guards_decorator_and_tools_argument_tools_and_ends_a_kill_with_an_answer() -> None:
    tally = Tally()
    model = Stuck("alternate")  # tool_a and tool_b, given with tools=
    with capture_logs():
        output = _guarded(tally, model).run_sync("find me a laptop").output
    assert output.startswith("Stopped: the agent was looping (cycle")
    assert tally.total == 7


class WrapsUp(Stuck):
    """A stuck model that, asked for a final answer, writes one: and says what it was offered."""

    answer = WRAP_UP

    def __init__(self, variant: str) -> None:
        super().__init__(variant)
        self.asked: list[str] = []
        self.offered: list[str] | None = None  # the tools of the request for a final answer

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = getattr(messages[-1], "parts", [])
        asked = [str(p.content) for p in last if isinstance(p, UserPromptPart)]
        if asked and asked[-1].startswith("[fuzeguard]"):
            self.turns += 1
            self.asked = [str(p.content) for p in last]
            self.offered = [t.name for t in info.function_tools]
            return ModelResponse(parts=[TextPart(self.answer)])
        return super().__call__(messages, info)


def test_after_a_kill_the_output_is_the_models_own_final_answer_written_without_tools() -> None:
    """The kill asks the model once more, in one request without tools, with the killed call
    answered by the stop message and the detection's message as the reason: the run's output is
    what the model wrote."""
    tally = Tally()
    model = WrapsUp("same")
    with capture_logs():
        output = _guarded(tally, model).run_sync("find me a laptop").output
    assert output == WrapsUp.answer
    assert tally.total == 4 and model.turns == 6 and model.offered == []  # warned at 3 and 4
    refused, request = model.asked
    assert refused.endswith("Stop calling tools and answer with what you have.")
    assert request.startswith("[fuzeguard] Your tool calls were stopped: You called `search`")


def test_without_wrap_up_a_kill_ends_with_the_canned_answer_and_no_further_request() -> None:
    tally = Tally()
    model = WrapsUp("same")
    with capture_logs():
        output = _guarded(tally, model, wrap_up=False).run_sync("find me a laptop").output
    assert output.startswith("Stopped: the agent was looping (dedup")
    assert model.turns == 5 and model.offered is None


def test_exit_behavior_error_raises_the_loop_detected_of_the_killed_run() -> None:
    tally = Tally()
    with capture_logs(), pytest.raises(LoopDetected) as raised:
        _guarded(tally, Stuck("same"), exit_behavior="error").run_sync("go")
    assert raised.value.stats.calls == 4 and raised.value.stats.killed


def test_a_skip_only_agent_that_keeps_searching_is_ended_by_escalation() -> None:
    tally = Tally()
    with capture_logs():
        output = _guarded(tally, Stuck("same"), on_loop="skip").run_sync("go").output
    assert output.startswith("Stopped: the agent was looping") and tally.total <= 10


def test_a_warning_reaches_the_model_as_a_note_on_the_tool_result() -> None:
    tally = Tally()
    model = Stuck("same")
    with capture_logs(), pytest.raises(UsageLimitExceeded):
        _guarded(tally, model, on_loop="warn").run_sync("go")
    assert model.shown[1] == "3 results for laptops"
    assert model.shown[3].startswith(
        "3 results for laptops\n\n[fuzeguard warning] You called `search` with the same arguments "
        "4 times"
    )


def test_the_toolset_alone_judges_each_run_in_a_run_of_its_own() -> None:
    tally = Tally()
    toolset = loop_guard(FunctionToolset(tools(tally)))
    agent: Agent[None, str] = Agent(FunctionModel(Request()), toolsets=[toolset])
    with capture_logs():
        answers = [agent.run_sync(f"r{i}").output for i in range(5)]
    assert answers == [f"answer to r{i}: 3 results for laptops" for i in range(5)]



class ModelLoop:
    """A model that loops without a tool ever doing anything new: ``unknown`` asks for a tool
    the agent does not have, ``invalid`` for ``search`` with an argument it does not take,
    ``batch`` for the same two calls every turn; ``legit`` looks up 12 different laptops, then
    answers. Asked for a final answer (no tool offered), it answers ``WrapsUp.answer``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.turns = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.turns += 1
        if not info.function_tools:
            return ModelResponse(parts=[TextPart(WrapsUp.answer)])
        calls = model_loop_calls(self.kind, self.turns)
        if not calls:
            return ModelResponse(parts=[TextPart(LEGIT_ANSWER)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{self.turns}-{k}")
                                    for k, (name, args) in enumerate(calls)])


def _model_loop(kind: str, **options: object) -> tuple[str, int, Tally, list[dict[str, object]]]:
    tally = Tally()
    model = ModelLoop(kind)
    agent: Agent[None, str] = Agent(FunctionModel(model), tools=[*tools(tally), lookup],
                                    capabilities=[LoopGuard(**options)], retries=5)  # type: ignore[arg-type]
    with capture_logs() as logs:
        output = agent.run_sync("find me a laptop").output
    return output, model.turns, tally, logs


@pytest.mark.parametrize("kind", ["unknown", "invalid"])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(kind: str) -> None:
    """Pydantic AI answers such a call with a retry prompt and never runs a tool (its own retry
    limit, 1 by default, raises ``UnexpectedModelBehavior`` at the 2nd; raised here to 5): the
    model calls are judged, and the run ends within 8 model calls with the model's answer."""
    output, calls, tally, logs = _model_loop(kind)
    assert output == WrapsUp.answer and calls <= 8 and tally.total == 0
    killed = [(e["run_name"], e["fn"]) for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert killed == [("pydantic-ai-run/model", "model.rejected")]


def test_the_same_batch_of_two_calls_every_turn_is_ended_within_six_model_calls() -> None:
    output, calls, tally, _ = _model_loop("batch")
    check_batch_ended(output, calls, tally.runs)


def test_a_legitimate_twelve_turn_run_with_distinct_calls_is_answered_normally() -> None:
    output, calls, _, logs = _model_loop("legit")
    check_legit_answered(output, calls, [e["event"] for e in logs])


def test_max_model_calls_ends_the_run_at_the_model_call_after_the_limit() -> None:
    output, calls, _, logs = _model_loop("legit", max_model_calls=5)
    assert output == WrapsUp.answer and calls == 6  # 5, then the final answer's (the 6th not made)
    assert limit_reached(logs) == ("pydantic-ai-run/model", 6)


def test_a_tool_with_guard_on_its_function_is_counted_once_and_its_kill_ends_with_the_answer() -> None:
    """``@guard`` under ``@agent.tool_plain`` and the capability on the agent: said as the run
    starts, each call judged once, by the function's guard, and its kill ends the run like the
    capability's (the model's final answer)."""
    from fuzeguard import guard

    model = WrapsUp("same")
    agent: Agent[None, str] = Agent(FunctionModel(model), capabilities=[LoopGuard()])
    ran: list[str] = []

    @agent.tool_plain
    @guard
    def search(query: str) -> str:
        """Search the web for a query."""
        ran.append(query)
        return "3 results for laptops"

    with capture_logs() as logs, fuzeguard.run("task") as run:
        output = agent.run_sync("find me a laptop").output
    assert output == WrapsUp.answer
    assert len(ran) == 4 and run.stats().calls == 4  # not 8: each call counted once
    (said,) = [e for e in logs if e["event"] == "fuzeguard.guarded_twice"]
    assert said["fn"] == "search" and "the LoopGuard capability" in said["message"]


class GivesUp(Stuck):
    """A stuck model that gives up after ``turns_left`` tool calls and answers with text."""

    def __init__(self, variant: str, turns_left: int) -> None:
        super().__init__(variant)
        self.turns_left = turns_left

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.turns >= self.turns_left:
            return ModelResponse(parts=[TextPart("inner: gave up")])
        return super().__call__(messages, info)


def _delegating(inner: Agent[None, str], *, share_usage: bool = True, asks: int = 1) -> Agent[None, str]:
    """An outer agent with the capability whose ``research`` tool runs ``inner`` (with the run's
    usage, Pydantic AI's way to delegate, unless ``share_usage`` is False), ``asks`` times, then
    answers with the last result."""

    def delegate(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if len(returned) >= asks:
            return ModelResponse(parts=[TextPart(f"outer: {returned[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("research", {"topic": "laptops"},
                                                 tool_call_id=f"r{len(returned)}")])

    async def research(ctx: RunContext[None], topic: str) -> str:
        """Research a topic with the research agent."""
        result = await inner.run(f"research {topic}", usage=ctx.usage if share_usage else None)
        return result.output

    return Agent(FunctionModel(delegate), tools=[research], capabilities=[LoopGuard()])


def test_an_inner_agent_without_the_capability_is_said_once_as_unguarded() -> None:
    """The outer capability cannot reach an agent a tool runs (Pydantic AI has no hook for it):
    it finds it from the requests the inner run adds to the shared usage, and says so once per
    tool, with the fix, as the inner agent first ends. The inner agent's loop is not ended."""
    tally = Tally()
    inner = Agent(FunctionModel(GivesUp("same", turns_left=8)), tools=tools(tally))
    with capture_logs() as logs:
        output = _delegating(inner, asks=2).run_sync("find me a laptop").output
    assert output == "outer: inner: gave up"
    assert tally.runs["search"] == 8  # unguarded: only the scripted model's giving up ended it
    said = [e for e in logs if e["event"] == "fuzeguard.inner_agent_unguarded"]
    assert [(e["fn"], e["requests"], e["log_level"]) for e in said] == [("research", 9, "warning")]
    assert "capabilities=[LoopGuard()]" in said[0]["message"]


def test_an_inner_agent_with_the_capability_is_a_child_run_and_nothing_is_said() -> None:
    """The fix the warning gives: the inner agent with the capability is guarded in a child run
    (its loop ended at the 5th identical call), the outer agent answers with its final answer,
    and nothing is said."""
    tally = Tally()
    inner = Agent(FunctionModel(GivesUp("same", turns_left=30)), tools=tools(tally),
                  capabilities=[LoopGuard(wrap_up=False)])
    with capture_logs() as logs:
        output = _delegating(inner).run_sync("find me a laptop").output
    assert output.startswith("outer: Stopped: the agent was looping (dedup at tool call 5, `search`)")
    assert tally.runs["search"] == 4
    assert not [e for e in logs if e["event"] == "fuzeguard.inner_agent_unguarded"]
    killed = [e for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert [e["fn"] for e in killed] == ["search"]


def test_an_inner_agent_run_without_the_shared_usage_leaves_no_trace() -> None:
    """Without ``usage=ctx.usage`` the inner run adds nothing the outer one sees: nothing is said
    (the docs tell to give the inner agent the capability)."""
    tally = Tally()
    inner = Agent(FunctionModel(GivesUp("same", turns_left=3)), tools=tools(tally))
    with capture_logs() as logs:
        output = _delegating(inner, share_usage=False).run_sync("find me a laptop").output
    assert output == "outer: inner: gave up"
    assert not [e for e in logs if e["event"] == "fuzeguard.inner_agent_unguarded"]


class Laptop(BaseModel):
    name: str
    price: float


class BadOutput:
    """A ``FunctionModel`` body whose final answer fails the output's validation the same way
    every time (the text differs: a new word for the price each time), until ``fixed_at`` if
    given; asked for a final answer after a kill, it writes ``WRAP_UP``."""

    def __init__(self, fixed_at: int | None = None) -> None:
        self.fixed_at = fixed_at
        self.calls = 0
        self.asked = ""  # the request for a final answer it read

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        asked = [p for p in getattr(messages[-1], "parts", []) if isinstance(p, UserPromptPart)]
        if asked and str(asked[-1].content).startswith("[fuzeguard]"):
            self.asked = str(asked[-1].content)
            return ModelResponse(parts=[TextPart(WRAP_UP)])
        if self.fixed_at is not None and self.calls >= self.fixed_at:
            return ModelResponse(parts=[TextPart('{"name": "x1", "price": 999}')])
        return ModelResponse(parts=[TextPart(json.dumps({"name": "x1", "price": f"cheap{self.calls}"}))])


@pytest.mark.parametrize("shape", [NativeOutput, PromptedOutput])
def test_a_structured_output_that_fails_the_same_way_is_ended_with_the_models_answer(shape: Any) -> None:
    """A final answer sent back for a retry is a rejected model call, recorded by how it failed
    (the errors without the values written): the third failure of the same kind ends the run,
    in 4 model calls with the wrap-up, before Pydantic AI's retry limit (here 5) raises."""
    model = BadOutput()
    agent = Agent(FunctionModel(model), output_type=shape(Laptop), retries=5, capabilities=[LoopGuard()])
    with capture_logs() as logs:
        output = agent.run_sync("find me a laptop").output
    assert output == WRAP_UP
    assert model.calls == 4
    killed = [e for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert [e["fn"] for e in killed] == ["model.rejected"]
    assert "You wrote a final answer that fails the output's validation the same way" in model.asked


def test_an_output_validator_that_rejects_the_same_way_is_ended_too() -> None:
    model = BadOutput()
    agent = Agent(FunctionModel(model), retries=5, capabilities=[LoopGuard(wrap_up=False)])

    @agent.output_validator
    def under_500(output: str) -> str:
        raise ModelRetry("find a laptop under 500")

    with capture_logs():
        output = agent.run_sync("find me a laptop").output
    assert output.startswith("Stopped: the agent was looping (dedup")
    assert model.calls == 3  # no wrap-up asked


def test_a_structured_output_fixed_after_a_retry_is_answered_normally() -> None:
    model = BadOutput(fixed_at=3)
    agent = Agent(FunctionModel(model), output_type=PromptedOutput(Laptop), retries=5,
                  capabilities=[LoopGuard()])
    with capture_logs() as logs:
        output = agent.run_sync("find me a laptop").output
    assert output == Laptop(name="x1", price=999)
    assert not [e for e in logs if e["event"] == "fuzeguard.run_killed"]


def test_with_pydantic_ais_default_retries_its_own_limit_ends_a_failing_output_first() -> None:
    """Pydantic AI's own retry limit (``retries=1`` by default) raises at the second failure,
    before a third could be judged (the docs say to raise ``retries`` to let the guard answer)."""
    agent = Agent(FunctionModel(BadOutput()), output_type=PromptedOutput(Laptop), capabilities=[LoopGuard()])
    with capture_logs(), pytest.raises(UnexpectedModelBehavior):
        agent.run_sync("find me a laptop")
