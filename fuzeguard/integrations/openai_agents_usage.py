"""Token metering for the OpenAI Agents SDK: run hooks that add each model response's ``Usage``
to the run (``fuzeguard.metering``).

    await Runner.run(agent, task, hooks=UsageHooks(prices=Prices({"gpt-4.1": (2.0, 8.0)})))

The model name is the agent's model when it is given by name (``Agent(model="gpt-4.1")``), else
the model object's ``model`` attribute if it has a string one.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, ModelResponse, RunContextWrapper, RunHooks

from fuzeguard._private.runs.run import Run
from fuzeguard.metering import Prices, add_usage


class UsageHooks(RunHooks[Any]):
    """Adds the tokens (and, with ``prices``, the cost) of each model response to ``run``
    (default: the current run)."""

    def __init__(self, prices: Prices | None = None, run: Run | None = None) -> None:
        self.prices = prices
        self.run = run

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        usage = response.usage
        model = agent.model if isinstance(agent.model, str) else getattr(agent.model, "model", None)
        add_usage(int(usage.input_tokens), int(usage.output_tokens),
                  model=model if isinstance(model, str) else None, prices=self.prices,
                  run=self.run)


__all__ = ["UsageHooks"]
