"""An OpenAI Agents SDK agent protected by ``LoopGuard`` with a scripted model (no network, no
key): ``python examples/frameworks/openai_agents_agent.py``
(needs ``pip install ".[openai-agents]"``)."""

import asyncio

from _tool import search
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, function_call

import fuzeguard
from fuzeguard.integrations.openai_agents import LoopGuard

stuck = ScriptedModel(
    [[function_call("search", {"query": "laptops"}, call_id=f"c{i}")] for i in range(10)]
)
agent = LoopGuard(on_loop="kill").protect(
    Agent(name="shopper", tools=[function_tool(search)], model=stuck)
)


async def main() -> None:
    with fuzeguard.run("openai-agents-task"):
        result = await Runner.run(agent, "find me a laptop")
    print("final output:", result.final_output)


asyncio.run(main())
