"""The configuration keys: one ``FieldSpec`` per key, built from ``Settings`` and the built-in
layers' fields (the single source of every default), with the tables they live in and their alias.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from typing import Any

from fuzeguard._private.configuration.settings import Settings

SECTIONS = ("defaults", "loop_detection")
ALIASES = {"kill_on_loop": "on_loop"}
# Settings that code may give as a callable as well as a plain value.
CALLABLE_OK = frozenset({"cost", "skip_value", "embed"})
# Settings whose text in a file names code to import ("package.module:function"): obeyed only
# from a file no other user can change (``trust.py``).
IMPORT_KEYS = frozenset({"embed"})


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """One configuration key: where it lives, its type and bounds, its default and its story."""

    key: str
    owners: tuple[type, ...]
    section: str
    scope: str
    type: str
    default: Any
    doc: str
    origin: str
    minimum: float | None
    maximum: float | None
    optional: bool
    unset: str = "off"


def setting_classes() -> list[type]:
    # Deferred for start-up time: the built-in layers load with the first guard, not with
    # ``import fuzeguard``.
    from fuzeguard.layers import BUILTIN_LAYERS

    return [Settings, *BUILTIN_LAYERS.values()]


@cache
def schema() -> Mapping[str, FieldSpec]:
    """Every configuration key, from ``Settings`` and the built-in layers' fields."""
    specs: dict[str, FieldSpec] = {}
    for cls in setting_classes():
        for f in dataclasses.fields(cls):
            meta = f.metadata
            if "type" not in meta:
                continue
            spec = FieldSpec(
                key=f.name,
                owners=(cls,),
                section=meta["section"] or getattr(cls, "section", "loop_detection"),
                scope=meta["scope"] or getattr(cls, "scope", "function"),
                type=meta["type"],
                default=f.default,
                doc=meta["doc"],
                origin=meta["origin"],
                minimum=meta["minimum"],
                maximum=meta["maximum"],
                optional=meta["optional"],
                unset=meta["unset"],
            )
            if f.name in specs:
                # A key shared by several layers (such as result_aware) sets all of them.
                spec = dataclasses.replace(specs[f.name], owners=(*specs[f.name].owners, cls))
            specs[f.name] = spec
    return specs


def defaults() -> dict[str, Any]:
    """The built-in value of every key."""
    return {key: spec.default for key, spec in schema().items()}


def plain_data_key(key: str) -> bool:
    """Whether ``key`` holds plain data that a trace may record and replay may apply: a known key
    that can hold neither code nor the name of code (``embed``, ``cost``, ``skip_value``) nor a
    path that replaying would write to (``trace``) nor a server it would connect to (``store``)."""
    key = ALIASES.get(key, key)
    spec = schema().get(key)
    return spec is not None and key not in CALLABLE_OK and spec.type not in ("path", "store", "any")
