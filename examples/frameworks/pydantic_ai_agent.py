"""A Pydantic AI agent whose toolset is wrapped by ``loop_guard``, with a scripted model (no
network, no key): ``python examples/frameworks/pydantic_ai_agent.py``
(needs ``pip install ".[pydantic-ai]"``)."""

from _tool import search
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.pydantic_ai import loop_guard


def stuck_model(messages: list[object], info: AgentInfo) -> ModelResponse:
    """A model that asks for the same search every turn."""
    return ModelResponse(parts=[ToolCallPart("search", {"query": "laptops"})])


shop = Agent(FunctionModel(stuck_model), toolsets=[loop_guard(FunctionToolset([search]))])

with fuzeguard.run("pydantic-ai-task") as run:
    try:
        shop.run_sync("find me a laptop")
    except LoopDetected as exc:
        print(exc.detection.fn, "killed after", run.stats().calls, "calls")
