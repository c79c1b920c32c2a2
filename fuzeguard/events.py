"""The events a run publishes to its subscribers (``run.subscribe``).

Each is a frozen dataclass naming its run: ``CallStarted``, ``CallCompleted``, ``CallRefused``,
``CallInterrupted``, ``Detected``, ``RunKilled``, ``TurnEnded``, ``RunReset``, ``CostAdded`` and
``RunClosed``. See ``docs/concepts.md`` ("Run events").
"""

from __future__ import annotations

from fuzeguard._private.events import (
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
    TurnEnded,
)

__all__ = [
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
    "TurnEnded",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = "fuzeguard.events"
del _name, _obj
