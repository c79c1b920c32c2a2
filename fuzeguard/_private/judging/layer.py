"""The layer protocol and its optional hooks, the read-only run view layers look at, and
``setting()``.

A layer is a frozen, slotted dataclass whose fields are its settings. Each field is declared with
``setting()``, which records the default (the single place it is written), its type for validation,
and its documentation; ``fuzeguard.toml`` keys and guard keyword arguments map one to one onto
these fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from fuzeguard._private.meaning.records import Call, CallRecord, Detection

Section = Literal["defaults", "loop_detection"]
Scope = Literal["function", "run"]
# Value kinds the validator knows; see validation.coerce.
ValueType = Literal[
    "int", "float", "bool", "str", "strs", "duration", "actions", "enabled", "path", "kind",
    "store", "namespace", "fractions", "any",
]


def setting(
    default: Any,
    *,
    type: ValueType,
    doc: str,
    origin: str = "fuzeguard",
    minimum: float | None = None,
    maximum: float | None = None,
    optional: bool = False,
    section: Section | None = None,
    scope: Scope | None = None,
    unset: str = "off",
) -> Any:
    """Declare a setting: a dataclass field carrying its type, bounds, documentation and origin.

    ``optional`` settings accept ``None`` in code and are simply left out in TOML; ``unset`` says
    what leaving them out means ("off" for most).
    ``section``/``scope`` override the owning class's ``section``/``scope`` for this field.
    """
    metadata = {
        "type": type,
        "doc": doc,
        "origin": origin,
        "minimum": minimum,
        "maximum": maximum,
        "optional": optional,
        "section": section,
        "scope": scope,
        "unset": unset,
    }
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or another immutable default for settings")
    return dataclasses.field(default=default, metadata=metadata)


@runtime_checkable
class RunView(Protocol):
    """What a layer may read of a run. Nothing here may be changed by a layer.

    ``history`` holds the most recent calls, oldest first, bounded in length: completed ones, and
    calls still in flight when another call is decided meanwhile (``CallRecord.in_flight``).
    ``same_args(fp)`` returns every call in ``history`` with that argument fingerprint (in-flight
    ones included), oldest first, without scanning the whole history.
    """

    @property
    def id(self) -> str: ...
    @property
    def calls(self) -> int: ...
    @property
    def errors(self) -> int: ...
    @property
    def consecutive_errors(self) -> int: ...
    @property
    def cost(self) -> float: ...
    @property
    def turn_calls(self) -> int: ...
    @property
    def history(self) -> Sequence[CallRecord]: ...

    def calls_of(self, fn: str) -> int: ...
    def elapsed(self) -> float: ...
    def same_args(self, args_fp: bytes) -> Sequence[CallRecord]: ...


@runtime_checkable
class Layer(Protocol):
    """A detection layer: look at the run and the call about to happen, return a detection or None.

    Layers hold no mutable state (the run does), so one instance can serve every run and thread.
    Everything else a layer may do is optional and declared by the protocols below
    (``KeepsHistory``, ``MayBeInert``, ``ObservesResults``, ``ObservesCalls``, ``SharesFeatures``,
    ``WatchesStreams``): a layer takes part by having the attribute or method, nothing else.

    Example of a custom layer::

        @dataclass(frozen=True, slots=True)
        class NoDeletes:
            name: ClassVar[str] = "no_deletes"
            history_needed: ClassVar[int] = 0

            def check(self, run: RunView, call: Call) -> Detection | None:
                if call.fn.startswith("delete_") and run.calls_of(call.fn) >= 1:
                    return Detection(layer=self.name, fn=call.fn, message="Delete once only.")
                return None
    """

    name: ClassVar[str]

    def check(self, run: RunView, call: Call) -> Detection | None: ...


@runtime_checkable
class KeepsHistory(Protocol):
    """A layer that looks back: the run keeps at least ``history_needed`` completed calls for it
    (a class attribute or a property computed from the layer's settings)."""

    @property
    def history_needed(self) -> int: ...


@runtime_checkable
class MayBeInert(Protocol):
    """A layer whose settings can leave it nothing to check (no threshold set): when ``inert`` is
    true the guard leaves it out of the stack once, instead of asking it on every call."""

    @property
    def inert(self) -> bool: ...


@runtime_checkable
class ObservesResults(Protocol):
    """A layer that keeps something of each completed call's result: ``observe_result(result,
    error)`` runs once when the call completes, and its return value is kept in that call's
    ``CallRecord.features[layer.name]``."""

    def observe_result(self, result: Any, error: BaseException | None) -> Any: ...


@runtime_checkable
class ObservesCalls(Protocol):
    """As ``ObservesResults``, with the call's bound arguments as well: ``observe_call(arguments,
    result, error)``, kept in ``CallRecord.features[layer.name]``. A layer with both methods is
    observed through ``observe_call`` only."""

    def observe_call(
        self, arguments: Mapping[str, Any], result: Any, error: BaseException | None
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class Feature:
    """Something several layers keep of each completed call, computed once per call however many
    layers of the stack read it, and kept in ``CallRecord.features[key]``.

    Two features are the same when they are equal (same ``key``, same ``extract``); two different
    features under one key are refused when the guard is built. ``extract(arguments, result,
    error)`` receives what ``ObservesCalls.observe_call`` receives.
    """

    key: str
    extract: Callable[..., Any]
    #: Extracted only for calls that failed (raised, or returned a result that reads as an
    #: error); other calls keep nothing under ``key``, at no cost.
    failures_only: bool = False
    #: ``extract`` takes the call's kind as well: ``extract(arguments, result, error, kind)``,
    #: ``kind`` the ``CallRecord.kind`` the value is kept with, or None where it is not known. A
    #: feature read differently by kind can then compute only what that kind's readers read.
    by_kind: bool = False


@runtime_checkable
class SharesFeatures(Protocol):
    """A layer that reads shared features: ``features`` lists them (a class attribute or a
    property), and the layer reads ``record.features[feature.key]``."""

    @property
    def features(self) -> tuple[Feature, ...]: ...


class StreamWatcher(Protocol):
    """Bounded state about one guarded generator's output: ``feed`` takes each chunk as it passes
    and returns a detection when the stream so far is a loop."""

    def feed(self, chunk: Any) -> Detection | None: ...


@runtime_checkable
class WatchesStreams(Protocol):
    """A layer that judges a guarded generator while it streams: ``watch(call)`` returns a fresh
    ``StreamWatcher`` for each streaming call (the layer itself stays stateless)."""

    def watch(self, call: Call) -> StreamWatcher: ...


class LayerSettings:
    """Mixin of class-level facts about a built-in layer's settings.

    ``section`` is the fuze.toml table its keys live in; ``scope`` is ``"run"`` for settings that
    only make sense for a whole run (they cannot be set per function). Every built-in layer is a
    ``KeepsHistory`` and a ``MayBeInert``: it overrides these defaults when its settings say more.
    """

    __slots__ = ()

    name: ClassVar[str]
    section: ClassVar[Section] = "loop_detection"
    scope: ClassVar[Scope] = "function"

    @property
    def history_needed(self) -> int:
        return 0

    @property
    def inert(self) -> bool:
        """True when these settings leave the layer nothing to check, so plans can leave it out."""
        return False

