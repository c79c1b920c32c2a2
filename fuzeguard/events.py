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
from fuzeguard._private.public import name_classes as _name_classes

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

# Tracebacks and reprs name this module, not the private one a class is defined in.
_name_classes(__name__, globals(), __all__)
