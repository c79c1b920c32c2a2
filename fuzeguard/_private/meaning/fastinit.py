"""Cheaper construction of the frozen records made on every guarded call.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__``, which
on CPython costs more than the rest of a field's handling; for the ``Call``, ``Decision`` and
``CallRecord`` made on every guarded call that was a noticeable share of the guard's overhead.
``maker(cls)`` returns a function with the same parameters and defaults as ``cls(...)``.

It builds the object as a *draft*: an instance of a plain class with the very same slots, whose
``__init__`` stores each field as an ordinary attribute, and then makes it an instance of ``cls``
(``__class__`` assignment, which Python allows between classes of the same layout). The object
it returns is an ordinary, frozen instance of ``cls``: equal to, hashing and printing like the
one ``cls(...)`` would build. Where a draft cannot become a ``cls`` (an interpreter that refuses
the assignment), the maker sets each slot through its descriptor instead.

Only plain frozen slotted dataclasses qualify; for any other class (one with ``__post_init__``,
``InitVar`` or ``init=False`` fields, or without slots) ``maker`` returns ``cls`` itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from fuzeguard._private.meaning.records import Call, CallRecord, Decision

T = TypeVar("T")


def maker(cls: type[T]) -> Callable[..., T]:
    """A constructor for ``cls`` that skips its frozen ``__init__`` (or ``cls`` when unsafe)."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        return cls
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or hasattr(cls, "__post_init__"):
        return cls
    fields = dataclasses.fields(cls)
    slots = tuple(cls.__dict__["__slots__"])
    if any(not f.init for f in fields) or tuple(f.name for f in fields) != slots:
        return cls
    if cls.__bases__ != (object,):
        return cls
    names: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_MISSING": dataclasses.MISSING}
    signature: list[str] = []
    values: list[str] = []
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
        values.append(value)
    draft = type(f"{cls.__name__}Draft", (), {"__slots__": slots})
    names["_draft"] = draft
    draft_source = [
        f"def make({', '.join(signature)}):",
        "    self = _new(_draft)",
        *(f"    self.{f.name} = {value}" for f, value in zip(fields, values, strict=True)),
        "    self.__class__ = _cls",
        "    return self",
    ]
    setter_source = [
        f"def make({', '.join(signature)}):",
        "    self = _new(_cls)",
        *(f"    _set_{f.name}(self, {value})" for f, value in zip(fields, values, strict=True)),
        "    return self",
    ]
    # Generated from the dataclass's own field names, as dataclasses makes its __init__.
    exec("\n".join(draft_source), names)
    make: Callable[..., T] = names["make"]
    if not _drafts_work(make, cls, fields):
        exec("\n".join(setter_source), names)
        make = names["make"]
    make.__qualname__ = f"new_{cls.__name__}"
    make.__doc__ = f"Build a {cls.__name__} (same arguments as {cls.__name__}(...))."
    return make


def _drafts_work(make: Callable[..., Any], cls: type[Any], fields: tuple[Any, ...]) -> bool:
    """Whether ``make`` builds what ``cls`` builds, on sample values: an interpreter that does
    not allow the draft to become a ``cls`` raises, and the slot setters are used instead."""
    sample = {f.name: object() for f in fields}
    try:
        made = make(**sample)
    except TypeError:
        return False
    return type(made) is cls and made == cls(**sample)


new_call = maker(Call)
new_decision = maker(Decision)
new_record = maker(CallRecord)
