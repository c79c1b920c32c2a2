"""OpenAI Agents SDK with ``LoopGuard``: a scripted model that loops forever, under each action
(real openai-agents package, no network)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
from agents.exceptions import MaxTurnsExceeded, ToolInputGuardrailTripwireTriggered
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.events import CallCompleted
from fuzeguard.integrations.openai_agents import LoopGuard
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


@pytest.fixture(autouse=True)
def _no_trace_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


class StuckModel(Model):
    """Calls a tool every turn, following ``script``; keeps what the tools answered."""

    def __init__(self, variant: str, wrap_up: str = "") -> None:
        self.variant = variant
        self.turns = 0
        self.shown: list[str] = []
        self.offered: list[list[str]] = []  # the tools of each call
        self.wrap_up = wrap_up  # its final answer when asked for one (else it calls a tool again)
        self.asked = ""

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                           **kwargs: Any) -> ModelResponse:
        self.offered.append([t.name for t in tools])
        if isinstance(input, list):
            outputs = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
            if outputs:
                self.shown.append(str(outputs[-1]["output"]))
            last = input[-1] if input else {}
            if isinstance(last, dict) and str(last.get("content", "")).startswith("[fuzeguard]"):
                self.asked = str(last["content"])
                if self.wrap_up:
                    self.turns += 1
                    return ModelResponse(output=[_message(self.wrap_up)], usage=Usage(),
                                         response_id=None)
        name, args = script(self.variant, self.turns)
        self.turns += 1
        call = ResponseFunctionToolCall(id=f"c{self.turns}", call_id=f"c{self.turns}",
                                        type="function_call", name=name, arguments=json.dumps(args))
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id="m", type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text,
                                                             annotations=[])])


def _agent(action: str, variant: str, tally: Tally, **tool_options: Any) -> tuple[Agent[Any], StuckModel]:
    model = StuckModel(variant)
    agent = Agent(name="shopper", model=model,
                  tools=[function_tool(f, **tool_options) for f in tools(tally)])
    LoopGuard(on_loop=ACTIONS[action], on_detect=tally.on_detect).protect(agent)
    return agent, model


def _run(agent: Agent[Any]) -> tuple[str, Any]:
    """``Runner.run`` with its default ``max_turns`` (10); how it ended, and the exception or the
    final output."""
    async def main() -> Any:
        with capture_logs(), fuzeguard.run("task"):
            return (await Runner.run(agent, "find me a laptop")).final_output

    try:
        output = asyncio.run(main())
    except MaxTurnsExceeded as exc:
        return "MaxTurnsExceeded (max_turns 10)", exc
    except ToolInputGuardrailTripwireTriggered as exc:
        return "ToolInputGuardrailTripwireTriggered (LoopDetected)", exc
    if isinstance(output, str) and output.startswith("Stopped: the agent was looping"):
        return "agent ended by the guard with a final output", output
    return "returned", output


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, action, variant)
    check_run("openai_agents", action, variant, tally, shown=model.shown, turns=model.turns, ended=ended)


def test_a_kill_ends_runner_run_with_a_final_output_and_no_further_model_turn() -> None:
    tally, model, ended, output = run_stuck(_agent, _run, "kill", "same")
    assert ended == "agent ended by the guard with a final output"
    assert output.startswith("Stopped: the agent was looping (dedup at tool call 5")
    # Asked once more, with no tool, for a final answer: this model asks for a tool again, so
    # the run ends with the canned answer, and no tool runs.
    assert tally.total == 4 and model.turns == 6 and model.offered[-1] == []  # warned at 3 and 4


def test_after_a_kill_the_final_output_is_the_models_own_answer_written_without_tools() -> None:
    """The kill asks the model once more, offered no tool, with the run's last exchange, the
    step's outputs and the detection's message as the reason: ``final_output`` is its answer."""
    tally = Tally()
    model = StuckModel("same", wrap_up=WRAP_UP)
    agent = Agent(name="shopper", model=model, tools=[function_tool(f) for f in tools(tally)])
    LoopGuard(on_loop="kill", on_detect=tally.on_detect).protect(agent)
    ended, output = _run(agent)
    assert ended == "returned" and output == WRAP_UP
    assert tally.total == 4 and tally.after_detection == 0 and model.turns == 6
    assert model.offered[:5] == [["search", "tool_a", "tool_b"]] * 5 and model.offered[5] == []
    assert model.asked.startswith("[fuzeguard] Your tool calls were stopped: You called `search`")
    assert model.shown[-1].endswith("Stop calling tools and answer with what you have.")


def test_without_wrap_up_the_kill_ends_with_the_canned_output_and_the_model_is_not_asked() -> None:
    tally = Tally()
    model = StuckModel("same", wrap_up=WRAP_UP)
    agent = Agent(name="shopper", model=model, tools=[function_tool(f) for f in tools(tally)])
    LoopGuard(on_loop="kill", wrap_up=False).protect(agent)
    _, output = _run(agent)
    assert output.startswith("Stopped: the agent was looping (dedup")
    assert model.turns == 5 and not model.asked


def test_exit_behavior_error_raises_with_the_loop_detected_of_the_killed_run_as_output_info() -> None:
    tally = Tally()
    model = StuckModel("same")
    agent = Agent(name="shopper", model=model, tools=[function_tool(f) for f in tools(tally)])
    LoopGuard(exit_behavior="error").protect(agent)
    _, exc = _run(agent)
    assert isinstance(exc, ToolInputGuardrailTripwireTriggered)
    error = exc.output.output_info
    assert isinstance(error, LoopDetected) and error.detection.layer == "dedup"
    assert error.stats.calls == 4 and error.stats.killed and tally.total == 4 and model.turns == 5


def test_a_kill_ends_the_run_even_when_the_tools_catch_exceptions() -> None:
    """Whatever failure_error_function is: the guardrail acts before the tool runs."""
    tally = Tally()
    agent, _ = _agent("kill", "alternate", tally, failure_error_function=lambda ctx, e: "oops")
    ended, _ = _run(agent)
    assert ended == "agent ended by the guard with a final output"
    assert tally.total == 7


def test_a_skip_shows_the_model_the_message_and_escalates_to_a_kill() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "skip", "same")
    assert ended == "agent ended by the guard with a final output"
    assert tally.total == 4  # warned at the 3rd and 4th call
    assert [t[:45] for t in model.shown[4:]] == [
        "You called `search` with the same arguments 5", "You called `search` with the same arguments 6",
        "You called `search` with the same arguments 7",  # the kill, read with the final request
    ]


def test_the_ladder_ends_an_alternation_within_the_default_ten_turns() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "ladder", "alternate")
    assert ended == "agent ended by the guard with a final output"
    assert model.turns == 11 and tally.total == 8  # 10 turns, then the final answer's call


def test_warn_lets_every_call_run_until_max_turns_and_the_model_reads_the_note() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "warn", "same")
    assert ended == "MaxTurnsExceeded (max_turns 10)"
    assert tally.total == model.turns == 10
    assert model.shown[1] == "3 results for laptops"
    assert model.shown[3].startswith(
        "3 results for laptops\n\n[fuzeguard warning] You called `search` with the same arguments "
        "4 times"
    )


def test_protecting_an_agent_twice_adds_the_guardrails_once() -> None:
    tally = Tally()
    agent, _ = _agent("kill", "same", tally)
    guard = LoopGuard()
    guard.protect(agent)
    guard.protect(agent)
    tool = agent.tools[0]
    assert isinstance(tool.tool_input_guardrails, list)
    assert tool.tool_input_guardrails.count(guard.input_guardrail) == 1


class RequestModel(Model):
    """A server's model: a request for "loop" searches for ever; any other request searches once,
    then answers with what it found. ``calls`` identical searches per turn."""

    def __init__(self, calls: int = 1, argument: str = "query") -> None:
        self.calls = calls
        self.argument = argument
        self.turns = 0

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                           **kwargs: Any) -> ModelResponse:
        from openai.types.responses import ResponseOutputMessage, ResponseOutputText

        self.turns += 1
        asked = input if isinstance(input, str) else str(input[0]["content"])
        outputs = [] if isinstance(input, str) else [
            i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if outputs and asked != "loop":
            text = f"answer to {asked}: {outputs[-1]['output']}"
            message = ResponseOutputMessage(
                id="m", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        calls = [ResponseFunctionToolCall(id=f"c{self.turns}-{k}", call_id=f"call_{self.turns}_{k}",
                                          type="function_call", name="search",
                                          arguments=json.dumps({self.argument: "laptops"}))
                 for k in range(self.calls)]
        return ModelResponse(output=calls, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _server_agent(tally: Tally, guard: LoopGuard, calls: int = 1) -> Agent[Any]:
    return guard.protect(Agent(name="shop", model=RequestModel(calls),
                               tools=[function_tool(f) for f in tools(tally)]))


def test_two_guards_protecting_agents_built_from_one_tool_list_each_end_their_own_run() -> None:
    """Two agents built from one list of ``FunctionTool`` objects, each protected by its own
    guard: both guards' guardrails sit on every tool. The second run's loop was never ended (the
    first guard refused its calls, the second never saw them, the model went on to max_turns);
    now the calling agent's guard judges each call, once."""
    tally = Tally()
    shared = [function_tool(f) for f in tools(tally)]
    models = [StuckModel("same"), StuckModel("same")]
    guards = [LoopGuard(on_loop="kill"), LoopGuard(on_loop="kill")]
    agents = [guard.protect(Agent(name=f"agent-{i}", model=model, tools=shared))
              for i, (guard, model) in enumerate(zip(guards, models, strict=True))]
    for agent, model in zip(agents, models, strict=True):
        ended, output = _run(agent)
        assert ended == "agent ended by the guard with a final output"
        assert output.startswith("Stopped: the agent was looping (dedup at tool call 5")
        assert model.turns == 6
    assert tally.total == 8  # four runs of the tool in each run (warned at the 3rd and 4th)


def test_a_server_that_only_adds_the_guard_keeps_concurrent_requests_apart() -> None:
    """6 legitimate requests and 1 looping one at once, no fuzeguard.run(): each is a run. The
    call ids repeat across requests (call_0): each call is still paired within its own run."""
    tally = Tally()
    guard = LoopGuard()

    async def request(text: str) -> str:
        result = await Runner.run(_server_agent(tally, guard), text)
        return str(result.final_output)

    async def main() -> list[str]:
        return await asyncio.gather(*(request(f"r{i}") for i in range(6)), request("loop"))

    with capture_logs():
        *answers, looped = asyncio.run(main())
        assert answers == [f"answer to r{i}: 3 results for laptops" for i in range(6)]
        assert looped.startswith("Stopped: the agent was looping")
        assert tally.total - 6 <= 5
        later = asyncio.run(request("later"))
    assert later == "answer to later: 3 results for laptops"
    assert len(guard._in_flight) == 0


def test_identical_calls_in_one_turn_are_all_recorded_and_the_third_is_killed() -> None:
    tally = Tally()
    guard = LoopGuard()
    agent = _server_agent(tally, guard, calls=3)
    seen: list[Any] = []

    async def main() -> Any:
        with capture_logs(), fuzeguard.run() as run:
            run.subscribe(seen.append, CallCompleted)
            result = await Runner.run(agent, "loop")
            return result.final_output, run.stats()

    output, stats = asyncio.run(main())
    assert output.startswith("Stopped: the agent was looping (dedup at tool call 3")
    assert tally.total == stats.calls == len(seen) == 2


def test_handoff_targets_and_agents_used_as_tools_are_guarded() -> None:
    from agents import handoff

    tally = Tally()
    inner = Agent(name="inner", model=StuckModel("same"),
                  tools=[function_tool(f) for f in tools(tally)])
    helper = Agent(name="helper", model=StuckModel("same"),
                   tools=[function_tool(f) for f in tools(tally)])
    outer = Agent(name="outer", model=StuckModel("same"), handoffs=[handoff(inner)],
                  tools=[helper.as_tool(tool_name="ask_helper", tool_description="Ask.")])
    LoopGuard().protect(outer)
    for agent in (inner, helper):
        assert all(t.tool_input_guardrails for t in agent.tools)
    assert outer.tools[0].tool_input_guardrails


def test_an_agent_used_as_a_tool_runs_in_a_child_run_of_the_calling_run() -> None:
    tally = Tally()
    helper = Agent(name="helper", model=StuckModel("same"), tools=[function_tool(f) for f in tools(tally)])
    outer = Agent(name="outer", model=RequestModel(argument="input"),
                  tools=[helper.as_tool(tool_name="search", tool_description="Search.")])
    guard = LoopGuard()
    guard.protect(outer)

    async def main() -> Any:
        with capture_logs():
            return (await Runner.run(outer, "find")).final_output

    output = asyncio.run(main())
    assert tally.total == 4  # the helper's loop was ended inside the helper's run
    assert output.startswith("answer to find: Stopped: the agent was looping")


def test_the_ladder_steps_once_per_model_turn_for_parallel_identical_calls() -> None:
    tally = Tally()
    found: list[Any] = []
    guard = LoopGuard(on_loop=["warn", "skip", "kill"], on_detect=found.append)
    agent = _server_agent(tally, guard, calls=3)

    async def main() -> Any:
        with capture_logs():
            return (await Runner.run(agent, "loop")).final_output

    output = asyncio.run(main())
    loops = [d.action for d in found if d.kind == "loop"]
    # turn 1's third call (all three in flight: certain) takes the first step; turn 2's first
    # call is an early warning (a streak shorter than five), its others the next step (skip)
    assert loops == ["warn"] + ["skip"] * 2 + ["kill"]
    assert tally.total == 4 and output.startswith("Stopped: the agent was looping")



class ModelLoop(StuckModel):
    """``invalid`` asks for ``search`` with an argument it does not take, ``batch`` for the same
    two calls every turn, ``legit`` looks up 12 different laptops, then answers; asked for a
    final answer (no tool offered), it answers ``WRAP_UP``. (An unknown tool is not a loop
    here: the SDK raises ``ModelBehaviorError`` at the first one.)"""

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                           **kwargs: Any) -> ModelResponse:
        self.turns += 1
        turn = self.turns
        if not tools:
            return ModelResponse(output=[_message(WRAP_UP)], usage=Usage(), response_id=None)
        calls = model_loop_calls(self.variant, turn)
        if not calls:
            return ModelResponse(output=[_message(LEGIT_ANSWER)], usage=Usage(), response_id=None)
        output = [ResponseFunctionToolCall(id=f"c{turn}-{k}", call_id=f"c{turn}-{k}",
                                           type="function_call", name=name, arguments=json.dumps(args))
                  for k, (name, args) in enumerate(calls)]
        return ModelResponse(output=output, usage=Usage(), response_id=None)


def _model_loop(kind: str, **options: Any) -> tuple[Any, int, Tally, list[dict[str, Any]]]:
    tally = Tally()
    model = ModelLoop(kind)
    agent = Agent(name="shopper", model=model,
                  tools=[function_tool(f) for f in [*tools(tally), lookup]])
    LoopGuard(**options).protect(agent)
    with capture_logs() as logs:
        output = asyncio.run(Runner.run(agent, "find me a laptop", max_turns=30)).final_output
    return output, model.turns, tally, logs


def test_a_model_that_keeps_calling_a_tool_with_invalid_arguments_is_ended_with_an_answer() -> None:
    output, calls, tally, _ = _model_loop("invalid")
    assert output == WRAP_UP and calls <= 8 and tally.total == 0


def test_the_same_batch_of_two_calls_every_turn_is_ended_within_six_model_calls() -> None:
    output, calls, tally, _ = _model_loop("batch")
    check_batch_ended(output, calls, tally.runs)


def test_a_legitimate_twelve_turn_run_with_distinct_calls_is_answered_normally() -> None:
    output, calls, _, logs = _model_loop("legit")
    check_legit_answered(output, calls, [e["event"] for e in logs])


def test_max_model_calls_ends_the_run_after_the_tool_step_instead_of_the_next_model_call() -> None:
    output, calls, _, logs = _model_loop("legit", max_model_calls=5)
    assert output == WRAP_UP and calls == 6  # 5, then the final answer's (the 6th not made)
    assert limit_reached(logs) == ("openai-agents-run/model", 6)
