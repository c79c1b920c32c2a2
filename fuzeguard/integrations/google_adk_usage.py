"""Token metering for Google ADK: a plugin that adds each model response's ``usage_metadata`` to
the run (``fuzeguard.metering``).

    runner = InMemoryRunner(app=App(name="shop", root_agent=agent, plugins=[
        LoopGuardPlugin(), UsagePlugin(prices=Prices({"gemini-2.5-flash": (0.30, 2.50)}))]))

Input tokens are the response's ``prompt_token_count`` and ``tool_use_prompt_token_count``;
output tokens its ``candidates_token_count`` and ``thoughts_token_count`` (together, its
``total_token_count``). The model name is the response's ``model_version``. A partial response
(streaming) adds nothing: the complete response that follows it carries the usage.
"""

from __future__ import annotations

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin

from fuzeguard._private.runs.run import Run
from fuzeguard.metering import Prices, add_usage


class UsagePlugin(BasePlugin):
    """Adds the tokens (and, with ``prices``, the cost) of each model response to ``run``
    (default: the run current when the response arrives: the invocation's, with
    ``LoopGuardPlugin``)."""

    def __init__(self, prices: Prices | None = None, run: Run | None = None, *,
                 name: str = "fuzeguard_usage") -> None:
        super().__init__(name)
        self.prices = prices
        self.run = run

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        usage = llm_response.usage_metadata
        if usage is None or llm_response.partial:
            return None
        tokens_in = (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0)
        tokens_out = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
        add_usage(tokens_in, tokens_out, model=llm_response.model_version, prices=self.prices,
                  run=self.run)
        return None


__all__ = ["UsagePlugin"]
