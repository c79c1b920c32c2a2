"""Detection layers: small frozen objects with one ``check(run, call)`` method.

Built-in layers are registered in ``BUILTIN_LAYERS`` by name; a new built-in layer is one module
here and one entry in that mapping (docs/contributing.md lists the rest of the checklist). Users
write their own against the ``Layer`` protocol and its optional hooks (``KeepsHistory``,
``MayBeInert``, ``ObservesResults``, ``ObservesCalls``, ``SharesFeatures``, ``WatchesStreams``) and
pass instances with ``guard(..., layers=[...])``; everything a layer needs is importable from here.
"""

from __future__ import annotations

from fuzeguard._private.judging.layer import (
    Feature,
    KeepsHistory,
    Layer,
    MayBeInert,
    ObservesCalls,
    ObservesResults,
    RunView,
    SharesFeatures,
    StreamWatcher,
    WatchesStreams,
    setting,
)
from fuzeguard._private.meaning.kinds import KINDS
from fuzeguard._private.meaning.records import Call, CallRecord, Detection
from fuzeguard._private.runs.public import name_classes as _name_classes
from fuzeguard.layers.cost_velocity import CostVelocity
from fuzeguard.layers.cycle import Cycle
from fuzeguard.layers.dedup import Dedup
from fuzeguard.layers.iterations import Iterations
from fuzeguard.layers.limits import Limits
from fuzeguard.layers.progress import Progress
from fuzeguard.layers.semantic import Semantic

BUILTIN_LAYERS: dict[str, type] = {
    "iterations": Iterations,
    "dedup": Dedup,
    "cycle": Cycle,
    "cost_velocity": CostVelocity,
    "progress": Progress,
    "semantic": Semantic,
    "limits": Limits,
}

__all__ = [
    "BUILTIN_LAYERS",
    "KINDS",
    "Call",
    "CallRecord",
    "CostVelocity",
    "Cycle",
    "Dedup",
    "Detection",
    "Feature",
    "Iterations",
    "KeepsHistory",
    "Layer",
    "Limits",
    "MayBeInert",
    "ObservesCalls",
    "ObservesResults",
    "Progress",
    "RunView",
    "Semantic",
    "SharesFeatures",
    "StreamWatcher",
    "WatchesStreams",
    "setting",
]

# Tracebacks and reprs name this module, not the private one a class is defined in.
_name_classes(__name__, globals(), __all__)
