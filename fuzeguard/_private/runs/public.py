"""Public names for the classes the public modules export.

Tracebacks and reprs name the module users import from (``fuzeguard.LoopDetected``,
``fuzeguard.events.Detected``), not the private one a class is defined in, as httpx does.
Functions keep theirs: their tracebacks show the file, and their ``__module__`` is what
introspection and pickling expect. A class already given a public name keeps it: the package root
runs first, so the records shared with ``fuzeguard.layers`` stay ``fuzeguard``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def name_classes(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Give the classes among ``names`` defined in a private module the public ``module``."""
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) and obj.__module__.startswith("fuzeguard._private."):
            obj.__module__ = module
