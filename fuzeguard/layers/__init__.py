"""Detection layers: small frozen objects with one ``check(run, call)`` method.

Built-in layers are registered in ``BUILTIN_LAYERS`` by name; a new built-in layer is one module
here and one entry in that mapping. Users write their own against the ``Layer`` protocol and pass
instances with ``guard(..., layers=[...])``.
"""

from __future__ import annotations

from fuzeguard._private.layer import Layer, RunView, setting
from fuzeguard.layers.dedup import Dedup
from fuzeguard.layers.iterations import Iterations
from fuzeguard.layers.limits import Limits

BUILTIN_LAYERS: dict[str, type] = {
    "iterations": Iterations,
    "dedup": Dedup,
    "limits": Limits,
}

__all__ = ["BUILTIN_LAYERS", "Dedup", "Iterations", "Layer", "Limits", "RunView", "setting"]
