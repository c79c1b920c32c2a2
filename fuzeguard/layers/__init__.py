"""Detection layers: small frozen objects with one ``check(run, call)`` method.

Built-in layers are registered in ``BUILTIN_LAYERS`` by name; a new built-in layer is one module
here and one entry in that mapping. Users write their own against the ``Layer`` protocol and pass
instances with ``guard(..., layers=[...])``.
"""

from __future__ import annotations

from fuzeguard._private.layer import Layer, RunView, setting
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
    "CostVelocity",
    "Cycle",
    "Dedup",
    "Iterations",
    "Layer",
    "Limits",
    "Progress",
    "RunView",
    "Semantic",
    "setting",
]
