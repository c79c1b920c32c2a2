"""Google ADK with ``LoopGuardPlugin``: scripted models (a ``BaseLlm`` of their own, no network)
that loop forever under each action, requests served concurrently, agents called as tools (real
google-adk package)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.agent_tool import AgentTool
from google.genai import types
from pydantic import Field
from structlog.testing import capture_logs

from fuzeguard import LoopDetected
from fuzeguard.integrations._shared.runs import KeyedRuns
from fuzeguard.integrations.google_adk import LoopGuardPlugin
from tests.helpers.served import ANSWER, CONCURRENT, LEGIT, LOOPING, check_served, next_call
from tests.helpers.stuck_agents import (
    ACTIONS,
    LEGIT_ANSWER,
    VARIANTS,
    WRAP_UP,
    Tally,
    check_model_calls_traced,
    check_model_loops,
    check_run,
    killed_runs,
    lookup,
    model_loop_calls,
    script,
    tools,
)

MAX_LLM_CALLS = 25  # RunConfig.max_llm_calls for the stuck agents (ADK's default is 500)


def _call(name: str, args: dict[str, Any], i: int) -> LlmResponse:
    part = types.Part(function_call=types.FunctionCall(name=name, args=args, id=f"c{i}"))
    return LlmResponse(content=types.Content(role="model", parts=[part]))


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def _responses(request: LlmRequest, start: int = 0) -> list[dict[str, Any]]:
    return [
        dict(part.function_response.response or {})
        for content in request.contents[start:] for part in content.parts or []
        if part.function_response is not None
    ]


def _shown(response: dict[str, Any]) -> str:
    """What the model reads of a tool's answer: the guard's note first, if any."""
    for key in ("loop_warning", "error", "result"):
        if key in response:
            return str(response[key])
    return json.dumps(response)


class Stuck(BaseLlm):
    """Calls a tool every turn, following ``script``; keeps what it was shown of each answer."""

    model: str = "stuck"
    variant: str = "same"
    turns: int = 0
    shown: list[str] = Field(default_factory=list)
    wrap_up: str = ""  # its answer when no tool is declared (else it calls one again)
    asked: str = ""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answers = _responses(llm_request)
        if answers:
            self.shown.append(_shown(answers[-1]))
        if llm_request.config is not None and not llm_request.config.tools:
            self.asked = llm_request.contents[-1].parts[0].text or ""
            if self.wrap_up:
                self.turns += 1
                yield _text(self.wrap_up)
                return
        name, args = script(self.variant, self.turns)
        self.turns += 1
        yield _call(name, args, self.turns)


class Served(BaseLlm):
    """The model of a served agent: each request follows ``served.next_call`` from what its own
    conversation holds (one model serves every request, as in a server)."""

    model: str = "served"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        # This request's part of the conversation: from its user message on.
        start = max(i for i, c in enumerate(llm_request.contents)
                    if c.role == "user" and any(p.text for p in c.parts or []))
        prompt = llm_request.contents[start].parts[0].text or ""
        answers = _responses(llm_request, start)
        await asyncio.sleep(0)  # let the other requests interleave
        step = next_call(prompt, len(answers))
        yield _text(ANSWER) if step is None else _call(*step, len(answers))


def _message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def _ask(runner: InMemoryRunner, text: str, session_id: str | None = None,
               **run_options: Any) -> str | None:
    """One request: the final response's text."""
    if session_id is None:
        session = await runner.session_service.create_session(app_name="shop", user_id="u")
        session_id = session.id
    final = None
    async for event in runner.run_async(user_id="u", session_id=session_id,
                                        new_message=_message(text), **run_options):
        if event.is_final_response() and event.content and event.content.parts:
            final = event.content.parts[0].text
    return final


def _runner(model: BaseLlm, tally: Tally, plugin: LoopGuardPlugin) -> InMemoryRunner:
    agent = LlmAgent(name="shopper", model=model, tools=tools(tally))
    return InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[plugin]))


def _stuck(action: str, variant: str, **options: Any) -> tuple[Tally, Stuck, str, str | None]:
    tally = Tally()
    model = Stuck(variant=variant, )
    plugin = LoopGuardPlugin(on_loop=ACTIONS[action], on_detect=tally.on_detect, **options)
    runner = _runner(model, tally, plugin)
    final = None
    try:
        with capture_logs():
            final = asyncio.run(_ask(runner, "find me a laptop",
                                     run_config=RunConfig(max_llm_calls=MAX_LLM_CALLS)))
    except LlmCallsLimitExceededError:
        ended = f"LlmCallsLimitExceededError (max_llm_calls {MAX_LLM_CALLS})"
    else:
        ended = "final answer by the guard" if final and final.startswith("Stopped:") else "returned"
    return tally, model, ended, final


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally, model, ended, _ = _stuck(action, variant)
    check_run("google_adk", action, variant, tally, shown=model.shown, turns=model.turns, ended=ended)


def test_a_kill_ends_the_run_with_a_final_answer_the_application_can_show() -> None:
    tally, model, ended, final = _stuck("kill", "same")
    assert ended == "final answer by the guard"
    assert final is not None and final.startswith("Stopped: the agent was looping (dedup at tool call 5")
    # Asked once more, with no tool declared, for a final answer: this model calls a tool again,
    # which is refused, and the run ends with the canned answer.
    assert tally.total == 4 and model.turns == 6


def test_after_a_kill_the_final_response_is_the_models_own_answer_asked_without_tools() -> None:
    tally = Tally()
    model = Stuck(variant="same", wrap_up=WRAP_UP)
    runner = _runner(model, tally, LoopGuardPlugin(on_loop="kill"))
    with capture_logs():
        final = asyncio.run(_ask(runner, "find me a laptop"))
    assert final == WRAP_UP and tally.total == 4 and model.turns == 6
    assert model.asked.startswith("[fuzeguard] Your tool calls were stopped: You called `search`")


def test_without_wrap_up_the_kill_ends_with_the_canned_answer_and_the_model_is_not_asked() -> None:
    tally = Tally()
    model = Stuck(variant="same", wrap_up=WRAP_UP)
    runner = _runner(model, tally, LoopGuardPlugin(on_loop="kill", wrap_up=False))
    with capture_logs():
        final = asyncio.run(_ask(runner, "find me a laptop"))
    assert final is not None and final.startswith("Stopped: the agent was looping")
    assert model.turns == 5 and not model.asked


def test_the_kill_stays_available_as_loop_detected_for_the_session() -> None:
    tally = Tally()
    plugin = LoopGuardPlugin(on_loop="kill")
    runner = _runner(Stuck(variant="same", ), tally, plugin)

    async def main() -> str:
        session = await runner.session_service.create_session(app_name="shop", user_id="u")
        with capture_logs():
            await _ask(runner, "find me a laptop", session.id)
        return session.id

    session_id = asyncio.run(main())
    error = plugin.killed(session_id)
    assert isinstance(error, LoopDetected) and error.detection.layer == "dedup"
    assert error.stats.calls == 4 and error.stats.killed


def test_a_warning_reaches_the_model_with_the_tools_result() -> None:
    _, model, _, _ = _stuck("warn", "same")
    assert model.shown[:2] == ["3 results for laptops"] * 2
    assert model.shown[2].startswith(
        "[fuzeguard warning] You called `search` with the same arguments 3 times"
    )
    assert model.shown[3].startswith(
        "[fuzeguard warning] You called `search` with the same arguments 4 times"
    )


def test_concurrent_requests_with_only_the_plugin_added_are_runs_of_their_own() -> None:
    tally = Tally()
    model = Served()
    runner = _runner(model, tally, LoopGuardPlugin())

    async def server() -> tuple[list[str | None], str | None]:
        with capture_logs():
            served = await asyncio.gather(
                *(_ask(runner, LEGIT) for _ in range(CONCURRENT)), _ask(runner, LOOPING)
            )
            later = await _ask(runner, LEGIT)
        assert served[-1] is not None and served[-1].startswith("Stopped: the agent was looping")
        return served[:-1], later

    answers, later = asyncio.run(server())
    check_served(answers, later, tally.total)


# ADK's own AgentTool starts the inner agent's runner with ``plugins=`` (the parent's plugins),
# which ADK itself deprecates; nothing here passes it.
@pytest.mark.filterwarnings("ignore:The `plugins` argument is deprecated:DeprecationWarning")
def test_an_agent_called_as_a_tool_is_guarded_in_a_child_run() -> None:
    """``AgentTool`` runs the inner agent with the runner's plugins: its loop is caught in a run
    of its own whose calls also count toward the outer request's run."""
    tally = Tally()
    inner = LlmAgent(name="researcher", model=Stuck(variant="same", ), tools=tools(tally),
                     description="researches a question")

    class Outer(BaseLlm):
        model: str = "outer"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            answers = _responses(llm_request)
            yield _text(answers[-1]["result"]) if answers else _call(
                "researcher", {"request": "laptops"}, 0)

    killed: list[str] = []
    agent = LlmAgent(name="boss", model=Outer(), tools=[AgentTool(inner)])
    runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[LoopGuardPlugin()]))
    with capture_logs() as logs:
        final = asyncio.run(_ask(runner, "find me a laptop"))
    killed = [e["run_name"] for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert tally.total == 4 and killed == ["researcher"]
    # The inner agent ended with the guard's final answer, which the outer agent passed on.
    assert final is not None and final.startswith("Stopped: the agent was looping (dedup")


def test_a_conversation_keyed_as_one_run_carries_its_history_across_requests() -> None:
    tally = Tally()
    runner = _runner(Served(), tally, LoopGuardPlugin())
    conversations = KeyedRuns("chat")

    async def chat() -> list[str | None]:
        session = await runner.session_service.create_session(app_name="shop", user_id="u")
        finals = []
        for _ in range(5):
            with conversations.run_for(session.id):
                finals.append(await _ask(runner, LEGIT, session.id))
        return finals

    with capture_logs():
        finals = asyncio.run(chat())
    # One search per request, the same each time: the fifth is the conversation's loop (the
    # third and fourth were warned).
    assert finals[:4] == [ANSWER] * 4
    assert finals[4] is not None and finals[4].startswith("Stopped: the agent was looping")


def test_parallel_calls_of_one_model_turn_take_one_step_of_the_ladder() -> None:
    """A model that sends the same search three times per turn: warned at the 3rd call of its
    1st turn (an early warning) and for all of its 2nd, skipped for all of its 3rd, ended in its
    4th (one step per model turn, not per call)."""
    tally = Tally()

    class Parallel(BaseLlm):
        model: str = "parallel"
        turns: int = 0

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            self.turns += 1
            parts = [types.Part(function_call=types.FunctionCall(
                name="search", args={"query": "laptops"}, id=f"c{self.turns}-{i}")) for i in range(3)]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    model = Parallel()
    runner = _runner(model, tally, LoopGuardPlugin(on_loop=["warn", "skip", "kill"]))
    with capture_logs() as logs:
        final = asyncio.run(_ask(runner, "find me a laptop"))
    actions = [e["action"] for e in logs if e["event"] == "fuzeguard.loop_detected"]
    # the 3rd and 4th calls are early warnings (a streak shorter than five); turn 2's 5th and 6th
    # take the ladder's first step together, turn 3 the next, turn 4 is ended
    assert actions == ["warn"] * 4 + ["skip"] * 3 + ["kill"]
    assert tally.total == 6 and model.turns == 5  # the 5th: asked for the final answer
    assert final is not None and final.startswith("Stopped: the agent was looping")


class ModelLoop(BaseLlm):
    """A model that loops without a tool ever doing anything new (``model_loop``); asked for a
    final answer (no tool declared), it answers ``WRAP_UP``."""

    model: str = "model-loop"
    kind: str = "unknown"
    turns: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.turns += 1
        if llm_request.config is not None and not llm_request.config.tools:
            yield _text(WRAP_UP)
            return
        calls = model_loop_calls(self.kind, self.turns)
        if not calls:
            yield _text(LEGIT_ANSWER)
            return
        parts = [types.Part(function_call=types.FunctionCall(name=name, args=args, id=f"c{self.turns}-{k}"))
                 for k, (name, args) in enumerate(calls)]
        usage = types.GenerateContentResponseUsageMetadata(total_token_count=120)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


def _model_loop(kind: str, **options: Any) -> tuple[str | None, int, Tally, list[dict[str, Any]]]:
    """The final response, the model calls, the tool runs and the logs."""
    tally = Tally()
    model = ModelLoop(kind=kind)
    agent = LlmAgent(name="shopper", model=model, tools=[*tools(tally), lookup])
    runner = InMemoryRunner(app=App(name="shop", root_agent=agent,
                                    plugins=[LoopGuardPlugin(**options)]))
    with capture_logs() as logs:
        final = asyncio.run(_ask(runner, "find me a laptop",
                                 run_config=RunConfig(max_llm_calls=MAX_LLM_CALLS)))
    return final, model.turns, tally, logs


@pytest.mark.parametrize("kind", ["unknown", "invalid"])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(kind: str) -> None:
    """ADK answers a tool it does not have with its own "not found" error (judged as the model
    call's rejection), and a missing argument with an error result of the tool (judged as the
    tool's call). Either way the invocation ends within 8 model calls with the model's answer."""
    final, calls, tally, logs = _model_loop(kind)
    assert final == WRAP_UP and calls <= 8 and tally.total == 0
    assert killed_runs(logs) == ([("shopper/model", "model.rejected")] if kind == "unknown"
                      else [("shopper", "search")])


def test_a_batch_every_turn_a_legitimate_run_and_max_model_calls_meet_the_bar() -> None:
    """Where ADK's ``RunConfig.max_llm_calls`` raises ``LlmCallsLimitExceededError``, the
    plugin's ``max_model_calls`` ends the invocation with the model's final answer, asked without
    tools."""
    check_model_loops(_model_loop, "shopper/model")
    with pytest.raises(ValueError, match="max_model_calls takes a whole number of 1 or more"):
        LoopGuardPlugin(max_model_calls=0)


def test_without_wrap_up_a_model_loop_ends_with_the_canned_answer() -> None:
    final, calls, _, _ = _model_loop("unknown", wrap_up=False)
    assert final is not None and final.startswith("Stopped:") and "`web_browse`" in final
    assert calls == 3


def test_a_model_loop_stays_available_as_loop_detected_for_the_session() -> None:
    tally = Tally()
    plugin = LoopGuardPlugin()
    agent = LlmAgent(name="shopper", model=ModelLoop(kind="unknown"), tools=tools(tally))
    runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[plugin]))

    async def main() -> tuple[str, str | None]:
        session = await runner.session_service.create_session(app_name="shop", user_id="u")
        with capture_logs():
            return session.id, await _ask(runner, "find me a laptop", session.id)

    session_id, final = asyncio.run(main())
    error = plugin.killed(session_id)
    assert final == WRAP_UP and isinstance(error, LoopDetected)
    assert error.detection.fn == "model.rejected" and error.detection.message.startswith(
        "You asked again and again for tool calls that cannot run (`web_browse`")
    assert error.stats.name == "shopper/model" and error.stats.calls == 2 and error.stats.killed


def test_model_calls_are_traced_with_their_tokens_and_fuze_replay_judges_them_alike(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced = check_model_calls_traced(tmp_path, monkeypatch, lambda: _model_loop("unknown")[0])
    assert [line.get("cost") for line in traced[:2]] == [120.0, 120.0]  # usage_metadata's tokens
