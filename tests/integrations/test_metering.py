"""Token metering: tokens from the framework's own usage reports added to the run, and a price
table that turns them into cost for ``max_cost`` and ``cost_velocity`` (real framework packages,
scripted models, no network)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard.metering import Prices, add_usage

# Tokens each scripted model turn reports: (input, output).
TURNS = [(120, 15), (180, 22), (260, 9), (300, 41)]
PRICES = Prices({"scripted-1": (2.0, 8.0)})  # per million tokens


def _expected_cost() -> float:
    return sum(i * 2.0 + o * 8.0 for i, o in TURNS) / 1_000_000


def test_prices_by_exact_name_longest_prefix_or_default() -> None:
    prices = Prices({"gpt-4o": (2.5, 10.0), "gpt-4o-mini": (0.15, 0.6)}, default=(1.0, 1.0))
    assert prices.cost("gpt-4o-mini-2024-07-18", 1_000_000, 0) == 0.15
    assert prices.cost("gpt-4o", 0, 1_000_000) == 10.0
    assert prices.cost("other", 500_000, 500_000) == 1.0
    assert Prices({"a": (1.0, 1.0)}).cost("b", 10, 10) is None
    with pytest.raises(ValueError, match="per million tokens"):
        Prices({"a": (1.0, -1.0)})


def test_usage_outside_a_call_counts_at_once_and_is_billed_to_the_next_call() -> None:
    @guard
    def lookup(key: str) -> str:
        return "value of " + key

    with fuzeguard.run() as run:
        add_usage(1000, 100, model="scripted-1", prices=PRICES)
        assert run.stats().tokens_in == 1000 and run.stats().tokens_out == 100
        assert run.stats().cost == pytest.approx(0.0028)
        lookup("a")
        assert run.history[-1].cost == pytest.approx(0.0028)  # cost_velocity sees it here
        assert run.stats().cost == pytest.approx(0.0028)  # counted once


def test_usage_inside_a_guarded_call_is_that_calls_cost() -> None:
    @guard
    def summarize(text: str) -> str:
        add_usage(2000, 500, model="scripted-1", prices=PRICES)
        return "summary"

    with fuzeguard.run() as run:
        summarize("long text")
    assert run.history[-1].cost == pytest.approx(0.008)
    assert run.stats().cost == pytest.approx(0.008)


def test_metered_cost_ends_the_run_at_max_cost_without_a_cost_setting() -> None:
    @guard
    def search(query: str) -> str:
        return "results for " + query

    with fuzeguard.run(max_cost=0.01) as run, pytest.raises(LoopDetected) as caught:
        for n in range(10):
            add_usage(1000, 500, model="scripted-1", prices=PRICES)  # 0.006 a turn
            search(f"query {n}")
    assert caught.value.detection.pattern == "max_cost"
    # The second turn's tokens bring the spend to 0.012: the call they asked for is refused.
    assert run.stats().calls == 1 and run.stats().cost == pytest.approx(0.012)


def test_metered_cost_feeds_cost_velocity() -> None:
    @guard(cost_velocity_threshold=0.02, cost_velocity_window=3)
    def ask(question: str) -> str:
        return "I cannot tell."

    with capture_logs(), fuzeguard.run() as run, pytest.raises(LoopDetected) as caught:
        for n in range(10):
            add_usage(2000, 1000, model="scripted-1", prices=PRICES)  # 0.012 a turn
            ask(f"question {n}")
    assert caught.value.detection.layer in ("cost_velocity", "progress")
    assert run.stats().detections_by_layer.get("cost_velocity")


def test_add_usage_refuses_what_is_not_a_token_count() -> None:
    with pytest.raises(TypeError, match="tokens_in"):
        add_usage(-1, 0)
    with pytest.raises(TypeError, match="tokens_out"):
        add_usage(1, 2.5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- LangChain


def test_langchain_metering_equals_langchains_own_usage_totals() -> None:
    from langchain.agents import create_agent
    from langchain_core.callbacks import UsageMetadataCallbackHandler
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from fuzeguard.integrations.langchain_usage import UsageMeter

    class Scripted(BaseChatModel):
        turns: int = 0

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            i, o = TURNS[self.turns]
            self.turns += 1
            calls = ([{"name": "lookup", "args": {"key": f"k{self.turns}"}, "id": f"c{self.turns}"}]
                     if self.turns < len(TURNS) else [])
            message = AIMessage("done" if not calls else "", tool_calls=calls,
                                usage_metadata={"input_tokens": i, "output_tokens": o,
                                                "total_tokens": i + o},
                                response_metadata={"model_name": "scripted-1"})
            return ChatResult(generations=[ChatGeneration(message=message)])

    def lookup(key: str) -> str:
        """Look a key up."""
        return "value of " + key

    own = UsageMetadataCallbackHandler()
    agent = create_agent(Scripted(), [guard(lookup)])
    with fuzeguard.run() as run:
        agent.invoke({"messages": [("user", "go")]},
                     {"callbacks": [UsageMeter(prices=PRICES, run=run), own]})
    totals = own.usage_metadata["scripted-1"]
    stats = run.stats()
    assert (stats.tokens_in, stats.tokens_out) == (totals["input_tokens"], totals["output_tokens"])
    assert (stats.tokens_in, stats.tokens_out) == tuple(map(sum, zip(*TURNS, strict=True)))
    assert stats.cost == pytest.approx(_expected_cost())


# --------------------------------------------------------------------------- OpenAI Agents SDK


def test_openai_agents_metering_equals_the_runs_own_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from fuzeguard.integrations.openai_agents_usage import UsageHooks

    class Scripted(Model):
        model = "scripted-1"

        def __init__(self) -> None:
            self.turns = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            i, o = TURNS[self.turns]
            self.turns += 1
            usage = Usage(requests=1, input_tokens=i, output_tokens=o, total_tokens=i + o)
            if self.turns < len(TURNS):
                item: Any = ResponseFunctionToolCall(
                    id=f"c{self.turns}", call_id=f"c{self.turns}", type="function_call",
                    name="lookup", arguments=json.dumps({"key": f"k{self.turns}"}))
            else:
                item = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text="done", annotations=[])])
            return ModelResponse(output=[item], usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    @guard
    def lookup(key: str) -> str:
        """Look a key up."""
        return "value of " + key

    agent = Agent(name="a", model=Scripted(), tools=[lookup])

    async def main() -> tuple[Any, fuzeguard.Run]:
        async with fuzeguard.run() as run:
            result = await Runner.run(agent, "go", hooks=UsageHooks(prices=PRICES))
        return result, run

    result, run = asyncio.run(main())
    own = result.context_wrapper.usage
    stats = run.stats()
    assert (stats.tokens_in, stats.tokens_out) == (own.input_tokens, own.output_tokens)
    assert own.requests == len(TURNS)
    assert stats.cost == pytest.approx(_expected_cost())


# --------------------------------------------------------------------------- Pydantic AI


def test_pydantic_ai_metering_equals_the_runs_own_usage() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage

    from fuzeguard.integrations.pydantic_ai_usage import MeteredModel

    turns = [0]

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        i, o = TURNS[turns[0]]
        turns[0] += 1
        usage = RequestUsage(input_tokens=i, output_tokens=o)
        if turns[0] < len(TURNS):
            return ModelResponse(parts=[ToolCallPart("lookup", {"key": f"k{turns[0]}"},
                                                     tool_call_id=f"c{turns[0]}")],
                                 usage=usage)
        return ModelResponse(parts=[TextPart("done")], usage=usage)

    # FunctionModel names its responses "function:<function name>:".
    prices = Prices({"function:scripted": (2.0, 8.0)})
    agent = Agent(MeteredModel(FunctionModel(scripted), prices=prices))

    @agent.tool_plain
    @guard
    def lookup(key: str) -> str:
        """Look a key up."""
        return "value of " + key

    with fuzeguard.run() as run:
        result = agent.run_sync("go")
    own = result.usage
    stats = run.stats()
    assert (stats.tokens_in, stats.tokens_out) == (own.input_tokens, own.output_tokens)
    assert (stats.tokens_in, stats.tokens_out) == tuple(map(sum, zip(*TURNS, strict=True)))
    assert stats.cost == pytest.approx(_expected_cost())


# --------------------------------------------------------------------------- Google ADK


def _adk_runner(plugins: list[Any], turns: int | None = None) -> tuple[Any, list[Any]]:
    """An ADK runner whose scripted model looks up a new key each turn, reporting ``TURNS``'
    usage (``turns``: that many tool-calling turns, then an answer; None: never answers)."""
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    made: list[Any] = []

    class Scripted(BaseLlm):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            n = len(made)
            i, o = TURNS[n % len(TURNS)]
            usage = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=i, candidates_token_count=o, total_token_count=i + o)
            made.append(usage)
            if turns is None or n < turns:
                part = types.Part(function_call=types.FunctionCall(
                    name="lookup", args={"key": f"k{n}"}, id=f"c{n}"))
            else:
                part = types.Part(text="done")
            yield LlmResponse(content=types.Content(role="model", parts=[part]),
                              usage_metadata=usage, model_version="scripted-1")

    def lookup(key: str) -> str:
        """Look a key up."""
        return "value of " + key

    agent = LlmAgent(name="a", model=Scripted(model="scripted"), tools=[lookup])
    return InMemoryRunner(app=App(name="meter", root_agent=agent, plugins=plugins)), made


async def _adk_ask(runner: Any, prompt: str = "go") -> tuple[str, list[Any]]:
    from google.genai import types

    session = await runner.session_service.create_session(app_name="meter", user_id="u")
    events = []
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        events.append(event)
    return session.id, events


def test_google_adk_metering_equals_the_usage_its_events_report() -> None:
    from fuzeguard.integrations.google_adk import LoopGuardPlugin
    from fuzeguard.integrations.google_adk_usage import UsagePlugin

    runner, _ = _adk_runner([LoopGuardPlugin(), UsagePlugin(prices=PRICES)], turns=len(TURNS) - 1)

    async def main() -> tuple[list[Any], fuzeguard.Run]:
        async with fuzeguard.run() as run:
            _, events = await _adk_ask(runner)
        return events, run

    events, run = asyncio.run(main())
    own = [e.usage_metadata for e in events if e.usage_metadata is not None]
    stats = run.stats()
    assert len(own) == len(TURNS)
    assert (stats.tokens_in, stats.tokens_out) == (
        sum(u.prompt_token_count for u in own), sum(u.candidates_token_count for u in own))
    assert stats.tokens_in + stats.tokens_out == sum(u.total_token_count for u in own)
    assert stats.cost == pytest.approx(_expected_cost())


def test_google_adk_metered_cost_stops_the_invocation_at_max_cost(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No run opened by the application and no ``cost=``: the invocation's run (the plugin's)
    is stopped by the cost of the model's own turns."""
    from fuzeguard.integrations.google_adk import LoopGuardPlugin
    from fuzeguard.integrations.google_adk_usage import UsagePlugin

    (tmp_path / "fuze.toml").write_text("[defaults]\nmax_cost = 0.002\n")
    monkeypatch.setenv("FUZE_CONFIG", str(tmp_path / "fuze.toml"))
    guard_plugin = LoopGuardPlugin()
    runner, made = _adk_runner([guard_plugin, UsagePlugin(prices=PRICES)])
    with capture_logs():
        session_id, events = asyncio.run(_adk_ask(runner))
    texts = [p.text for e in events if e.content for p in e.content.parts or [] if p.text]
    assert texts[-1].startswith("Stopped: the agent was looping (limits at tool call 4")
    error = guard_plugin.killed(session_id)
    assert error is not None and error.detection.pattern == "max_cost"
    # 0.00036, 0.000536, 0.000592, 0.000928 a turn: the 4th turn's tokens pass 0.002, and the
    # call it asked for is refused; the model is not asked again.
    assert len(made) == 4 and error.stats.calls == 3


# --------------------------------------------------------------------------- Strands Agents


def test_strands_metering_equals_the_agents_own_accumulated_usage(
    strands_extras: dict[str, Any],
) -> None:
    """Played in Strands' own environment (``strands_extras.py``)."""
    found = strands_extras["usage"]
    assert (found["tokens_in"], found["tokens_out"]) == (found["own"]["in"], found["own"]["out"])
    assert (found["tokens_in"], found["tokens_out"]) == tuple(map(sum, zip(*TURNS, strict=True)))
    assert found["cost"] == pytest.approx(_expected_cost())


def test_strands_metered_cost_stops_the_invocation_at_max_cost(
    strands_extras: dict[str, Any],
) -> None:
    found = strands_extras["max_cost"]
    assert found["text"].startswith("Stopped: the agent was looping (limits at tool call 4")
    assert found["pattern"] == "max_cost" and found["calls"] == 3 and found["turns"] == 4


def _streaming_agent(prices: Prices) -> Any:
    """A Pydantic AI agent on a streamed scripted model (``FunctionModel(stream_function=...)``,
    whose usage Pydantic AI counts from what it streams): three lookups, then an answer."""
    from collections.abc import AsyncIterator

    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

    from fuzeguard.integrations.pydantic_ai_usage import MeteredModel

    turns = [0]

    async def streamed(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        n = turns[0]
        turns[0] += 1
        if n < 3:
            yield {0: DeltaToolCall(name="lookup", json_args=json.dumps({"key": f"k{n}"}),
                                    tool_call_id=f"c{n}")}
        else:
            yield "the values are "
            yield "all found"

    agent = Agent(MeteredModel(FunctionModel(stream_function=streamed), prices=prices))

    @agent.tool_plain
    @guard
    def lookup(key: str) -> str:
        """Look a key up."""
        return "value of " + key

    return agent


def test_pydantic_ai_streamed_run_metering_equals_the_runs_own_usage() -> None:
    prices = Prices({"function::streamed": (2.0, 8.0)})
    agent = _streaming_agent(prices)

    async def main() -> tuple[Any, fuzeguard.Run]:
        async with fuzeguard.run() as run:
            async with agent.run_stream("go") as result:
                assert await result.get_output() == "the values are all found"
            return result.usage, run

    own, run = asyncio.run(main())
    stats = run.stats()
    assert own.requests == 4 and own.output_tokens > 0
    assert (stats.tokens_in, stats.tokens_out) == (own.input_tokens, own.output_tokens)
    assert stats.cost == pytest.approx(prices.cost("function::streamed", own.input_tokens,
                                                   own.output_tokens))


def test_pydantic_ai_iterated_run_with_streamed_requests_metering_equals_the_runs_own_usage() -> None:
    from pydantic_ai import Agent

    agent = _streaming_agent(PRICES)

    async def main() -> tuple[Any, fuzeguard.Run]:
        async with fuzeguard.run() as run:
            async with agent.iter("go") as agent_run:
                async for node in agent_run:
                    if Agent.is_model_request_node(node):
                        async with node.stream(agent_run.ctx) as stream:
                            async for _ in stream:
                                pass
            return agent_run.usage, run

    own, run = asyncio.run(main())
    stats = run.stats()
    assert own.requests == 4
    assert (stats.tokens_in, stats.tokens_out) == (own.input_tokens, own.output_tokens)
