"""Cheaper construction of the frozen records made on every guarded call.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``, which
on CPython costs more than the rest of a field's handling; for the ``Call``, ``Decision`` and
``CallRecord`` made on every guarded call that was a noticeable share of the guard's overhead.
``maker(cls)`` returns a function with the same parameters and defaults as ``cls(...)`` that
fills the slots directly. The object it returns is an ordinary instance of ``cls``: equal to,
hashing and printing like the one ``cls(...)`` would build.

Only plain frozen slotted dataclasses qualify; for any other class (one with ``__post_init__``,
``InitVar`` or ``init=False`` fields, or without slots) ``maker`` returns ``cls`` itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from fuzeguard._private.records import Call, CallRecord, Decision

T = TypeVar("T")


def maker(cls: type[T]) -> Callable[..., T]:
    """A constructor for ``cls`` that sets its slots directly (or ``cls`` when that is unsafe)."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        return cls
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or hasattr(cls, "__post_init__"):
        return cls
    fields = dataclasses.fields(cls)
    if any(not f.init for f in fields) or len(fields) != len(cls.__dict__["__slots__"]):
        return cls
    names: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_MISSING": dataclasses.MISSING}
    signature: list[str] = []
    body: list[str] = []
    for f in fields:
        names[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        value = f.name
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
            signature.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            signature.append(f"{f.name}=_MISSING")
            value = f"_factory_{f.name}() if {f.name} is _MISSING else {f.name}"
        else:
            signature.append(f.name)
        body.append(f"    _set_{f.name}(self, {value})")
    source = "\n".join(
        [f"def make({', '.join(signature)}):", "    self = _new(_cls)", *body, "    return self"]
    )
    exec(source, names)  # a generated function, as dataclasses itself makes its __init__
    make: Callable[..., T] = names["make"]
    make.__qualname__ = f"new_{cls.__name__}"
    make.__doc__ = f"Build a {cls.__name__} (same arguments as {cls.__name__}(...))."
    return make


new_call = maker(Call)
new_decision = maker(Decision)
new_record = maker(CallRecord)
