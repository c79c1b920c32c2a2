"""What a guard resolves once per configuration: its settings, layer stack, ladder and binder."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.settings import Settings
from fuzeguard._private.judging.layer import (
    Feature,
    KeepsHistory,
    Layer,
    MayBeInert,
    ObservesCalls,
    ObservesResults,
    SharesFeatures,
    WatchesStreams,
)
from fuzeguard._private.meaning.argprint import BindAndPrint, PrintBound, compile_binder, compile_printer
from fuzeguard._private.meaning.fingerprint import encode, fingerprint
from fuzeguard._private.meaning.kinds import AUTO, call_kind, infer_kind, may_refine
from fuzeguard._private.meaning.outcome import (
    TEXT_ERROR,
    failure_fingerprint,
    output_failure,
    read_failure,
    skeleton,
)
from fuzeguard._private.meaning.records import Call, Detection
from fuzeguard._private.runs.exceptions import ConfigError

if typing.TYPE_CHECKING:
    from fuzeguard.layers._quiet import Quiet

ResultExtractor = tuple[str, Callable[[Any, BaseException | None], Any], tuple[str, ...]]
# key, extract, the layers that read it, and whether ``extract`` takes the call's kind too
# (``Feature.by_kind``).
CallExtractor = tuple[str, Callable[..., Any], tuple[str, ...], bool]

_EMPTY = inspect.Parameter.empty
_WORDY = re.compile(r"[^\W_]")
# Kinds whose text results are read for an error between their ends as well (``read_failure``):
# what runs or changes something reports its failure wherever its output puts it.
_READ_DEEP = frozenset({"exec", "write", "other"})
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


# Parameters that LangChain / LangGraph fill in themselves and hide from the tool schema: the
# ``Annotated[..., InjectedToolArg]`` family (InjectedToolCallId, InjectedState, InjectedStore) and
# directly injected types such as ``ToolRuntime``. They change on every call (a fresh tool call id,
# the growing message list), so fingerprinting them would hide every repeat. Matched by class name
# in the MRO so that fuzeguard never imports the framework.
_INJECTED_MARKERS = frozenset({"InjectedToolArg", "_DirectlyInjectedToolArg"})


def _is_injected(obj: Any) -> bool:
    cls = obj if isinstance(obj, type) else type(obj)
    return any(base.__name__ in _INJECTED_MARKERS for base in getattr(cls, "__mro__", ()))


def is_context_annotation(annotation: Any) -> bool:
    """True for parameters a framework passes in itself: types named ``*Context`` /
    ``*ContextWrapper`` (Pydantic AI ``RunContext``, OpenAI Agents ``RunContextWrapper`` and
    ``ToolContext``, MCP ``Context``) and LangChain's injected arguments (``Annotated[...,
    InjectedToolCallId]``, ``InjectedState``, ``InjectedStore``, ``ToolRuntime``)."""
    if annotation is _EMPTY or annotation is None:
        return False
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        annotated = text.startswith(("Annotated[", "typing.Annotated[", "typing_extensions.Annotated["))
        for part in text.replace("|", ",").replace("[", ",").replace("]", ",").split(","):
            base = part.rsplit(".", 1)[-1]
            if base.endswith(("Context", "ContextWrapper")) or base == "ToolRuntime":
                return True
            if annotated and base.startswith("Injected"):
                return True
            if part.startswith(("Optional", "Union", "Annotated")) or part.endswith(".Annotated"):
                continue
            if base and not annotated:
                break
        return False
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        return any(_is_injected(m) for m in metadata) or is_context_annotation(inner)
    if origin is typing.Union or (origin is not None and type(annotation).__name__ == "UnionType"):
        return any(is_context_annotation(a) for a in typing.get_args(annotation) if a is not type(None))
    target = origin if origin is not None else annotation
    name = getattr(target, "__name__", "") or ""
    return name.endswith(("Context", "ContextWrapper")) or _is_injected(target)


class Binder:
    """Turns ``(args, kwargs)`` into the named arguments that are fingerprinted.

    ``f(1, b=2)``, ``f(a=1, b=2)`` and ``f(b=2, a=1)`` give the same mapping; defaults are filled
    in; context parameters, ``ignore_args`` and a method's ``self``/``cls`` are left out.
    """

    __slots__ = (
        "defaults", "excluded", "fast", "names", "nparams", "positional", "signature", "simple",
        "unnamed",
    )

    def __init__(self, fn: Callable[..., Any], ignore: tuple[str, ...]) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None
        params = list(self.signature.parameters.values()) if self.signature else []
        excluded = set(ignore)
        for i, p in enumerate(params):
            if is_context_annotation(p.annotation):
                excluded.add(p.name)
            if i == 0 and p.name in ("self", "cls") and not inspect.ismethod(fn):
                excluded.add(p.name)
        self.excluded = frozenset(excluded)
        self.fast = self.signature is not None and all(
            p.kind in _POSITIONAL or p.kind is inspect.Parameter.KEYWORD_ONLY for p in params
        )
        self.positional = tuple(p.name for p in params if p.kind in _POSITIONAL)
        self.defaults = {p.name: p.default for p in params if p.default is not _EMPTY}
        self.nparams = len(params)
        self.names = tuple(p.name for p in params)
        # Where values passed with no parameter name of their own are bound: the ``*args``
        # parameter, or every positional value when the signature cannot be read.
        self.unnamed: str | None = "*args" if self.signature is None else next(
            (p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None
        )
        # Every parameter may be passed by position or by name: a one-pass binder can be made.
        self.simple = self.signature is not None and all(
            p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params
        )

    def parameter_names(self) -> tuple[str, ...] | None:
        """The names arguments are bound to; ``None`` when any name may come (``**kwargs``, or a
        signature that cannot be read)."""
        if self.signature is None:
            return None
        params = self.signature.parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
        return tuple(p.name for p in params)

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if self.fast and len(args) <= len(self.positional):
            bound = dict(zip(self.positional, args, strict=False))
            if kwargs:
                bound.update(kwargs)
            if len(bound) < self.nparams:
                for key, value in self.defaults.items():
                    bound.setdefault(key, value)
        else:
            bound = self._slow(args, kwargs)
        if self.excluded:
            for key in self.excluded:
                bound.pop(key, None)
        return bound

    def _slow(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if self.signature is not None:
            try:
                ba = self.signature.bind(*args, **kwargs)
            except TypeError:
                pass  # the call itself will raise the right TypeError
            else:
                ba.apply_defaults()
                out: dict[str, Any] = {}
                for name, value in ba.arguments.items():
                    kind = self.signature.parameters[name].kind
                    if kind is inspect.Parameter.VAR_KEYWORD:
                        out.update(value)
                    else:
                        out[name] = value
                return out
        return {"*args": args, "**kwargs": dict(kwargs)}


@dataclass(frozen=True, slots=True)
class Plan:
    """A guard's resolved behaviour under one configuration."""

    name: str
    settings: Settings
    layers: tuple[Layer, ...]
    ladder: tuple[Any, ...]
    binder: Binder
    prefix: bytes
    volatile: frozenset[str]
    history_needed: int
    observe: bool
    off: bool
    # What each completed call leaves in ``CallRecord.features``, one entry per key: (key,
    # extractor, the layers that read it, named when it fails). Results only (observe_result)...
    result_features: tuple[ResultExtractor, ...]
    # The layer names asked for (after exemptions), inert ones included: what the stack is, as
    # opposed to what runs on each call.
    requested: tuple[str, ...] = ()
    # ... and with the arguments as well (observe_call, and shared features computed once).
    call_features: tuple[CallExtractor, ...] = ()
    # Layers that watch a guarded generator's chunks as they stream.
    watchers: tuple[WatchesStreams, ...] = ()
    # The function's kind, declared or inferred from its name; ``infer`` when each call's
    # arguments may refine it (kind = "auto").
    kind: str = "other"
    infer: bool = True
    # The guard's own ``on_detect`` hooks (the run's are on the run).
    hooks: tuple[Callable[[Detection], object], ...] = ()
    # Binds and fingerprints the commonest calls in one pass, and fingerprints the arguments
    # of most others once bound (``argprint.py``); None where they cannot be made.
    bind_and_print: BindAndPrint | None = None
    print_bound: PrintBound | None = None
    # What is kept of the calls that failed only (``Feature.failures_only``).
    failure_features: tuple[CallExtractor, ...] = ()
    # The default layers' cheap exits in one look (``layers._quiet``); None when the stack does
    # not hold them.
    quiet: Quiet | None = None
    # Whether a short text or a number result may be judged, and what the layers keep of it
    # extracted, when first read (``completion.LateRecord``): the function's kind is fixed and
    # acknowledging, and the content units are all that is kept.
    defer: bool = False

    def kind_of(self, arguments: Mapping[str, Any]) -> str:
        """What this call does: the declared kind, or the inferred one refined by the arguments."""
        return call_kind(self.kind, arguments) if self.infer else self.kind  # type: ignore[arg-type]

    def judge_result(self, result: Any, call: Call) -> tuple[bytes, str | None, Any]:
        """A completed call's outcome, live or replayed: the fingerprint of its skeleton (volatile
        parts out), ``"ErrorResult"`` if it reads as an error, and the skeleton itself. A text that
        reads as an error is fingerprinted by what failed: its error line, masked
        (``failure_fingerprint``).

        A model's output without a word in it (a divider, a run of symbols) means nothing, so it
        is never the same as another: it gets a fingerprint of its own.
        """
        t = type(result)
        if t is int or t is float or t is bool or result is None:
            # Nothing to take out and nothing that reads as an error: the value is its skeleton.
            return fingerprint(result), None, result
        try:
            value = skeleton(result, self.volatile)
        except RecursionError:
            value = result
        if call.kind == "model" and type(value) is str and not _WORDY.search(value):
            return fingerprint(("wordless", call.index)), None, value
        failure = self.failure(result, call)
        if failure is None:
            return fingerprint(value), None, value
        if failure:
            return failure_fingerprint(None, failure), TEXT_ERROR, value
        return fingerprint(value), TEXT_ERROR, value

    @staticmethod
    def failure(result: Any, call: Call) -> str | None:
        """What a result that did not raise reports as its failure (``read_failure``, read deeply
        for the kinds whose output is a command's or an edit's), or None."""
        return read_failure(result, call.kind in _READ_DEEP)

    @staticmethod
    def judge_error(text: str, output: Any = None) -> bytes:
        """A failed call's outcome fingerprint, from its ``"Name: message"`` text and, when it is
        known (a trace that recorded both), the output it printed (``output_failure``)."""
        return failure_fingerprint(text, output_failure(output) if output is not None else None)

    def features(
        self,
        arguments: Mapping[str, Any],
        result: Any,
        error: BaseException | None,
        on_error: Callable[[str, Exception], object] | None = None,
        failed: bool = False,
        kind: str | None = None,
    ) -> dict[str, Any]:
        """What the layers keep of one completed call (``CallRecord.features``), live or replayed;
        ``failed``: the call failed, and the features kept of failures only are extracted too;
        ``kind``: the call's kind, handed to the features that take it (None: not known).

        An extractor that raises keeps nothing of this call (its key is left out, which layers
        read as "nothing known") and each layer that reads that key is reported to ``on_error``;
        the other extractors keep theirs. A shared ``Feature`` is computed once, whoever reads it.
        """
        out: dict[str, Any] = {}
        for key, extract, readers in self.result_features:
            try:
                out[key] = extract(result, error)
            except Exception as exc:
                if on_error is not None:
                    for name in readers:
                        on_error(name, exc)
        extractors = (
            self.call_features + self.failure_features if failed else self.call_features
        )
        for key, call_extract, readers, by_kind in extractors:
            try:
                out[key] = (
                    call_extract(arguments, result, error, kind) if by_kind
                    else call_extract(arguments, result, error)
                )
            except Exception as exc:
                if on_error is not None:
                    for name in readers:
                        on_error(name, exc)
        return out

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, bytes]:
        """A live call's bound arguments and their fingerprint: in one pass for the commonest
        calls (``bind_and_print``), else bound by the binder and then fingerprinted."""
        fast = self.bind_and_print
        if fast is not None:
            bound = fast(args, kwargs)
            if bound is not None:
                return bound
        arguments = self.binder.arguments(args, kwargs)
        return arguments, self.fingerprint_args(arguments)

    def fingerprint_args(self, arguments: Mapping[str, Any]) -> bytes:
        """The fingerprint of bound arguments, live or replayed."""
        printer = self.print_bound
        if printer is not None and type(arguments) is dict:
            fp = printer(arguments)
            if fp is not None:
                return fp
        return fingerprint(arguments, prefix=self.prefix)


def build_plan(
    fn: Callable[..., Any],
    name: str,
    config: Config,
    options: Mapping[str, Any],
    layer_objects: tuple[Any, ...] | None,
    hooks: tuple[Callable[[Detection], object], ...] = (),
) -> Plan:
    """Resolve a guard's settings (defaults < file < [functions.NAME] < code) into a plan."""
    # Deferred for start-up time: the built-in layers load with the first guard, not with
    # ``import fuzeguard``.
    from fuzeguard.layers import BUILTIN_LAYERS
    from fuzeguard.layers._content import CONTENT
    from fuzeguard.layers._evidence import ACKNOWLEDGING
    from fuzeguard.layers._quiet import quiet_check

    try:
        values = config.settings_for(name, overrides=options)
    except ConfigError as exc:
        raise ConfigError(f"guard({name}): {exc}") from None
    settings = Settings(**{f.name: values[f.name] for f in dataclasses.fields(Settings)})
    exempt = set(settings.exempt_from)
    chosen = layer_objects if layer_objects is not None else settings.layers
    layers: list[Layer] = []
    requested: list[str] = []
    for item in chosen:
        if isinstance(item, str):
            if item in exempt:
                continue
            requested.append(item)
            cls = BUILTIN_LAYERS[item]
            kwargs = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}
            try:
                layer = cls(**kwargs)
            except ValueError as exc:
                raise ConfigError(f"guard({name}): {exc}") from None
            layers.append(layer)
        else:
            if getattr(item, "name", None) in exempt:
                continue
            layers.append(_layer_object(f"guard({name})", item))
            requested.append(str(item.name))
    # The optional hooks are found by their protocols (fuzeguard._private.judging.layer), once per plan:
    # a custom layer opts in by defining the method or attribute, with no base class or
    # registration, and isinstance against a runtime-checkable protocol checks exactly that. A
    # layer whose settings leave it nothing to check (no limit set, no threshold) is left out
    # here rather than asked on every call.
    layers = [
        layer for layer in layers
        if not (takes_part(layer, MayBeInert) and cast(MayBeInert, layer).inert)
    ]
    needed = max(
        (int(cast(KeepsHistory, layer).history_needed) for layer in layers
         if takes_part(layer, KeepsHistory)),
        default=0,
    )
    binder = Binder(fn, settings.ignore_args)
    prefix = encode(name) + b"\x00"
    result_features, call_features, failure_features = _extractors(f"guard({name})", layers)
    kind = infer_kind(name) if settings.kind == AUTO else settings.kind
    infer = settings.kind == AUTO and may_refine(binder.parameter_names())
    return Plan(
        name=name,
        settings=settings,
        layers=tuple(layers),
        ladder=settings.on_loop,
        binder=binder,
        prefix=prefix,
        volatile=frozenset(k.lower() for k in (*settings.volatile_keys, *settings.volatile)),
        history_needed=needed,
        observe=settings.enabled == "observe",
        off=settings.enabled is False,
        result_features=result_features,
        requested=tuple(requested),
        call_features=call_features,
        watchers=tuple(
            cast(WatchesStreams, layer) for layer in layers if takes_part(layer, WatchesStreams)
        ),
        kind=kind,
        infer=infer,
        hooks=hooks,
        bind_and_print=(
            compile_binder(binder.names, binder.excluded, prefix) if binder.simple else None
        ),
        print_bound=(
            compile_printer(tuple(n for n in binder.names if n not in binder.excluded), prefix)
            if binder.fast else None
        ),
        failure_features=failure_features,
        quiet=quiet_check(layers),
        defer=(
            not infer and kind in ACKNOWLEDGING and not result_features and bool(call_features)
            and all(extract is CONTENT.extract for _, extract, _, _ in call_features)
        ),
    )


# What ``isinstance(layer, protocol)`` answered for each built-in layer class: a runtime-checkable
# protocol looks each of its members up on the object, which costs more than the rest of building
# a plan, and a built-in layer's answer depends on its class alone (its members are methods,
# properties, class attributes and dataclass fields, always set).
_BUILTIN_ANSWERS: dict[tuple[type, type], bool] = {}


def takes_part(layer: object, protocol: type) -> bool:
    """``isinstance(layer, protocol)`` for one of the optional layer protocols, remembered per
    class for the built-in layers (asked every time of any other object, whose members may be
    its own)."""
    # Deferred for start-up time: the built-in layers load with the first guard, not with
    # ``import fuzeguard``.
    from fuzeguard.layers import BUILTIN_LAYERS

    cls = type(layer)
    if cls not in BUILTIN_LAYERS.values():
        return isinstance(layer, protocol)
    key = (cls, protocol)
    answer = _BUILTIN_ANSWERS.get(key)
    if answer is None:
        answer = _BUILTIN_ANSWERS[key] = isinstance(layer, protocol)
    return answer


def check_layer_objects(where: str, items: tuple[Any, ...]) -> None:
    """Refuse, when the guard is declared, ``layers=`` objects that are not layers or whose
    features clash with each other's or a built-in layer's (rather than failing open on every
    call). Names are checked by the configuration."""
    # Deferred for start-up time: the built-in layers load with the first guard, not with
    # ``import fuzeguard``.
    from fuzeguard.layers import BUILTIN_LAYERS

    stack: list[Layer] = [
        BUILTIN_LAYERS[item]() if isinstance(item, str) else _layer_object(where, item)
        for item in items
        if not isinstance(item, str) or item in BUILTIN_LAYERS
    ]
    _extractors(where, stack)


def _layer_object(where: str, item: Any) -> Layer:
    if not isinstance(item, Layer) or not callable(item.check):
        raise TypeError(
            f"{where}: layers= items must be layer names or objects with a `name` and a "
            f"check(run, call) method (see fuzeguard.layers.Layer), got {item!r}"
        )
    return item


def _extractors(
    where: str, layers: list[Layer]
) -> tuple[tuple[ResultExtractor, ...], tuple[CallExtractor, ...], tuple[CallExtractor, ...]]:
    """What the layers keep of each completed call, one extractor per ``CallRecord.features``
    key: a layer's own hook under its name, a shared ``Feature`` under its key, computed once
    however many layers read it. Two different extractors under one key are refused: one of the
    layers would silently read the other's values."""
    owners: dict[str, object] = {}  # key -> what fills it: a layer (its own hook) or a Feature
    # key -> (takes the arguments, extractor, the layers that read it)
    entries: dict[str, tuple[bool, Callable[..., Any], tuple[str, ...]]] = {}
    failures_only: set[str] = set()
    by_kind: set[str] = set()  # the keys of features whose extractor takes the call's kind

    def add(key: str, owner: object, with_arguments: bool, extract: Callable[..., Any],
            reader: str) -> None:
        held = owners.setdefault(key, owner)
        if held is not owner and held != owner:
            raise TypeError(
                f"{where}: two layers keep different features under the key {key!r} (the "
                f"second is read by {reader!r}); give each layer, and each Feature, a name of "
                "its own"
            )
        if key not in entries:
            entries[key] = (with_arguments, extract, (reader,))
        elif reader not in entries[key][2]:
            first_with, first, readers = entries[key]
            entries[key] = (first_with, first, (*readers, reader))

    for layer in layers:
        reader = layer.name
        if takes_part(layer, ObservesCalls):
            add(reader, layer, True, cast(ObservesCalls, layer).observe_call, reader)
        elif takes_part(layer, ObservesResults):
            add(reader, layer, False, cast(ObservesResults, layer).observe_result, reader)
        if takes_part(layer, SharesFeatures):
            for feature in cast(SharesFeatures, layer).features:
                if not isinstance(feature, Feature):
                    raise TypeError(
                        f"{where}: layer {reader!r} lists {feature!r} in its features; "
                        "each must be a fuzeguard.layers.Feature(key, extract)"
                    )
                add(feature.key, feature, True, feature.extract, reader)
                if feature.failures_only:
                    failures_only.add(feature.key)
                if feature.by_kind:
                    by_kind.add(feature.key)
    return (
        tuple((key, f, readers) for key, (args, f, readers) in entries.items() if not args),
        tuple(
            (key, f, readers, key in by_kind) for key, (args, f, readers) in entries.items()
            if args and key not in failures_only
        ),
        tuple(
            (key, f, readers, key in by_kind) for key, (args, f, readers) in entries.items()
            if key in failures_only
        ),
    )
