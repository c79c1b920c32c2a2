"""A smolagents ``ToolCallingAgent`` with a guarded tool and ``stop_on_kill``, with a scripted
model (no network, no key): ``python examples/frameworks/smolagents_agent.py``
(needs ``pip install ".[smolagents]"``)."""

from typing import Any

from _tool import search
from smolagents import ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.smolagents import guarded_tool, stop_on_kill


class StuckModel(Model):
    """A scripted model that asks for the same search every step."""

    def generate(self, messages: Any, stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        function = ChatMessageToolCallFunction(name="search", arguments={"query": "laptops"})
        call = ChatMessageToolCall(id=str(len(messages)), type="function", function=function)
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


agent = ToolCallingAgent(
    tools=[guarded_tool(search, on_loop="kill")],
    model=StuckModel(model_id="stuck"),
    step_callbacks=[stop_on_kill],
    verbosity_level=-1,
)

with fuzeguard.run("smolagents-task"):
    try:
        agent.run("find me a laptop")
    except LoopDetected as exc:
        print("agent stopped at call", exc.detection.call_index)
