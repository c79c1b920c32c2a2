"""Run limits: budgets that end a run whatever its shape (groq-code-cli's hard limits, Ralph's caps).

Limits are not heuristics: when one is reached the run ends (the detection's kind is ``"limit"``,
which always kills, except in observe mode). Every limit is off unless set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.judging.layer import LayerSettings, RunView, Scope, Section, setting
from fuzeguard._private.meaning.records import Call, Detection

_STOP = "Stop calling tools and give your final answer with what you have."


@dataclass(frozen=True, slots=True)
class Limits(LayerSettings):
    """End the run at the call that would go past a budget.

    ``max_calls``: the call after the N-th executed call of the run ends it.
    ``max_calls_per_turn``: the same within a turn (``run.end_turn()`` starts a new one).
    ``max_duration``: no call starts once the run is this many seconds old.
    ``max_errors`` / ``max_consecutive_errors``: the call after the N-th failed call (in all / in a
    row) ends the run. ``max_cost``: no call starts once the run has spent this much.
    """

    name: ClassVar[str] = "limits"
    section: ClassVar[Section] = "defaults"
    scope: ClassVar[Scope] = "run"

    max_calls: int | None = setting(
        None, type="int", minimum=1, optional=True, origin="groq-code-cli (100 per session)",
        doc="Calls per run, all functions together.",
    )
    max_calls_per_turn: int | None = setting(
        None, type="int", minimum=1, optional=True, origin="groq-code-cli (10 consecutive)",
        doc="Calls per turn; run.end_turn() starts a new turn.",
    )
    max_duration: float | None = setting(
        None, type="duration", minimum=0, optional=True, origin="groq-code-cli (30 minutes)",
        doc='Seconds a run may last: a number, or a string such as "90s", "30m", "1h30m".',
    )
    max_errors: int | None = setting(
        None, type="int", minimum=1, optional=True, origin="groq-code-cli (5 per session)",
        doc="Failed calls per run.",
    )
    max_consecutive_errors: int | None = setting(
        None, type="int", minimum=1, optional=True, origin="Ralph (5 consecutive failures)",
        doc="Failed calls in a row.",
    )
    max_cost: float | None = setting(
        None, type="float", minimum=0, optional=True, origin="Ralph ($10)",
        doc="Total cost per run, in the unit your cost= values use.",
    )

    @property
    def inert(self) -> bool:
        return (
            self.max_calls is None
            and self.max_calls_per_turn is None
            and self.max_duration is None
            and self.max_errors is None
            and self.max_consecutive_errors is None
            and self.max_cost is None
        )

    def check(self, run: RunView, call: Call) -> Detection | None:
        if self.max_calls is not None and run.calls >= self.max_calls:
            return self._hit(call, "max_calls", run.calls + 1, self.max_calls,
                             f"This task has used all {self.max_calls} tool calls it may make.")
        if self.max_calls_per_turn is not None and run.turn_calls >= self.max_calls_per_turn:
            return self._hit(call, "max_calls_per_turn", run.turn_calls + 1, self.max_calls_per_turn,
                             f"This turn has used all {self.max_calls_per_turn} tool calls it may make.")
        if self.max_errors is not None and run.errors >= self.max_errors:
            return self._hit(call, "max_errors", run.errors, self.max_errors,
                             f"Tool calls in this task have failed {run.errors} times.")
        if (self.max_consecutive_errors is not None
                and run.consecutive_errors >= self.max_consecutive_errors):
            return self._hit(call, "max_consecutive_errors", run.consecutive_errors,
                             self.max_consecutive_errors,
                             f"The last {run.consecutive_errors} tool calls all failed.")
        if self.max_cost is not None and run.cost >= self.max_cost:
            return self._hit(call, "max_cost", None, self.max_cost,
                             f"This task has spent {run.cost:g}, its budget is {self.max_cost:g}.")
        if self.max_duration is not None:
            elapsed = run.elapsed()
            if elapsed >= self.max_duration:
                return self._hit(call, "max_duration", None, self.max_duration,
                                 f"This task has run for {elapsed:.0f}s, its limit is "
                                 f"{self.max_duration:g}s.")
        return None

    def _hit(self, call: Call, key: str, count: int | None, limit: float, what: str) -> Detection:
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=limit,
            kind="limit",
            pattern=key,
            message=f"{what} ({key} = {limit:g}). {_STOP}",
        )
