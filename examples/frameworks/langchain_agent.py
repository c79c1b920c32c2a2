"""A LangChain agent with ``LoopGuardMiddleware`` and a scripted model (no network, no key):
``python examples/frameworks/langchain_agent.py`` (needs ``pip install ".[langchain]"``)."""

from typing import Any

from _tool import search
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

import fuzeguard
from fuzeguard.integrations.langchain import LoopGuardMiddleware


class StuckModel(BaseChatModel):
    """A scripted model that asks for the same search every turn."""

    @property
    def _llm_type(self) -> str:
        return "stuck"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "StuckModel":
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        call = {"name": "search", "args": {"query": "laptops"}, "id": f"call-{len(messages)}"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])


agent = create_agent(StuckModel(), [search], middleware=[LoopGuardMiddleware(on_loop="kill")])

with fuzeguard.run("langchain-task"):
    state = agent.invoke({"messages": [("user", "find me a laptop")]}, {"recursion_limit": 25})
print(state["messages"][-1].content)
