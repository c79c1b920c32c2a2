"""Early budget warnings (``warn_at``): the usage at which each run budget warns, and the warning.

A run keeps, per budget that is set, the thresholds still ahead (``limit * fraction``, lowest
first), and the lowest of each in a plain attribute its bookkeeping compares a counter with: a
call pays one comparison per budget, and only a call that reaches a threshold comes here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fuzeguard._private.publish.events import BudgetWarning

if TYPE_CHECKING:
    from fuzeguard._private.protocols import RunHandle

INF = float("inf")
# The budgets warn_at applies to, and how a warning names each.
BUDGETS = {
    "max_calls": "the call budget",
    "max_calls_per_turn": "this turn's call budget",
    "max_cost": "the cost budget",
    "max_duration": "the time budget",
}
Steps = dict[str, list[tuple[float, float]]]


def arm(values: Mapping[str, Any], keys: tuple[str, ...] = tuple(BUDGETS),
        used: Mapping[str, float] | None = None) -> Steps:
    """The thresholds ahead for each budget in ``keys``: (usage, fraction), lowest first. With
    ``used``, thresholds that usage already passed are left out (a resumed run's new budgets)."""
    fractions = values["warn_at"]
    steps: Steps = {}
    if not fractions:
        return steps
    for key in keys:
        limit = values[key]
        if limit is None or limit <= 0:
            continue
        ahead = [(limit * f, f) for f in fractions]
        if used is not None:
            ahead = [s for s in ahead if s[0] > used.get(key, 0.0)]
        if ahead:
            steps[key] = ahead
    return steps


def first(steps: Steps, key: str) -> float:
    """The lowest threshold ahead for ``key``, or infinity."""
    ahead = steps.get(key)
    return ahead[0][0] if ahead else INF


def reached(run: RunHandle, steps: Steps, used: Mapping[str, float],
            values: Mapping[str, Any]) -> list[BudgetWarning]:
    """The warnings due at ``used``: each threshold passed is consumed, so it warns once."""
    out: list[BudgetWarning] = []
    for key, ahead in steps.items():
        now = used[key]
        while ahead and now >= ahead[0][0]:
            _, fraction = ahead.pop(0)
            limit = float(values[key])
            out.append(BudgetWarning(run, key, fraction, now, limit, message(key, fraction, now,
                                                                             limit)))
    return out


def message(key: str, fraction: float, used: float, limit: float) -> str:
    """The note for the model: "80% of the call budget used (8 of 10 calls): wrap up."."""
    if key == "max_duration":
        amount = f"{used:.0f}s of {limit:g}s"
    elif key == "max_cost":
        amount = f"{used:g} of {limit:g}"
    else:
        amount = f"{used:g} of {limit:g} calls"
    return (f"{fraction:.0%} of {BUDGETS[key]} used ({amount}): wrap up, and give your answer "
            "before it runs out.")
