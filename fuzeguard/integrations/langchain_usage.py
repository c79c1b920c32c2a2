"""Token metering for LangChain: a callback handler that adds each model response's
``usage_metadata`` to the run (``fuzeguard.metering``).

    meter = UsageMeter(prices=Prices({"gpt-4o-mini": (0.15, 0.60)}))
    agent.invoke(task, {"callbacks": [meter]})

The model name is the response's ``response_metadata["model_name"]`` (as LangChain's own
``UsageMetadataCallbackHandler`` reads it). A response without ``usage_metadata`` adds nothing.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from fuzeguard._private.runs.run import Run
from fuzeguard.metering import Prices, add_usage


class UsageMeter(BaseCallbackHandler):
    """Adds the tokens (and, with ``prices``, the cost) of each chat model response to ``run``
    (default: the run current when the response arrives)."""

    def __init__(self, prices: Prices | None = None, run: Run | None = None) -> None:
        self.prices = prices
        self.run = run

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generations in response.generations:
            for generation in generations:
                if not isinstance(generation, ChatGeneration):
                    continue
                message = generation.message
                if not isinstance(message, AIMessage) or not message.usage_metadata:
                    continue
                usage = message.usage_metadata
                model = message.response_metadata.get("model_name")
                add_usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)),
                          model=model if isinstance(model, str) else None, prices=self.prices,
                          run=self.run)


__all__ = ["UsageMeter"]
