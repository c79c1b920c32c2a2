"""The events a run publishes to its subscribers (``run.subscribe``).

Each is a frozen dataclass naming its run: ``CallStarted``, ``CallCompleted``, ``CallRefused``,
``CallInterrupted``, ``Detected``, ``RunKilled``, ``TurnEnded``, ``RunReset``, ``CostAdded``,
``BudgetWarning``, ``RunResumed`` and ``RunClosed``. See ``docs/concepts.md`` ("Run events").
"""

from __future__ import annotations

from fuzeguard._private.publish.events import (
    BudgetWarning,
    CallCompleted,
    CallInterrupted,
    CallRefused,
    CallStarted,
    CostAdded,
    Detected,
    Event,
    RunClosed,
    RunKilled,
    RunReset,
    RunResumed,
    TurnEnded,
)
from fuzeguard._private.runs.public import name_classes as _name_classes

__all__ = [
    "BudgetWarning",
    "CallCompleted",
    "CallInterrupted",
    "CallRefused",
    "CallStarted",
    "CostAdded",
    "Detected",
    "Event",
    "RunClosed",
    "RunKilled",
    "RunReset",
    "RunResumed",
    "TurnEnded",
]

# Tracebacks and reprs name this module, not the private one a class is defined in.
_name_classes(__name__, globals(), __all__)
