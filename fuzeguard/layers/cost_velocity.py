"""Layer 3, ``cost_velocity``: spending fast while producing nothing new (Fuze layer 3, enforced).

Cost comes from the guard (``cost=`` a number or a function of the result) and from
``fuzeguard.add_cost()`` inside a call. The layer is inert until a threshold is set: costs are in
whatever unit you use (dollars, tokens), so no default could mean anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.judging.layer import Feature, LayerSettings, RunView, setting
from fuzeguard._private.meaning.records import Call, CallRecord, Detection
from fuzeguard.layers._content import CONTENT, count_new


@dataclass(frozen=True, slots=True)
class CostVelocity(LayerSettings):
    """Flag a call when the last ``cost_velocity_window`` calls spent too much for what they brought.

    Spend is the sum of the recorded costs of the last ``cost_velocity_window`` completed calls.
    The call after them is a loop when

    * the spend is above ``cost_velocity_threshold`` (cost per window), or the spend divided by the
      minutes those calls took, from the start of the first to the end of the last, is above
      ``cost_velocity_per_minute``; and
    * at most one of those calls brought something new, in the sense of the ``progress`` layer
      (its result is not covered by the others in the window; acknowledgements count as new).

    Worked example: ``cost_velocity_threshold = 0.5``, window 5. An agent calls ``ask_llm`` five
    times at 0.12 each (0.60 in all) with reworded prompts, and gets the same answer four times and
    one new answer: 0.60 > 0.5 and one new result, so the sixth call to ``ask_llm`` is a loop. Had
    the answers been five different ones, or had the five calls cost 0.40, nothing would fire.
    """

    name: ClassVar[str] = "cost_velocity"
    # Each result's content, as ``progress`` reads it (computed once when both are on).
    features: ClassVar[tuple[Feature, ...]] = (CONTENT,)

    cost_velocity_window: int = setting(
        5, type="int", minimum=2, origin="Fuze layer 3",
        doc="How many recent calls the spend is measured over.",
    )
    cost_velocity_threshold: float | None = setting(
        None, type="float", minimum=0, optional=True, origin="Fuze layer 3",
        doc="Spend over the window above which calls that bring nothing new are a loop "
        "(in your cost unit; off when not set).",
    )
    cost_velocity_per_minute: float | None = setting(
        None, type="float", minimum=0, optional=True, origin="Fuze layer 3",
        doc="Spend per minute over the window above which calls that bring nothing new are a "
        "loop (off when not set).",
    )

    @property
    def history_needed(self) -> int:
        return self.cost_velocity_window

    @property
    def inert(self) -> bool:
        return self.cost_velocity_threshold is None and self.cost_velocity_per_minute is None

    def check(self, run: RunView, call: Call) -> Detection | None:
        per_window, per_minute = self.cost_velocity_threshold, self.cost_velocity_per_minute
        if per_window is None and per_minute is None:
            return None
        history = run.history
        size = self.cost_velocity_window
        if len(history) < size:
            return None
        window = list(history)[-size:]
        spend = sum(r.cost or 0.0 for r in window)
        if spend <= 0:
            return None
        over: str | None = None
        if per_window is not None and spend > per_window:
            over = f"spent {spend:g} over the last {size} calls, above {per_window:g}"
            limit = per_window
        elif per_minute is not None:
            rate = spend / _minutes(window)
            if rate > per_minute:
                over = f"spent {rate:g} per minute over the last {size} calls, above {per_minute:g}"
                limit = per_minute
        if over is None or call.fn not in {r.fn for r in window}:
            return None
        new = count_new(window, CONTENT.key)
        if new > 1:
            return None
        return Detection(
            layer=self.name,
            fn=call.fn,
            # No count: what is measured is money (spend or spend per minute), and the threshold
            # is its limit in the same unit; a count of calls beside it would mix the two.
            count=None,
            threshold=limit,
            pattern="cost_velocity",
            message=(
                f"This task {over}, and {'none' if new == 0 else 'only one'} of those calls brought "
                "anything new. Stop spending on the same approach: answer with what you have or "
                "change strategy."
            ),
        )


def _minutes(window: list[CallRecord]) -> float:
    first, last = window[0], window[-1]
    end = last.start + (last.duration or 0.0)
    # A burst of calls within a second is spending at least as fast as one per second.
    return max(end - first.start, 1.0) / 60.0
