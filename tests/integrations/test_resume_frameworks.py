"""The resume path with the OpenAI Agents SDK (the previous run's items) and Pydantic AI (its
message history): an agent stopped by the guard goes on in the same run with the note for the
model, and the loop that stopped it is caught again at its first repeat (real packages, scripted
models). LangChain's, with a checkpointer, is ``test_resume_langchain.py``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from structlog.testing import capture_logs

import fuzeguard

NOTE = "You were stopped for repeating one search: look at the reviews page instead."
fetched: list[str] = []


def search(query: str) -> str:
    """Search the web."""
    return "3 results for " + query


def fetch(url: str) -> str:
    """Fetch a page."""
    fetched.append(url)
    return "reviews: buy the X1"


def decide(told: bool, last_tool: str | None, relapse: bool) -> tuple[str, dict[str, Any]] | str:
    """The scripted model: repeats one search until it is told otherwise (``told``: the note is
    in its input); then fetches the reviews page once and answers. ``relapse``: after the note,
    it goes back to the search that looped."""
    if told and not relapse:
        if last_tool == "fetch":
            return "The reviews page says: buy the X1."
        return "fetch", {"url": "https://reviews.example"}
    return "search", {"query": "best laptop"}


# --------------------------------------------------------------------------- OpenAI Agents SDK


def _openai_agent(relapse: bool) -> tuple[Any, list[int]]:
    from agents import Agent, Model, ModelResponse, Usage, function_tool
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from fuzeguard.integrations.openai_agents import LoopGuard

    turns = [0]

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                               **kwargs: Any) -> ModelResponse:
            turns[0] += 1
            items = [input] if isinstance(input, str) else list(input)
            told = any(isinstance(i, dict) and i.get("role") == "user" and NOTE in str(i["content"])
                       for i in items)
            calls = {i["call_id"]: i["name"] for i in items
                     if isinstance(i, dict) and i.get("type") == "function_call"}
            last = items[-1] if items else None
            last_tool = calls.get(last.get("call_id")) if isinstance(last, dict) else None
            step = decide(told, last_tool, relapse)
            if isinstance(step, str):
                item: Any = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text=step, annotations=[])])
            else:
                item = ResponseFunctionToolCall(id=f"c{turns[0]}", call_id=f"c{turns[0]}",
                                                type="function_call", name=step[0],
                                                arguments=json.dumps(step[1]))
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    agent = Agent(name="shopper", model=Scripted(),
                  tools=[function_tool(search), function_tool(fetch)])
    return LoopGuard().protect(agent), turns


def test_a_stopped_openai_agent_resumes_in_its_run_with_the_previous_runs_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Runner

    fetched.clear()
    agent, _ = _openai_agent(relapse=False)

    async def main() -> tuple[Any, Any, fuzeguard.Run]:
        async with fuzeguard.run("task") as run:
            first = await Runner.run(agent, "find me a laptop")
            assert run.killed is not None
            run.resume(note=NOTE)
            items = [*first.to_input_list(), {"role": "user", "content": "\n".join(run.notes())}]
            second = await Runner.run(agent, items)
        return first, second, run

    with capture_logs():
        first, second, run = asyncio.run(main())
    assert first.final_output.startswith("Stopped: the agent was looping")
    assert second.final_output == "The reviews page says: buy the X1."
    assert fetched == ["https://reviews.example"]  # the new call went ahead
    assert run.killed is None
    assert run.stats().calls_by_fn == {"search": 4, "fetch": 1}  # the first run's history kept


def test_a_resumed_openai_agent_that_repeats_its_loop_is_stopped_at_the_first_repeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Runner

    agent, turns = _openai_agent(relapse=True)

    async def main() -> tuple[Any, fuzeguard.Run, int, int]:
        async with fuzeguard.run("task") as run:
            first = await Runner.run(agent, "find me a laptop")
            run.resume(note=NOTE)
            calls_before, turns_before = run.stats().calls, turns[0]
            items = [*first.to_input_list(), {"role": "user", "content": "\n".join(run.notes())}]
            second = await Runner.run(agent, items)
        return second, run, calls_before, turns_before

    with capture_logs():
        second, run, calls_before, turns_before = asyncio.run(main())
    assert second.final_output.startswith("Stopped: the agent was looping")
    assert run.stats().calls == calls_before  # the repeated search never ran
    # One model turn, then the call for a final answer (this model asks for a tool again: the
    # canned answer); the repeated search never ran.
    assert turns[0] == turns_before + 2


# --------------------------------------------------------------------------- Pydantic AI


def _pydantic_agent(relapse: bool) -> tuple[Any, list[int]]:
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

    turns = [0]

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turns[0] += 1
        parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
        told = any(isinstance(p, UserPromptPart) and NOTE in str(p.content) for p in parts)
        last = messages[-1].parts[-1] if messages and messages[-1].parts else None
        step = decide(told, last.tool_name if isinstance(last, ToolReturnPart) else None, relapse)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(step[0], step[1], tool_call_id=f"c{turns[0]}")])

    agent = Agent(FunctionModel(scripted), tools=[search, fetch], capabilities=[LoopGuard()])
    return agent, turns


def test_a_stopped_pydantic_ai_agent_resumes_in_its_run_with_its_message_history() -> None:
    """A kill ends ``run_sync`` with the final answer and no messages of its own: the history is
    the one ``capture_run_messages`` kept, its last (refused) tool call closed out by
    ``repair_messages`` so that a new prompt may follow."""
    from pydantic_ai import capture_run_messages
    from pydantic_ai.messages import repair_messages

    fetched.clear()
    agent, _ = _pydantic_agent(relapse=False)
    with capture_logs(), fuzeguard.run("task") as run:
        with capture_run_messages() as history:
            first = agent.run_sync("find me a laptop")
        assert first.output.startswith("Stopped: the agent was looping")
        run.resume(note=NOTE)
        second = agent.run_sync("\n".join(run.notes()), message_history=repair_messages(history))
    assert second.output == "The reviews page says: buy the X1."
    assert fetched == ["https://reviews.example"]
    assert run.killed is None
    assert run.stats().calls_by_fn == {"search": 4, "fetch": 1}


def test_a_resumed_pydantic_ai_agent_that_repeats_its_loop_is_stopped_at_the_first_repeat() -> None:
    from pydantic_ai import capture_run_messages
    from pydantic_ai.messages import repair_messages

    agent, turns = _pydantic_agent(relapse=True)
    with capture_logs(), fuzeguard.run("task") as run:
        with capture_run_messages() as history:
            agent.run_sync("find me a laptop")
        run.resume(note=NOTE)
        calls_before, turns_before = run.stats().calls, turns[0]
        second = agent.run_sync("\n".join(run.notes()), message_history=repair_messages(history))
    assert second.output.startswith("Stopped: the agent was looping")
    assert run.stats().calls == calls_before
    assert turns[0] == turns_before + 2  # a model turn, then the call for a final answer
