"""The notes a run keeps for the model (``run.notes()``: a ``warn_at`` budget warning, the note
given to ``resume()``) reach the model through each integration, with the next tool result, each
exactly once (real framework packages, scripted models, no network).

One scenario for every framework: in ``fuzeguard.run(max_calls=4, warn_at=[0.5])`` the model
looks up k1 to k5, one key a turn; the second call reaches half the call budget (the warning
goes with its result), the fifth is over the budget and the run is killed. The run is resumed
with two more calls and a note, and a second invocation looks up k6: its result carries the
note. Strands and CrewAI run the same scenario in their own environments (``strands_extras.py``,
``crewai_extras.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from structlog.testing import capture_logs

import fuzeguard
from tests.helpers.notes_scenario import FIRST, NOTE, SECOND, Script, lookup, scenario

# --------------------------------------------------------------------------- LangChain


def test_langchain_hands_the_runs_notes_to_the_model_once() -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from fuzeguard.integrations.langchain import LoopGuardMiddleware

    script = Script()

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
            return self

        def _generate(self, messages: list[BaseMessage], stop: Any = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            prompt = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
            results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
            key = script.next_key(prompt, results)
            message = AIMessage("done") if key is None else AIMessage(
                "", tool_calls=[{"name": "lookup", "id": f"c-{key}", "args": {"key": key}}])
            return ChatResult(generations=[ChatGeneration(message=message)])

    agent = create_agent(Scripted(), [lookup], middleware=[LoopGuardMiddleware()])
    scenario(lambda prompt: agent.invoke({"messages": [("user", prompt)]}))
    script.check()


# --------------------------------------------------------------------------- OpenAI Agents SDK


def test_openai_agents_hands_the_runs_notes_to_the_model_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from fuzeguard.integrations.openai_agents import LoopGuard

    script = Script()

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> ModelResponse:
            items = [input] if isinstance(input, str) else list(input)
            prompt = next(str(i["content"]) for i in items
                          if isinstance(i, dict) and i.get("role") == "user")
            results = [str(i["output"]) for i in items
                       if isinstance(i, dict) and i.get("type") == "function_call_output"]
            key = script.next_key(prompt, results)
            if key is None:
                item: Any = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text="done", annotations=[])])
            else:
                item = ResponseFunctionToolCall(id=f"c-{key}", call_id=f"c-{key}",
                                                type="function_call", name="lookup",
                                                arguments=json.dumps({"key": key}))
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    agent = LoopGuard().protect(Agent(name="a", model=Scripted(), tools=[function_tool(lookup)]))
    scenario(lambda prompt: asyncio.run(Runner.run(agent, prompt)))
    script.check()


# --------------------------------------------------------------------------- Pydantic AI


def test_pydantic_ai_hands_the_runs_notes_to_the_model_once() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from fuzeguard.integrations.pydantic_ai import LoopGuard

    script = Script()

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
        prompt = next(str(p.content) for p in parts if isinstance(p, UserPromptPart))
        results = [p.model_response_str() for p in parts if isinstance(p, ToolReturnPart)]
        key = script.next_key(prompt, results)
        if key is None:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"key": key}, tool_call_id=f"c-{key}")])

    agent = Agent(FunctionModel(scripted), tools=[lookup], capabilities=[LoopGuard()])
    scenario(lambda prompt: agent.run_sync(prompt))
    script.check()


@pytest.mark.parametrize("returns", ["dict", "tool return"])
def test_pydantic_ai_hands_the_notes_to_the_model_with_a_result_that_is_not_text(
    returns: str,
) -> None:
    """A tool that answers a dict (or its own ``ToolReturn``) gets the notes as content the model
    reads after the result, once, with the result itself unchanged."""
    from pydantic_ai import Agent, ToolReturn
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from fuzeguard.integrations.pydantic_ai import LoopGuard
    from tests.helpers.notes_scenario import WARNING

    def record(key: str) -> Any:
        """Look a record up."""
        found = {"key": key, "value": f"value of {key}"}
        return found if returns == "dict" else ToolReturn(found, content=f"source of {key}: db")

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts
                    if isinstance(p, ToolReturnPart)]
        if len(returned) < 3:
            key = f"k{len(returned) + 1}"
            return ModelResponse(parts=[ToolCallPart("record", {"key": key}, tool_call_id=key)])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(scripted), tools=[record], capabilities=[LoopGuard()])
    with capture_logs(), fuzeguard.run("notes", max_calls=4, warn_at=[0.5]) as run:
        messages = agent.run_sync("look up k1 k2 k3").all_messages()
        assert run.notes() == []
    requests = [m for m in messages if isinstance(m, ModelRequest)]
    returned = [p.content for m in requests for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returned == [{"key": k, "value": f"value of {k}"} for k in ("k1", "k2", "k3")]
    told = [(i, str(p.content)) for i, m in enumerate(requests) for p in m.parts
            if isinstance(p, UserPromptPart) and WARNING in str(p.content)]
    assert len(told) == 1  # once, in the request that returned k2 (the second call)
    with_k2 = next(i for i, m in enumerate(requests) for p in m.parts
                   if isinstance(p, ToolReturnPart) and p.tool_call_id == "k2")
    assert told[0][0] == with_k2
    if returns == "tool return":  # the tool's own content comes first
        assert told[0][1].startswith("source of k2: db\n\n")


def test_pydantic_ai_shows_a_warned_call_s_note_after_a_result_that_is_not_text() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from fuzeguard.integrations.pydantic_ai import LoopGuard

    def record(key: str) -> dict[str, str]:
        """Look a record up."""
        return {"key": key, "value": "unchanged"}

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = sum(isinstance(p, ToolReturnPart) for m in messages
                       if isinstance(m, ModelRequest) for p in m.parts)
        if returned < 4:  # the same lookup again and again
            return ModelResponse(parts=[ToolCallPart("record", {"key": "k1"},
                                                     tool_call_id=f"c{returned}")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(scripted), tools=[record],
                  capabilities=[LoopGuard(on_loop="warn")])
    with capture_logs(), fuzeguard.run("warned"):
        messages = agent.run_sync("look up k1").all_messages()
    parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    assert [p.content for p in parts if isinstance(p, ToolReturnPart)] == [
        {"key": "k1", "value": "unchanged"}] * 4
    notes = [str(p.content) for p in parts
             if isinstance(p, UserPromptPart) and "[fuzeguard warning]" in str(p.content)]
    assert notes and all("record" in note for note in notes)


# --------------------------------------------------------------------------- Google ADK


def test_google_adk_hands_the_runs_notes_to_the_model_once() -> None:
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from fuzeguard.integrations.google_adk import LoopGuardPlugin

    script = Script()

    class Scripted(BaseLlm):
        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            parts = [p for c in llm_request.contents for p in c.parts or []]
            prompt = next(p.text for p in parts if p.text and p.text.startswith("look up"))
            results = [json.dumps(p.function_response.response) for p in parts
                       if p.function_response is not None]
            key = script.next_key(prompt, results)
            part = types.Part(text="done") if key is None else types.Part(
                function_call=types.FunctionCall(name="lookup", args={"key": key}, id=f"c-{key}"))
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    agent = LlmAgent(name="a", model=Scripted(model="scripted"), tools=[lookup])
    runner = InMemoryRunner(app=App(name="notes", root_agent=agent, plugins=[LoopGuardPlugin()]))

    async def ask(prompt: str) -> None:
        session = await runner.session_service.create_session(app_name="notes", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass

    scenario(lambda prompt: asyncio.run(ask(prompt)))
    script.check()


# --------------------------------------------------------------------------- smolagents


def _smolagents_text(message: Any) -> str:
    """The text of a message smolagents hands its model."""
    content = message["content"] if isinstance(message, dict) else message.content
    if isinstance(content, list):
        return " ".join(c.get("text", "") for c in content)
    return str(content)


def test_smolagents_hands_the_runs_notes_to_the_model_once() -> None:
    from smolagents import ToolCallingAgent, tool
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )

    from fuzeguard.integrations.smolagents import LoopGuard

    script = Script()

    class Scripted(Model):
        def generate(self, messages: list[Any], stop_sequences: Any = None,
                     response_format: Any = None, tools_to_call_from: Any = None,
                     **kwargs: Any) -> ChatMessage:
            texts = [_smolagents_text(m) for m in messages]
            prompt = next(t[t.index("look up"):].splitlines()[0] for t in texts if "look up" in t)
            results = [t for t in texts if "Observation:" in t]
            key = script.next_key(prompt, results)
            if key is None:
                call = ChatMessageToolCall(id="c-end", type="function", function=(
                    ChatMessageToolCallFunction(name="final_answer", arguments={"answer": "done"})))
            else:
                call = ChatMessageToolCall(id=f"c-{key}", type="function", function=(
                    ChatMessageToolCallFunction(name="lookup", arguments={"key": key})))
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    def lookup_tool(key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        return lookup(key)

    lookup_tool.__name__ = "lookup"
    agent = LoopGuard().protect(ToolCallingAgent(
        tools=[tool(lookup_tool)], model=Scripted(model_id="scripted"), verbosity_level=0))
    scenario(lambda prompt: agent.run(prompt))
    script.check()



@pytest.mark.parametrize("code", [False, True], ids=["ToolCallingAgent", "CodeAgent"])
def test_smolagents_adds_the_notes_to_the_step_after_a_result_that_is_not_text(code: bool) -> None:
    """A tool that answers a dict: the model reads the notes in that step's observations, once;
    a CodeAgent's code gets the dict itself (it reads a key of it)."""
    from smolagents import CodeAgent, ToolCallingAgent, tool
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )

    from fuzeguard.integrations.smolagents import LoopGuard
    from tests.helpers.notes_scenario import WARNING

    shown: list[list[str]] = []

    class Scripted(Model):
        def generate(self, messages: list[Any], stop_sequences: Any = None,
                     response_format: Any = None, tools_to_call_from: Any = None,
                     **kwargs: Any) -> ChatMessage:
            seen = [_smolagents_text(m) for m in messages if _smolagents_text(m).startswith("Observation:")]
            shown.append(seen)
            key = f"k{len(seen) + 1}" if len(seen) < 3 else None
            if code:
                line = "final_answer('done')" if key is None else (
                    f"print(record(key={key!r})['value'])")
                return ChatMessage(role=MessageRole.ASSISTANT,
                                   content=f"Thought: go\n<code>\n{line}\n</code>")
            name, args = ("final_answer", {"answer": "done"}) if key is None else (
                "record", {"key": key})
            call = ChatMessageToolCall(id=f"c{len(seen)}", type="function",
                                       function=ChatMessageToolCallFunction(name=name, arguments=args))
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    @tool
    def record(key: str) -> dict:
        """Look a record up.

        Args:
            key: The key.
        """
        return {"key": key, "value": f"value of {key}"}

    kind = CodeAgent if code else ToolCallingAgent
    agent = LoopGuard().protect(kind(tools=[record], model=Scripted(), verbosity_level=0))
    with capture_logs(), fuzeguard.run("notes", max_calls=4, warn_at=[0.5]) as run:
        assert agent.run("look up k1 k2 k3") == "done"
        assert run.notes() == []
    last = shown[-1]
    assert len(last) == 3 and all(f"value of k{i}" in last[i - 1] for i in (1, 2, 3))
    assert [text.count(WARNING) for text in last] == [0, 1, 0]  # once, with k2's step

# --------------------------------------------------------------------------- Agent Framework


def test_agent_framework_hands_the_runs_notes_to_the_model_once() -> None:
    from agent_framework import (
        Agent,
        BaseChatClient,
        ChatMiddlewareLayer,
        ChatResponse,
        Content,
        FunctionInvocationLayer,
        Message,
    )

    from fuzeguard.integrations.agent_framework import LoopGuard

    script = Script()

    class Scripted(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
        async def _inner_get_response(self, *, messages: list[Message], stream: bool,
                                      options: Any, **kwargs: Any) -> Any:
            prompt = next(m.text for m in messages if m.role == "user")
            results = [str(c.result) for m in messages for c in m.contents
                       if c.type == "function_result"]
            key = script.next_key(prompt, results)
            content = Content.from_text("done") if key is None else Content.from_function_call(
                call_id=f"c-{key}", name="lookup", arguments={"key": key})
            return ChatResponse(messages=[Message(role="assistant", contents=[content])])

    agent = Agent(client=Scripted(), tools=[lookup], middleware=LoopGuard().middleware)
    scenario(lambda prompt: asyncio.run(agent.run(prompt)))
    script.check()


# --------------------------------------------------------------------------- MCP


def test_mcp_hands_the_session_runs_notes_to_the_client_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An MCP server's runs are its sessions' (here one, by ``session_key``): the scenario's
    budgets come from the server's fuze.toml, and the run is resumed on the server."""
    from mcp.client import Client
    from mcp.server.mcpserver import MCPServer

    from fuzeguard.integrations.mcp import LoopGuardMiddleware

    (tmp_path / "fuze.toml").write_text("[defaults]\nmax_calls = 4\nwarn_at = [0.5]\n")
    monkeypatch.setenv("FUZE_CONFIG", str(tmp_path / "fuze.toml"))
    script = Script()
    middleware = LoopGuardMiddleware(session_key=lambda ctx: "one")
    run = middleware.run_for("one")
    server = MCPServer("shop", middleware=[middleware])
    server.tool()(lookup)

    async def client(prompt: str) -> None:
        results: list[str] = []
        async with Client(server) as session:
            while (key := script.next_key(prompt, results)) is not None:
                result = await session.call_tool("lookup", {"key": key})
                text = " ".join(getattr(c, "text", "") for c in result.content)
                if result.is_error:
                    break  # the session's tool calls are stopped
                results.append(text)

    with capture_logs():
        asyncio.run(client(FIRST))
        assert run.killed is not None and run.killed.pattern == "max_calls"
        run.resume(extra_calls=2, note=NOTE)
        asyncio.run(client(SECOND))
    assert run.killed is None and run.notes() == []
    script.check()


# --------------------------------------------------------------------------- Claude Agent SDK


def test_claude_agent_sdk_hands_the_runs_notes_to_the_model_once() -> None:
    """Claude Code reads the notes as the hook's context after the result (``ScriptedCLI``)."""
    from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, query, tool

    from fuzeguard.integrations.claude_agent_sdk import LoopGuard
    from tests.helpers.claude_cli import ScriptedCLI, Step

    script = Script()

    @tool("lookup", "Look a key up.", {"key": str})
    async def sdk_lookup(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": lookup(**args)}]}

    def model(prompt: str, read: list[str]) -> Step:
        results: list[str] = []
        for text in read:  # a context note belongs to the result it follows
            if "value of" in text or not results:
                results.append(text)
            else:
                results[-1] += "\n\n" + text
        key = script.next_key(prompt, results)
        return "done" if key is None else ("lookup", {"key": key})

    guard = LoopGuard()
    server = create_sdk_mcp_server("shop", tools=[sdk_lookup])
    options = guard.protect(ClaudeAgentOptions(mcp_servers={"shop": server}))

    async def ask(prompt: str) -> None:
        cli = ScriptedCLI(model, session_id="s1")
        async for _ in query(prompt=prompt, options=options, transport=cli):
            pass

    scenario(lambda prompt: asyncio.run(ask(prompt)), tool="mcp__shop__lookup")
    script.check()


# --------------------------------------------------------------------------- Strands Agents


def test_strands_hands_the_runs_notes_to_the_model_once(strands_extras: dict[str, Any]) -> None:
    """Played in Strands' own environment (``strands_extras.py``)."""
    script = Script()
    script.read = {key: set(texts) for key, texts in strands_extras["notes"].items()}
    script.check()


# --------------------------------------------------------------------------- CrewAI


def test_crewai_hands_the_runs_notes_to_the_model_once(crewai_extras: dict[str, Any]) -> None:
    """Played in CrewAI's own environment (``crewai_extras.py``), a ReAct LLM reading each
    observation."""
    script = Script()
    script.read = {key: set(texts) for key, texts in crewai_extras["notes"].items()}
    script.check()
