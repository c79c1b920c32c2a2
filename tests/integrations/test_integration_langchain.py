"""LangChain 1.x ``create_agent`` with ``LoopGuardMiddleware``: a scripted model that loops
forever, under each action (real langchain / langgraph packages, no network)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.structured_output import ToolStrategy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from pydantic import BaseModel, Field
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard.integrations.langchain import LoopGuardMiddleware
from fuzeguard.testing import capture_detections
from tests.helpers.stuck_agents import (
    ACTIONS,
    LEGIT_ANSWER,
    VARIANTS,
    WRAP_UP,
    Tally,
    check_batch_ended,
    check_legit_answered,
    check_model_calls_traced,
    check_run,
    limit_reached,
    lookup,
    model_loop_calls,
    run_stuck,
    script,
    tools,
)


class StuckModel(BaseChatModel):
    """Calls a tool every turn, following ``script``; keeps what the tools answered. Asked for a
    final answer after a kill, it answers ``wrap_up`` if it has one (else it calls a tool
    again); ``bound`` counts the calls it was offered tools for."""

    variant: str = "same"
    turns: int = 0
    shown: list[str] = Field(default_factory=list)
    wrap_up: str = ""
    asked: str = ""  # the request for a final answer it read
    bound: int = 0

    @property
    def _llm_type(self) -> str:
        return "stuck"

    def bind_tools(self, tools: Any, **kwargs: Any) -> StuckModel:  # type: ignore[override]
        self.bound += 1
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            self.shown.append(str(last.content))
        if isinstance(last, HumanMessage) and str(last.content).startswith("[fuzeguard]"):
            self.asked = str(last.content)
            if self.wrap_up:
                self.turns += 1
                return ChatResult(generations=[ChatGeneration(message=AIMessage(self.wrap_up))])
        name, args = script(self.variant, self.turns)
        self.turns += 1
        message = AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{self.turns}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def _agent(action: str, variant: str, tally: Tally, **options: Any) -> tuple[Any, StuckModel]:
    model = StuckModel(variant=variant, shown=[])
    middleware = LoopGuardMiddleware(on_loop=ACTIONS[action], on_detect=tally.on_detect, **options)
    return create_agent(model, tools(tally), middleware=[middleware]), model


# LangChain's default recursion limit (langchain_core's DEFAULT_RECURSION_LIMIT). LangGraph 1.2
# fills in 10007 when none is given: a stuck agent that nothing stops makes 3,333 model turns.
LIMIT = {"recursion_limit": 25}


def _run(agent: Any, *, use_async: bool = False) -> tuple[str, Any]:
    """Invoke with a recursion limit of 25; how it ended, and the final state."""
    task = {"messages": [("user", "find me a laptop")]}
    try:
        with capture_logs(), fuzeguard.run("task"):
            state = asyncio.run(agent.ainvoke(task, LIMIT)) if use_async else agent.invoke(task, LIMIT)
    except GraphRecursionError:
        return "GraphRecursionError (recursion_limit 25)", None
    except LoopDetected as exc:
        return f"LoopDetected raised ({exc.detection.layer})", None
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and not last.tool_calls:
        return "agent ended by the guard with a final AIMessage", state
    return "returned", state


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, action, variant)
    check_run("langchain", action, variant, tally, shown=model.shown, turns=model.turns, ended=ended)


def test_a_kill_ends_the_agent_with_a_final_message_and_no_further_tool_run() -> None:
    tally, model, ended, state = run_stuck(_agent, _run, "kill", "same")
    assert ended == "agent ended by the guard with a final AIMessage"
    assert tally.runs["search"] == 4 and tally.after_detection == 0  # warned at the 3rd and 4th
    # Asked once more, without tools, for a final answer: this model asks for a tool again, so
    # the agent ends with the canned answer, and no tool runs.
    assert model.turns == 6 and model.bound == 5
    refused, final = state["messages"][-2:]
    assert isinstance(refused, ToolMessage) and refused.status == "error"
    assert refused.content.startswith("You called `search` with the same arguments 5 times")
    assert final.content.startswith("Stopped: the agent was looping (dedup at tool call 5")


@pytest.mark.parametrize("use_async", [False, True])
def test_after_a_kill_the_final_answer_is_the_models_own_written_without_tools(use_async: bool) -> None:
    """The kill asks the model once more, without tools, for a final answer, with the
    detection's message as the reason: the agent's final message is what the model wrote."""
    tally = Tally()
    model = StuckModel(variant="same", shown=[], wrap_up=WRAP_UP)
    middleware = LoopGuardMiddleware(on_loop="kill", on_detect=tally.on_detect)
    agent = create_agent(model, tools(tally), middleware=[middleware])
    ended, state = _run(agent, use_async=use_async)
    assert ended == "agent ended by the guard with a final AIMessage"
    assert state["messages"][-1].content == WRAP_UP
    assert tally.total == 4 and tally.after_detection == 0  # warned at the 3rd and 4th call
    assert model.turns == 6 and model.bound == 5  # the 6th call was offered no tool
    assert model.asked.startswith("[fuzeguard] Your tool calls were stopped: You called `search`")


def test_without_wrap_up_the_kill_ends_with_the_canned_answer_and_the_model_is_not_asked() -> None:
    tally = Tally()
    model = StuckModel(variant="same", shown=[], wrap_up=WRAP_UP)
    middleware = LoopGuardMiddleware(on_loop="kill", wrap_up=False)
    agent = create_agent(model, tools(tally), middleware=[middleware])
    _, state = _run(agent)
    assert state["messages"][-1].content.startswith("Stopped: the agent was looping (dedup")
    assert model.turns == 5 and not model.asked


class FailingWrapUp(StuckModel):
    """Raises, or waits for ``release``, when asked for its final answer."""

    release: Any = None

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if str(messages[-1].content).startswith("[fuzeguard]"):
            if self.release is None:
                raise ConnectionError("the provider is down")
            self.release.wait()
        return super()._generate(messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize("failure", ["error", "timeout"])
def test_a_final_answer_that_fails_or_is_late_falls_back_to_the_canned_answer(failure: str) -> None:
    import threading

    tally = Tally()
    release = threading.Event() if failure == "timeout" else None
    model = FailingWrapUp(variant="same", shown=[], wrap_up=WRAP_UP, release=release)
    middleware = LoopGuardMiddleware(on_loop="kill", wrap_up_timeout=0.01)
    agent = create_agent(model, tools(tally), middleware=[middleware])
    task = {"messages": [("user", "find me a laptop")]}
    try:
        with capture_logs() as logs, fuzeguard.run("task"):
            state = agent.invoke(task, LIMIT)
    finally:
        if release is not None:
            release.set()
    assert state["messages"][-1].content.startswith("Stopped: the agent was looping (dedup")
    (failed,) = [e for e in logs if e["event"] == "fuzeguard.wrap_up_failed"]
    assert ("the provider is down" if failure == "error" else "no answer within 0.01 s") in (
        failed["error"])
    assert tally.total == 4


def test_wrap_up_options_are_checked() -> None:
    with pytest.raises(TypeError, match="wrap_up takes True or False"):
        LoopGuardMiddleware(wrap_up="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wrap_up_timeout takes a number of seconds above 0"):
        LoopGuardMiddleware(wrap_up_timeout=0)


def test_a_skip_is_answered_with_a_tool_message_and_escalates_to_a_kill_when_it_does_not_help() -> None:
    tally, model, ended, state = run_stuck(_agent, _run, "skip", "same")
    assert ended == "agent ended by the guard with a final AIMessage"
    assert tally.runs["search"] == 4 and tally.after_detection == 0  # warned at the 3rd and 4th
    assert model.shown[3].startswith("3 results for laptops\n\n[fuzeguard warning] You called")
    assert model.shown[4].startswith("You called `search` with the same arguments 5 times")
    assert model.shown[5].startswith("You called `search` with the same arguments 6 times")
    assert state["messages"][-1].content.startswith("Stopped: the agent was looping (dedup at tool call 7")


def test_a_warning_reaches_the_model_as_a_note_on_the_tool_result() -> None:
    tally = Tally()
    agent, model = _agent("warn", "same", tally)
    _run(agent)
    assert model.shown[1] == "3 results for laptops"
    assert model.shown[2].startswith(
        "3 results for laptops\n\n[fuzeguard warning] You called `search` with the same "
        "arguments 3 times"
    )
    assert "[fuzeguard warning] You called `search` with the same arguments 4 times" \
        in model.shown[3]


def test_the_ladder_ends_an_alternation_at_its_tenth_tool_call() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "ladder", "alternate")
    assert ended == "agent ended by the guard with a final AIMessage"
    assert model.turns == 11 and tally.total == 8  # 10 turns, then the final answer's call


def test_warn_lets_every_call_run_until_the_recursion_limit() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "warn", "same")
    assert ended == "GraphRecursionError (recursion_limit 25)"
    assert tally.total == model.turns == 12  # the invocation's run opens and closes in 2 steps


def test_exit_behavior_error_raises_loop_detected_from_invoke() -> None:
    tally = Tally()
    agent, _ = _agent("kill", "same", tally, exit_behavior="error")
    ended, _ = _run(agent)
    assert ended == "LoopDetected raised (dedup)"
    assert tally.total == 4


def test_exit_behavior_continue_refuses_every_later_call_and_lets_the_model_go_on() -> None:
    tally = Tally()
    agent, model = _agent("kill", "alternate", tally, exit_behavior="continue")
    ended, _ = _run(agent)
    assert ended == "GraphRecursionError (recursion_limit 25)"
    assert tally.total == 7
    assert all(text.startswith("You are going round in a cycle") for text in model.shown[7:])


def test_the_async_agent_is_guarded_the_same_way() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "kill", "same", use_async=True)
    assert ended == "agent ended by the guard with a final AIMessage"
    assert tally.total == 4 and model.turns == 6


def test_the_middleware_takes_guard_options_and_rejects_bad_ones() -> None:
    with pytest.raises(fuzeguard.ConfigError, match="on_loop"):
        LoopGuardMiddleware(on_loop="explode")
    with pytest.raises(ValueError, match="exit_behavior"):
        LoopGuardMiddleware(exit_behavior="stop")  # type: ignore[arg-type]


def test_tools_guarded_in_the_middleware_keep_their_schema_and_run_untouched() -> None:
    """The middleware never wraps the tools: a guarded function elsewhere is unaffected."""
    tally = Tally()
    search = guard(tools(tally)[0])
    with fuzeguard.run():
        assert search("x") == "3 results for x"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_tool_with_guard_on_its_function_is_counted_once_and_its_kill_ends_the_agent(
    use_async: bool,
) -> None:
    """``@guard`` on the tools and the middleware on the agent (newcomer review: ``invoke``
    raised ``LoopDetected`` from the tool node): said at the first model call, each call judged
    once, by the function's guard, and the kill answered with the middleware's final message."""
    tally = Tally()
    guarded = [guard(fn, on_loop="kill") for fn in tools(tally)]
    model = StuckModel(variant="same", shown=[])
    agent = create_agent(model, guarded, middleware=[LoopGuardMiddleware(on_loop="warn")])
    task = {"messages": [("user", "find me a laptop")]}
    with capture_logs() as logs, fuzeguard.run("task") as run:
        state = asyncio.run(agent.ainvoke(task, LIMIT)) if use_async else agent.invoke(task, LIMIT)
    assert tally.runs["search"] == 4 and model.turns == 6
    assert run.stats().calls == 4  # not 8: each call counted once
    assert state["messages"][-1].content.startswith("Stopped: the agent was looping (dedup at tool")
    warned = [e for e in logs if e["event"] == "fuzeguard.guarded_twice"]
    assert [e["fn"] for e in warned] == ["search", "tool_a", "tool_b"]
    assert "judged once, by the function's guard" in warned[0]["message"]


def test_the_middleware_costs_no_graph_step_where_a_before_model_hook_would() -> None:
    """Why a kill is answered inside the model step: a hook node is one more step per turn."""

    class Hook(AgentMiddleware):
        def before_model(self, state: Any, runtime: Any) -> None:
            return None

    turns = []
    for extra in ([], [Hook()]):
        tally = Tally()
        model = StuckModel(variant="same", shown=[])
        middleware = [LoopGuardMiddleware(on_loop="warn"), *extra]
        agent = create_agent(model, tools(tally), middleware=middleware)
        assert _run(agent)[0] == "GraphRecursionError (recursion_limit 25)"
        turns.append(model.turns)
    assert turns == [12, 8]  # model turns within the recursion limit of 25


@pytest.mark.parametrize("outer", ["ToolRetryMiddleware", "ToolErrorMiddleware"])
def test_exit_behavior_error_is_not_caught_by_an_outer_tool_middleware_and_leaves_no_call_unanswered(
    outer: str,
) -> None:
    from langchain.agents import middleware as lc_middleware

    made: dict[str, Any] = {
        "ToolRetryMiddleware": lambda: lc_middleware.ToolRetryMiddleware(
            max_retries=2, initial_delay=0.0, retry_on=(Exception,)
        ),
        "ToolErrorMiddleware": lambda: lc_middleware.ToolErrorMiddleware(
            lambda exc, request: f"Error: {exc}"
        ),
    }
    tally = Tally()
    model = StuckModel(variant="same", shown=[])
    guard_mw = LoopGuardMiddleware(exit_behavior="error")
    task = {"messages": [("user", "find me a laptop")]}
    config = {**LIMIT, "configurable": {"thread_id": "t1"}}
    agent = create_agent(model, tools(tally), middleware=[made[outer](), guard_mw],
                         checkpointer=InMemorySaver())
    with capture_logs(), pytest.raises(LoopDetected) as raised:
        agent.invoke(task, config)
    assert tally.total == 4 and raised.value.stats.calls == 4 and raised.value.stats.killed
    messages = agent.get_state(config).values["messages"]
    asked = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    assert asked == answered


class RequestModel(BaseChatModel):
    """A server's model: a request for "loop" searches for ever; any other request searches once,
    then answers with what it found."""

    @property
    def _llm_type(self) -> str:
        return "request"

    def bind_tools(self, tools: Any, **kwargs: Any) -> RequestModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        asked = str(messages[0].content)
        last = messages[-1]
        if isinstance(last, ToolMessage) and asked != "loop":
            message = AIMessage(f"answer to {asked}: {last.content}")
        else:
            message = AIMessage("", tool_calls=[{"name": "search", "args": {"query": "laptops"},
                                                 "id": f"c{len(messages)}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_a_server_that_only_adds_the_middleware_keeps_concurrent_requests_apart() -> None:
    """6 legitimate requests and 1 looping one at once, no fuzeguard.run(): each is a run."""
    tally = Tally()
    agent = create_agent(RequestModel(), tools(tally), middleware=[LoopGuardMiddleware()])

    async def request(text: str) -> str:
        state = await agent.ainvoke({"messages": [("user", text)]}, LIMIT)
        return str(state["messages"][-1].content)

    async def main() -> list[str]:
        return await asyncio.gather(*(request(f"r{i}") for i in range(6)), request("loop"))

    with capture_logs():
        *answers, looped = asyncio.run(main())
        assert answers == [f"answer to r{i}: 3 results for laptops" for i in range(6)]
        assert looped.startswith("Stopped: the agent was looping")
        assert tally.total - 6 <= 5  # the looping request's tool runs
        later = asyncio.run(request("later"))
    assert later == "answer to later: 3 results for laptops"


class ParallelModel(BaseChatModel):
    """Asks for three identical searches at once, every turn."""

    turns: int = 0

    @property
    def _llm_type(self) -> str:
        return "parallel"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ParallelModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.turns += 1
        calls = [{"name": "search", "args": {"query": "laptops"}, "id": f"c{self.turns}-{k}"}
                 for k in range(3)]
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=calls))])


def test_the_ladder_steps_once_per_model_turn_for_parallel_identical_calls() -> None:
    tally = Tally()
    model = ParallelModel()
    guard_mw = LoopGuardMiddleware(on_loop=["warn", "skip", "kill"], on_detect=tally.on_detect)
    agent = create_agent(model, tools(tally), middleware=[guard_mw])
    with capture_logs(), capture_detections() as found:
        state = agent.invoke({"messages": [("user", "find")]}, LIMIT)
    loops = [d.action for d in found if d.kind == "loop"]
    # turn 1's third call and turn 2's first are early warnings (a streak shorter than five);
    # turn 2's 5th and 6th calls take the ladder's first step together, turn 3 the next
    assert loops[:2] == ["warn", "warn"]  # turn 2's 5th and 6th calls: one step
    assert loops[2:5] == ["skip", "skip", "skip"]  # turn 3's three calls: one step
    assert loops[5:] == ["kill"]  # turn 4
    assert tally.total == 6 and model.turns == 5  # the 5th: asked for the final answer
    assert state["messages"][-1].content.startswith("Stopped: the agent was looping")


class ModelLoop(StuckModel):
    """A model that loops without a tool ever doing anything new: ``unknown`` asks for a tool
    the agent does not have, ``invalid`` for ``search`` with an argument it does not take,
    ``batch`` for the same two calls every turn; ``legit`` searches 12 different things (each
    answer new), then answers. Asked for a final answer after a kill, it answers ``WRAP_UP``."""

    kind: str = "unknown"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.turns += 1
        turn = self.turns
        if str(messages[-1].content).startswith("[fuzeguard]"):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(WRAP_UP))])
        calls = model_loop_calls(self.kind, turn)
        if not calls:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(LEGIT_ANSWER))])
        message = AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"c{turn}-{k}"}
                                            for k, (n, a) in enumerate(calls)])
        return ChatResult(generations=[ChatGeneration(message=message)])


def _model_loop(kind: str, **options: Any) -> tuple[str, int, Tally, list[dict[str, Any]]]:
    """The agent's final message, the model calls, the tool runs and the logs."""
    tally = Tally()
    model = ModelLoop(kind=kind)
    agent = create_agent(model, [*tools(tally), lookup],
                         middleware=[LoopGuardMiddleware(**options)])
    with capture_logs() as logs:
        state = agent.invoke({"messages": [("user", "find me a laptop")]}, {"recursion_limit": 60})
    return str(state["messages"][-1].content), model.turns, tally, logs


@pytest.mark.parametrize("kind", ["unknown", "invalid"])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(kind: str) -> None:
    """An unknown tool never reaches a tool hook: the model call itself is judged (``model``
    calls, in a run of their own). Arguments the tool does not take fail the same way each time
    at the tool. Either way the agent ends within 8 model calls with the model's final answer."""
    answer, calls, tally, logs = _model_loop(kind)
    assert answer == WRAP_UP and calls <= 8 and tally.total == 0
    killed = [(e["run_name"], e["fn"]) for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert killed == ([("langchain-agent/model", "model.rejected")] if kind == "unknown"
                      else [("langchain-agent", "search")])


def test_the_same_batch_of_two_calls_every_turn_is_ended_within_six_model_calls() -> None:
    answer, calls, tally, _ = _model_loop("batch")
    check_batch_ended(answer, calls, tally.runs)


def test_a_legitimate_twelve_turn_run_with_distinct_calls_is_answered_normally() -> None:
    answer, calls, _, logs = _model_loop("legit")
    check_legit_answered(answer, calls, [e["event"] for e in logs])


def test_max_model_calls_ends_the_agent_at_the_model_call_after_the_limit() -> None:
    answer, calls, _, logs = _model_loop("legit", max_model_calls=5)
    assert answer == WRAP_UP and calls == 6  # 5, then the final answer's (the 6th not made)
    assert limit_reached(logs) == ("langchain-agent/model", 6)
    (limit,) = [e for e in logs if e["event"] == "fuzeguard.limit_reached"]
    assert limit["message"].startswith("This task has used all 5 model calls it may make")
    with pytest.raises(ValueError, match="max_model_calls takes a whole number of 1 or more"):
        LoopGuardMiddleware(max_model_calls=0)


def test_model_calls_are_traced_and_fuze_replay_judges_them_alike(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model calls' run is traced like any run: replaying the trace finds the same kill."""
    check_model_calls_traced(tmp_path, monkeypatch, lambda: _model_loop("unknown")[0])


class Delegating(StuckModel):
    """An outer agent's model: asks its ``research`` tool (an inner agent) once, then answers
    with what it got back."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.turns += 1
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(f"outer: {last.content}"))])
        call = {"name": "research", "args": {"topic": "laptops"}, "id": "r1"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])


def test_an_inner_agent_with_its_own_middleware_is_ended_in_a_child_run_and_the_outer_goes_on() -> None:
    """An agent used as a tool that has the middleware itself is judged by it alone (the outer
    middleware leaves its calls to it): its loop is ended in a run of its own (a child of the
    outer invocation's, by ``_runs``' rules), and the outer agent answers with the inner agent's
    final answer."""
    tally = Tally()
    inner_model = StuckModel(variant="same", shown=[], wrap_up=WRAP_UP)
    inner = create_agent(inner_model, tools(tally), middleware=[LoopGuardMiddleware()])

    def research(topic: str) -> str:
        """Research a topic with the research agent."""
        state = inner.invoke({"messages": [("user", f"research {topic}")]}, LIMIT)
        return str(state["messages"][-1].content)

    outer = create_agent(Delegating(shown=[]), [research], middleware=[LoopGuardMiddleware()])
    with capture_logs() as logs:
        state = outer.invoke({"messages": [("user", "find me a laptop")]}, LIMIT)
    assert state["messages"][-1].content == f"outer: {WRAP_UP}"
    assert tally.runs["search"] == 4
    killed = [e for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert [e["fn"] for e in killed] == ["search"]  # the inner run; the outer one goes on
    assert not [e for e in logs if e["event"] == "fuzeguard.inner_agent"]  # judged by its own


def _delegating_to_a_bare_inner_agent(tally: Tally, variant: str = "same") -> tuple[Any, Any]:
    """An outer agent with the middleware whose ``research`` tool invokes an inner agent that has
    none: (the outer agent, the inner agent's model)."""
    inner_model = StuckModel(variant=variant, shown=[], wrap_up=WRAP_UP)
    inner = create_agent(inner_model, tools(tally))

    def research(topic: str) -> str:
        """Research a topic with the research agent."""
        state = inner.invoke({"messages": [("user", f"research {topic}")]}, LIMIT)
        return str(state["messages"][-1].content)

    outer = create_agent(Delegating(shown=[]), [research], middleware=[LoopGuardMiddleware()])
    return outer, inner_model


def test_an_inner_agent_without_a_middleware_is_ended_by_the_outer_one_and_the_outer_goes_on() -> None:
    """An agent a tool invokes, with no middleware of its own: LangChain passes the tool call's
    callbacks on to it, so the outer middleware judges its tool calls in a child run. Its loop
    is ended at the 5th identical call (4 runs, not the 12 its recursion limit allows), and the
    outer agent reads the inner agent's stop message as the tool's result and answers."""
    tally = Tally()
    outer, inner_model = _delegating_to_a_bare_inner_agent(tally)
    with capture_logs() as logs:
        state = outer.invoke({"messages": [("user", "find me a laptop")]}, LIMIT)
    final = state["messages"][-1]
    assert isinstance(final, AIMessage) and not final.tool_calls
    assert final.content.startswith("outer: Stopped: the agent was looping (dedup at tool call 5, `search`)")
    assert tally.runs["search"] == 4
    assert inner_model.turns == 5  # the 5th call was refused before it ran; no 6th model call
    # A callback cannot add to the inner tool's result: the early warnings are logged, not shown.
    assert inner_model.shown == ["3 results for laptops"] * 4
    killed = [e for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert [(e["fn"], e["run_name"]) for e in killed] == [("search", "langchain-agent/inner")]
    said = [e for e in logs if e["event"] == "fuzeguard.inner_agent"]
    assert [e["fn"] for e in said] == ["research"]


def test_a_bare_inner_agent_is_judged_apart_from_the_outer_run_and_said_once() -> None:
    """Each outer tool call gets its own child run: a second research call starts afresh (the
    inner loop is ended again at its 5th call), the outer run is never killed, and
    ``fuzeguard.inner_agent`` is logged once per tool."""
    tally = Tally()
    inner = create_agent(StuckModel(variant="alternate", shown=[]), tools(tally))

    def research(topic: str) -> str:
        """Research a topic with the research agent."""
        return str(inner.invoke({"messages": [("user", topic)]}, LIMIT)["messages"][-1].content)

    class TwiceDelegating(StuckModel):
        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            self.turns += 1
            if self.turns > 2:
                return ChatResult(generations=[ChatGeneration(message=AIMessage("done"))])
            call = {"name": "research", "args": {"topic": f"t{self.turns}"}, "id": f"r{self.turns}"}
            return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])

    outer = create_agent(TwiceDelegating(shown=[]), [research], middleware=[LoopGuardMiddleware()])
    with capture_logs() as logs:
        state = outer.invoke({"messages": [("user", "find me a laptop")]}, LIMIT)
    assert state["messages"][-1].content == "done"
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["error", "error"]
    assert all("cycle" in str(m.content) for m in answers)
    assert tally.runs["tool_a"] + tally.runs["tool_b"] == 14  # 7 runs per inner invocation
    killed = [e for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert [e["run_name"] for e in killed] == ["langchain-agent/inner"] * 2
    assert len([e for e in logs if e["event"] == "fuzeguard.inner_agent"]) == 1


def test_a_bare_inner_agent_is_ended_under_skip_and_in_async_agents() -> None:
    """A skip cannot be answered in the inner tool's place, so it ends the inner agent too; the
    same holds when both agents run with ``ainvoke``."""
    tally = Tally()
    inner = create_agent(StuckModel(variant="same", shown=[]), tools(tally))

    async def research(topic: str) -> str:
        """Research a topic with the research agent."""
        state = await inner.ainvoke({"messages": [("user", topic)]}, LIMIT)
        return str(state["messages"][-1].content)

    outer = create_agent(Delegating(shown=[]), [research],
                         middleware=[LoopGuardMiddleware(on_loop="skip")])
    with capture_logs():
        state = asyncio.run(outer.ainvoke({"messages": [("user", "find me a laptop")]}, LIMIT))
    assert str(state["messages"][-1].content).startswith("outer: Stopped: the agent was looping")
    assert tally.runs["search"] == 4


def test_the_tool_an_inner_agent_is_judged_in_is_left_alone_when_the_tool_opens_a_run() -> None:
    """A tool that opens a ``fuzeguard.run()`` around its inner agent judges it there: the
    outer middleware does not judge those calls too (the inner agent, unguarded there, runs to
    its recursion limit)."""
    tally = Tally()
    inner = create_agent(StuckModel(variant="same", shown=[]), tools(tally))

    def research(topic: str) -> str:
        """Research a topic with the research agent."""
        with fuzeguard.run("research"):
            try:
                inner.invoke({"messages": [("user", topic)]}, LIMIT)
            except GraphRecursionError:
                return "gave up"
        return "done"

    outer = create_agent(Delegating(shown=[]), [research], middleware=[LoopGuardMiddleware()])
    with capture_logs() as logs:
        state = outer.invoke({"messages": [("user", "find me a laptop")]}, LIMIT)
    assert state["messages"][-1].content == "outer: gave up"
    assert tally.runs["search"] == 12
    assert not [e for e in logs if e["event"] in ("fuzeguard.run_killed", "fuzeguard.inner_agent")]


class Laptop(BaseModel):
    name: str
    price: float


class BadOutput(StuckModel):
    """Answers with the structured output (``response_format``) every turn, failing its
    validation the same way each time (a new word for the price each time), until ``fixed_at``
    if given; asked for a final answer after a kill, it writes ``wrap_up``."""

    fixed_at: int = 0

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.turns += 1
        last = messages[-1]
        if isinstance(last, HumanMessage) and str(last.content).startswith("[fuzeguard]"):
            self.asked = str(last.content)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(self.wrap_up))])
        price: Any = 999 if self.fixed_at and self.turns >= self.fixed_at else f"cheap{self.turns}"
        call = {"name": "Laptop", "args": {"name": "x1", "price": price}, "id": f"o{self.turns}"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])


def test_a_structured_output_that_fails_the_same_way_is_ended_with_the_models_answer() -> None:
    """``create_agent(response_format=ToolStrategy(...))`` sends an invalid structured output back
    to the model until its recursion limit (25 model calls, then ``GraphRecursionError``); with
    the middleware, each one sent back is a rejected model call recorded by how it failed (the
    error without the values written), and the third ends the agent with the model's own final
    answer: 4 model calls."""
    unguarded = BadOutput(shown=[], wrap_up=WRAP_UP)
    with pytest.raises(GraphRecursionError):
        create_agent(unguarded, [lookup], response_format=ToolStrategy(Laptop)).invoke(
            {"messages": [("user", "find me a laptop")]}, LIMIT)
    assert unguarded.turns == 25
    model = BadOutput(shown=[], wrap_up=WRAP_UP)
    agent = create_agent(model, [lookup], response_format=ToolStrategy(Laptop),
                         middleware=[LoopGuardMiddleware()])
    with capture_logs():
        state = agent.invoke({"messages": [("user", "find me a laptop")]}, LIMIT)
    assert state["messages"][-1].content == WRAP_UP
    assert model.turns == 4
    assert "You wrote a final answer that fails the output's validation the same way" in model.asked


def test_a_structured_output_fixed_after_a_retry_is_taken() -> None:
    model = BadOutput(shown=[], wrap_up=WRAP_UP, fixed_at=3)
    agent = create_agent(model, [lookup], response_format=ToolStrategy(Laptop),
                         middleware=[LoopGuardMiddleware()])
    with capture_logs() as logs:
        state = agent.invoke({"messages": [("user", "find me a laptop")]}, LIMIT)
    assert state["structured_response"] == Laptop(name="x1", price=999)
    assert model.turns == 3
    assert not [e for e in logs if e["event"] == "fuzeguard.run_killed"]
