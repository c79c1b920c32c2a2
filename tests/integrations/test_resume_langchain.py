"""The resume path with a framework: a LangChain agent (real langchain / langgraph, a scripted
model, a checkpointer) stopped by the guard goes on in the same run with the note for the model,
and the loop that stopped it is caught again at its first repeat."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard.integrations.langchain import LoopGuardMiddleware

NOTE = "You were stopped for repeating one search: look at the reviews page instead."


class Scripted(BaseChatModel):
    """Repeats one search until it is told otherwise; then fetches a page once and answers.
    ``relapse``: after the note, it goes back to the search that looped."""

    relapse: bool = False
    turns: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.turns += 1
        told = any(isinstance(m, HumanMessage) and NOTE in str(m.content) for m in messages)
        last = messages[-1]
        if told and not self.relapse:
            if isinstance(last, ToolMessage) and last.name == "fetch":
                message = AIMessage("The reviews page says: buy the X1.")
            else:
                message = AIMessage("", tool_calls=[{"name": "fetch", "id": f"c{self.turns}",
                                                     "args": {"url": "https://reviews.example"}}])
        else:
            message = AIMessage("", tool_calls=[{"name": "search", "id": f"c{self.turns}",
                                                 "args": {"query": "best laptop"}}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def search(query: str) -> str:
    """Search the web."""
    return "3 results for " + query


fetched: list[str] = []


def fetch(url: str) -> str:
    """Fetch a page."""
    fetched.append(url)
    return "reviews: buy the X1"


def _agent(model: Scripted) -> Any:
    return create_agent(model, [search, fetch], middleware=[LoopGuardMiddleware()],
                        checkpointer=InMemorySaver())


def test_a_stopped_langchain_agent_resumes_in_its_run_with_the_note() -> None:
    fetched.clear()
    agent = _agent(Scripted())
    thread = {"configurable": {"thread_id": "t1"}, "recursion_limit": 25}
    with capture_logs(), fuzeguard.run("task") as run:
        first = agent.invoke({"messages": [("user", "find me a laptop")]}, thread)
        assert first["messages"][-1].content.startswith("Stopped: the agent was looping")
        assert run.killed is not None
        run.resume(note=NOTE)
        notes = run.notes()
        second = agent.invoke({"messages": [("user", "\n".join(notes))]}, thread)
    assert second["messages"][-1].content == "The reviews page says: buy the X1."
    assert fetched == ["https://reviews.example"]  # the new call went ahead
    assert run.killed is None
    # The history of the first invocation was kept: the checkpointer's thread and the run's.
    assert run.stats().calls_by_fn == {"search": 4, "fetch": 1}


def test_a_resumed_langchain_agent_that_repeats_its_loop_is_stopped_at_the_first_repeat() -> None:
    model = Scripted(relapse=True)
    agent = _agent(model)
    thread = {"configurable": {"thread_id": "t2"}, "recursion_limit": 25}
    with capture_logs(), fuzeguard.run("task") as run:
        agent.invoke({"messages": [("user", "find me a laptop")]}, thread)
        run.resume(note=NOTE)
        calls_before = run.stats().calls
        turns_before = model.turns
        second = agent.invoke({"messages": [("user", "\n".join(run.notes()))]}, thread)
    assert second["messages"][-1].content.startswith("Stopped: the agent was looping")
    assert run.stats().calls == calls_before  # the repeated search never ran
    # One model turn, then the call for a final answer (this model asks for a tool again: the
    # canned answer).
    assert model.turns == turns_before + 2
