"""Token metering: the token usage a framework reports, added to the run, and priced.

``add_usage(tokens_in, tokens_out, model=..., prices=...)`` adds a model request's tokens to the
current run (``run.stats().tokens_in`` / ``tokens_out``); with a ``Prices`` table it also adds
their cost, so that ``max_cost``, ``warn_at`` and ``cost_velocity`` work without a hand-written
``cost=``. The framework adapters call it with what the framework itself reports
(``fuzeguard.integrations.langchain_usage``, ``openai_agents_usage``, ``pydantic_ai_usage``,
``google_adk_usage``, ``strands_usage``).

Where the cost goes: inside a guarded call (a tool that makes its own model request) it is that
call's cost, as ``add_cost()`` is. Outside one (the agent's own model turns, between tool calls)
it is counted toward the run at once (``max_cost`` and ``warn_at`` see it from the next call) and
billed to the next guarded call that completes: its record carries it, so ``cost_velocity`` sees
the model's spending alongside the tool calls it asked for, and its trace line too (replay sees
the cost with that call).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from fuzeguard._private.runs.guard import _cost_box
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.run import Run

PER = 1_000_000


@dataclass(frozen=True, slots=True)
class Prices:
    """What tokens cost, per million, by model name: ``{"gpt-4o-mini": (0.15, 0.60)}`` is 0.15
    per million input tokens and 0.60 per million output tokens. A model not listed costs
    ``default`` (None: it is metered in tokens only). Names match exactly, or by the longest
    listed prefix (``"gpt-4o-mini"`` prices ``"gpt-4o-mini-2024-07-18"``)."""

    models: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    default: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for name, pair in [*self.models.items(), ("default", self.default or (0.0, 0.0))]:
            if (not isinstance(pair, tuple) or len(pair) != 2
                    or not all(_price(v) for v in pair)):
                raise ValueError(
                    f"Prices: {name!r} must be (input price, output price) per million tokens, "
                    f"two finite numbers of at least 0; got {pair!r}"
                )

    def cost(self, model: str | None, tokens_in: int, tokens_out: int) -> float | None:
        """The cost of these tokens on ``model``, or None if it has no price."""
        pair = self._pair(model)
        if pair is None:
            return None
        return (tokens_in * pair[0] + tokens_out * pair[1]) / PER

    def _pair(self, model: str | None) -> tuple[float, float] | None:
        if model is not None:
            found = self.models.get(model)
            if found is not None:
                return found
            best = max((n for n in self.models if model.startswith(n)), key=len, default=None)
            if best is not None:
                return self.models[best]
        return self.default


def _price(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def add_usage(
    tokens_in: int,
    tokens_out: int,
    *,
    model: str | None = None,
    prices: Prices | None = None,
    run: Run | None = None,
) -> float:
    """Add one model request's tokens to ``run`` (default: the current run) and, with
    ``prices``, their cost (see the module docstring for where it is billed). Returns the cost
    added (0.0 when unpriced)."""
    for name, value in (("tokens_in", tokens_in), ("tokens_out", tokens_out)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TypeError(f"add_usage(): {name} must be a whole number of at least 0, "
                            f"got {value!r}")
    target = run if run is not None else current_run()
    cost = prices.cost(model, tokens_in, tokens_out) if prices is not None else None
    box = _cost_box.get() if run is None else None
    with target._lock:
        target._tokens_in += tokens_in
        target._tokens_out += tokens_out
        if cost and box is None:
            target._unbilled += cost
            target._cost += cost
            if target._cost >= target._warn_cost:
                target._budget_reached()
    if target._outbox:
        target._drain()
    if cost and box is not None:
        box[0] += cost  # a guarded call in progress: its own cost, as add_cost() does
    return cost or 0.0


__all__ = ["PER", "Prices", "add_usage"]
