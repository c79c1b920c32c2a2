"""Microsoft Agent Framework with ``LoopGuard`` middleware: scripted chat clients (a
``BaseChatClient`` of their own, no network) that loop forever under each action, requests served
concurrently, agents called as tools (real agent-framework-core package)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
)
from structlog.testing import capture_logs

from fuzeguard import LoopDetected
from fuzeguard.integrations._shared.runs import KeyedRuns
from fuzeguard.integrations.agent_framework import LoopGuard
from tests.helpers.served import ANSWER, CONCURRENT, LEGIT, LOOPING, check_served, next_call
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
    script,
    tools,
)

MAX_ITERATIONS = 40  # the function-invocation loop's default max_iterations


def _call(name: str, args: dict[str, Any], i: int) -> ChatResponse:
    call = Content.from_function_call(call_id=f"c{i}", name=name, arguments=args)
    return ChatResponse(messages=[Message(role="assistant", contents=[call])])


def _reply(response: ChatResponse, stream: bool) -> Any:
    """``response`` as the client returns it: a ``ResponseStream`` of updates when streaming."""
    if not stream:
        return response

    async def updates() -> AsyncIterator[ChatResponseUpdate]:
        for message in response.messages:
            yield ChatResponseUpdate(role="assistant", contents=message.contents)

    return ResponseStream(updates(), finalizer=ChatResponse.from_updates)


def _results(messages: list[Message]) -> list[str]:
    return [str(c.result) for m in messages for c in m.contents if c.type == "function_result"]


class Stuck(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """Calls a tool every turn, following ``script``; keeps what it was shown of each result."""

    def __init__(self, variant: str, wrap_up: str = "") -> None:
        super().__init__()
        self.variant, self.turns = variant, 0
        self.shown: list[str] = []
        self.wrap_up = wrap_up  # its answer when offered no tool (else it calls one again)
        self.asked = ""

    async def _inner_get_response(self, *, messages: list[Message], stream: bool, options: Any,
                                  **kwargs: Any) -> Any:
        self.shown.extend(_results(messages[-1:]))
        self.turns += 1
        if not (options or {}).get("tools"):
            self.asked = messages[-1].text
            if self.wrap_up:
                reply = ChatResponse(messages=[Message(role="assistant", contents=[self.wrap_up])])
                return _reply(reply, stream)
        name, args = script(self.variant, self.turns - 1)
        return _reply(_call(name, args, self.turns), stream)


class Served(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """The model of a served agent: each request follows ``served.next_call`` from its own
    messages (one client serves every request, as in a server)."""

    async def _inner_get_response(self, *, messages: list[Message], stream: bool, options: Any,
                                  **kwargs: Any) -> Any:
        start = max(i for i, m in enumerate(messages) if m.role == "user")
        results = _results(messages[start:])
        await asyncio.sleep(0)  # let the other requests interleave
        step = next_call(messages[start].text, len(results))
        if step is None:
            return ChatResponse(messages=[Message(role="assistant", contents=[ANSWER])])
        return _call(*step, len(results))


def _stuck(action: str, variant: str, **options: Any) -> tuple[Tally, Stuck, str, str | None]:
    tally = Tally()
    client = Stuck(variant)
    guard = LoopGuard(on_loop=ACTIONS[action], on_detect=tally.on_detect, **options)
    agent = Agent(client=client, tools=tools(tally), name="shopper", middleware=guard.middleware)
    text = None
    try:
        with capture_logs():
            text = asyncio.run(agent.run("find me a laptop")).text
    except LoopDetected:
        ended = "LoopDetected raised"
    else:
        ended = ("final answer by the guard" if text.startswith("Stopped:")
                 else f"returned after max_iterations {MAX_ITERATIONS}")
    return tally, client, ended, text


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally, client, ended, _ = _stuck(action, variant)
    check_run("agent_framework", action, variant, tally, shown=client.shown, turns=client.turns,
              ended=ended)


def test_a_kill_ends_the_run_with_a_final_answer_the_application_can_show() -> None:
    tally, client, ended, text = _stuck("kill", "same")
    assert ended == "final answer by the guard"
    assert text is not None and text.startswith("Stopped: the agent was looping (dedup at tool call 5")
    # Asked once more, with no tool, for a final answer: this model calls a tool again, so the
    # run ends with the canned answer, and no tool runs.
    assert tally.total == 4 and client.turns == 6


def test_after_a_kill_the_response_is_the_models_own_final_answer_written_without_tools() -> None:
    tally = Tally()
    client = Stuck("same", wrap_up=WRAP_UP)
    guard = LoopGuard(on_loop="kill")
    agent = Agent(client=client, tools=tools(tally), name="shopper", middleware=guard.middleware)
    with capture_logs():
        text = asyncio.run(agent.run("find me a laptop")).text
    assert text == WRAP_UP and tally.total == 4 and client.turns == 6
    assert client.asked.startswith("[fuzeguard] Your tool calls were stopped: You called `search`")


def test_without_wrap_up_the_kill_ends_with_the_canned_answer_and_the_model_is_not_asked() -> None:
    tally = Tally()
    client = Stuck("same", wrap_up=WRAP_UP)
    guard = LoopGuard(on_loop="kill", wrap_up=False)
    agent = Agent(client=client, tools=tools(tally), name="shopper", middleware=guard.middleware)
    with capture_logs():
        text = asyncio.run(agent.run("find me a laptop")).text
    assert text.startswith("Stopped: the agent was looping") and client.turns == 5


def test_exit_behavior_error_raises_loop_detected_out_of_agent_run() -> None:
    tally, client, ended, _ = _stuck("kill", "alternate", exit_behavior="error")
    assert ended == "LoopDetected raised"
    assert tally.total == 7 and client.turns == 8


def test_a_warning_reaches_the_model_with_the_tools_result() -> None:
    _, client, _, _ = _stuck("warn", "same")
    assert client.shown[:2] == ["3 results for laptops"] * 2
    note = "[fuzeguard warning] You called `search` with the same arguments"
    assert client.shown[3].startswith("3 results for laptops") and note in client.shown[3]


def test_concurrent_requests_with_only_the_middleware_added_are_runs_of_their_own() -> None:
    tally = Tally()
    agent = Agent(client=Served(), tools=tools(tally), name="shopper",
                  middleware=LoopGuard().middleware)

    async def ask(text: str) -> str:
        return (await agent.run(text)).text

    async def server() -> tuple[list[str | None], str | None]:
        with capture_logs():
            served = await asyncio.gather(*(ask(LEGIT) for _ in range(CONCURRENT)), ask(LOOPING))
            later = await ask(LEGIT)
        assert served[-1].startswith("Stopped: the agent was looping")
        return list(served[:-1]), later

    answers, later = asyncio.run(server())
    check_served(answers, later, tally.total)


class Delegating(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """An outer agent's model: asks its ``researcher`` tool (an inner agent) once, then answers
    with what it got back."""

    async def _inner_get_response(self, *, messages: list[Message], stream: bool, options: Any,
                                  **kwargs: Any) -> Any:
        results = _results(messages)
        if results:
            return ChatResponse(messages=[Message(role="assistant", contents=[results[-1]])])
        return _call("researcher", {"task": "laptops"}, 0)


def _delegated(inner_middleware: Any, outer_middleware: Any) -> tuple[str, Tally, Agent, list[Any]]:
    """An outer agent that calls an inner, looping agent as a tool (``as_tool()``): the outer
    agent's final text, the inner agent's tool runs, the inner agent and the logs."""
    tally = Tally()
    inner = Agent(client=Stuck("same"), tools=tools(tally), name="researcher",
                  description="researches a question", middleware=inner_middleware)
    outer = Agent(client=Delegating(), tools=[inner.as_tool()], name="boss",
                  middleware=outer_middleware)
    with capture_logs() as logs:
        text = asyncio.run(outer.run("find me a laptop")).text
    return text, tally, inner, logs


def test_an_agent_called_as_a_tool_is_guarded_in_a_child_run() -> None:
    """The same guard's middleware on both agents: the inner agent's loop is caught in a run of
    its own, which also counts toward the outer request's run."""
    guard = LoopGuard()
    text, tally, _, logs = _delegated(guard.middleware, guard.middleware)
    killed = [e["run_name"] for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert tally.total == 4 and killed == ["researcher"]
    assert text.startswith("Stopped: the agent was looping (dedup")


def test_an_agent_called_as_a_tool_without_its_own_guard_is_guarded_by_the_callers() -> None:
    """Only the outer agent has the middleware: the inner agent's loop is still ended in a child
    run after 4 tool runs (not the framework's 40 iterations), and the outer agent goes on with
    what it got back. Run on its own afterwards, the inner agent is not guarded."""
    text, tally, inner, logs = _delegated(None, LoopGuard().middleware)
    killed = [e["run_name"] for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert tally.total == 4 and killed == ["researcher"]
    assert text.startswith("Stopped: the agent was looping (dedup")
    with capture_logs() as alone:
        asyncio.run(inner.run("find me a laptop"))
    assert tally.total == 4 + MAX_ITERATIONS and alone == []


def test_a_conversation_keyed_as_one_run_carries_its_history_across_requests() -> None:
    tally = Tally()
    agent = Agent(client=Served(), tools=tools(tally), name="shopper",
                  middleware=LoopGuard().middleware)
    conversations = KeyedRuns("chat")

    async def chat() -> list[str]:
        texts = []
        for _ in range(5):
            with conversations.run_for("thread-1"):
                texts.append((await agent.run(LEGIT)).text)
        return texts

    with capture_logs():
        texts = asyncio.run(chat())
    # One search per request, the same each time: the fifth is the conversation's loop (the
    # third and fourth were warned).
    assert texts[:4] == [ANSWER] * 4
    assert texts[4].startswith("Stopped: the agent was looping")


def test_exit_behavior_is_checked() -> None:
    with pytest.raises(ValueError, match="exit_behavior must be 'end' or 'error'"):
        LoopGuard(exit_behavior="stop")  # type: ignore[arg-type]


def test_a_streamed_run_is_a_run_of_its_own_and_ends_with_the_final_answer() -> None:
    tally = Tally()
    client = Stuck("same")
    agent = Agent(client=client, tools=tools(tally), name="shopper",
                  middleware=LoopGuard().middleware)

    async def stream() -> str:
        response = agent.run("find me a laptop", stream=True)
        async for _ in response:
            pass
        return (await response.get_final_response()).text

    with capture_logs():
        texts = [asyncio.run(stream()) for _ in range(2)]
    assert all(t.endswith("Stopped: the agent was looping (dedup at tool call 5, `search`). "
                          "You called `search` with the same arguments 5 times and got the same "
                          "result each time, and nothing changed in between. Use what you have, "
                          "or try different arguments or another tool.") for t in texts)
    assert tally.total == 8 and client.turns == 10  # the second run started afresh


def test_parallel_calls_of_one_model_turn_take_one_step_of_the_ladder() -> None:
    """A model that sends the same search three times per turn: warned at the 3rd call of its
    1st turn, skipped in its 2nd (after an early warning at its first call), ended in its 3rd
    (one step per model turn, not per call)."""
    tally = Tally()

    class Parallel(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
        turns = 0

        async def _inner_get_response(self, *, messages: list[Message], stream: bool,
                                      options: Any, **kwargs: Any) -> Any:
            self.turns += 1
            calls = [Content.from_function_call(call_id=f"c{self.turns}-{i}", name="search",
                                                arguments={"query": "laptops"}) for i in range(3)]
            return ChatResponse(messages=[Message(role="assistant", contents=calls)])

    client = Parallel()
    agent = Agent(client=client, tools=tools(tally), name="shopper",
                  middleware=LoopGuard(on_loop=["warn", "skip", "kill"]).middleware)
    with capture_logs() as logs:
        text = asyncio.run(agent.run("find me a laptop")).text
    actions = [e["action"] for e in logs if e["event"] == "fuzeguard.loop_detected"]
    # turn 1's third call (all three in flight: certain) takes the first step; turn 2's first
    # call is an early warning (a streak shorter than five), its others the next step (skip)
    assert actions == ["warn", "warn", "skip", "skip", "kill"]
    assert tally.total == 4 and client.turns == 4  # the 4th: asked for the final answer
    assert text.startswith("Stopped: the agent was looping")


class ModelLoop(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """Follows ``model_loop_calls``; asked for a final answer (no tool offered), answers
    ``WRAP_UP``. Reports some token usage with each response."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.turns = kind, 0

    async def _inner_get_response(self, *, messages: list[Message], stream: bool, options: Any,
                                  **kwargs: Any) -> Any:
        self.turns += 1
        calls = model_loop_calls(self.kind, self.turns) if (options or {}).get("tools") else []
        if not calls:
            text = LEGIT_ANSWER if (options or {}).get("tools") else WRAP_UP
            return _reply(ChatResponse(messages=[Message(role="assistant", contents=[text])]), stream)
        contents = [Content.from_function_call(call_id=f"c{self.turns}-{k}", name=name, arguments=args)
                    for k, (name, args) in enumerate(calls)]
        response = ChatResponse(messages=[Message(role="assistant", contents=contents)],
                                usage_details={"total_token_count": 100})
        return _reply(response, stream)


def _model_loop(kind: str, stream: bool = False,
                **options: Any) -> tuple[str, int, Tally, list[dict[str, Any]]]:
    """The agent's final text, the model calls, the tool runs and the logs."""
    tally = Tally()
    client = ModelLoop(kind)
    agent = Agent(client=client, tools=[*tools(tally), lookup], name="shopper",
                  middleware=LoopGuard(**options).middleware)

    async def main() -> str:
        if not stream:
            return (await agent.run("find me a laptop")).text
        response = agent.run("find me a laptop", stream=True)
        async for _ in response:
            pass
        return (await response.get_final_response()).text

    with capture_logs() as logs:
        text = asyncio.run(main())
    return text, client.turns, tally, logs


def _killed(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["run_name"], e["fn"]) for e in logs if e["event"] == "fuzeguard.run_killed"]


@pytest.mark.parametrize("kind", ["unknown", "invalid"])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(kind: str) -> None:
    """The framework answers an unknown function ("not found") or arguments the function does
    not take ("Argument parsing failed") without running it: the model calls are judged, in the
    model calls' run, and the agent ends within 8 model calls with the model's final answer."""
    text, calls, tally, logs = _model_loop(kind)
    assert text == WRAP_UP and calls <= 8 and tally.total == 0
    assert _killed(logs) == [("shopper/model", "model.rejected")]


def test_the_same_batch_of_two_calls_every_turn_is_ended_within_six_model_calls() -> None:
    text, calls, tally, _ = _model_loop("batch")
    check_batch_ended(text, calls, tally.runs)


def test_a_legitimate_twelve_turn_run_with_distinct_calls_is_answered_normally() -> None:
    text, calls, _, logs = _model_loop("legit")
    check_legit_answered(text, calls, [e["event"] for e in logs])


def test_max_model_calls_ends_the_agent_at_the_model_call_after_the_limit() -> None:
    text, calls, _, logs = _model_loop("legit", max_model_calls=5)
    assert text == WRAP_UP and calls == 6  # 5, then the final answer's (the 6th not made)
    assert limit_reached(logs) == ("shopper/model", 6)
    with pytest.raises(ValueError, match="max_model_calls takes a whole number of 1 or more"):
        LoopGuard(max_model_calls=0)


def test_a_streamed_run_records_its_model_calls_and_ends_with_the_canned_answer() -> None:
    """A streamed response is judged when its stream is finalized, its updates already out: the
    run ends at the next model call (not made) with the canned answer."""
    text, calls, tally, logs = _model_loop("unknown", stream=True)
    assert "Stopped: the agent was looping (dedup" in text and calls == 3 and tally.total == 0
    assert _killed(logs) == [("shopper/model", "model.rejected")]


def test_exit_behavior_error_raises_the_model_calls_loop_detected() -> None:
    with pytest.raises(LoopDetected) as raised:
        _model_loop("unknown", exit_behavior="error")
    assert raised.value.detection.fn == "model.rejected" and raised.value.stats.killed


def test_model_calls_are_traced_and_fuze_replay_judges_them_alike(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_model_calls_traced(tmp_path, monkeypatch, lambda: _model_loop("unknown")[0])
