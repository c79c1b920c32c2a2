"""Token metering for Strands Agents: a hook provider that adds each model response's usage to
the run (``fuzeguard.metering``).

    agent = Agent(model=model, tools=[...], hooks=[LoopGuard(), UsageMeter(prices=prices)])

Each model call's usage is what Strands attaches to the response message
(``message["metadata"]["usage"]``: ``inputTokens``, ``outputTokens``) and adds to the agent's
``event_loop_metrics`` (``AgentResult.metrics.accumulated_usage``), including a response a hook
asked to retry. The model name is the model's configured ``model_id``.
"""

from __future__ import annotations

from typing import Any

from strands.hooks import AfterModelCallEvent, HookRegistry

from fuzeguard._private.runs.run import Run
from fuzeguard.metering import Prices, add_usage


class UsageMeter:
    """Adds the tokens (and, with ``prices``, the cost) of each model response to ``run``
    (default: the run current when the response arrives: the invocation's, with ``LoopGuard``)."""

    def __init__(self, prices: Prices | None = None, run: Run | None = None) -> None:
        self.prices = prices
        self.run = run

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(AfterModelCallEvent, self._metered)

    def _metered(self, event: AfterModelCallEvent) -> None:
        response = event.stop_response
        if response is None:
            return
        usage = (response.message.get("metadata") or {}).get("usage")
        if not usage:
            return
        config = event.agent.model.get_config()
        model = config.get("model_id") if isinstance(config, dict) else None
        add_usage(int(usage.get("inputTokens", 0)), int(usage.get("outputTokens", 0)),
                  model=model if isinstance(model, str) else None, prices=self.prices,
                  run=self.run)


__all__ = ["UsageMeter"]
