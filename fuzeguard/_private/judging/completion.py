"""How a call that ran becomes part of its run: one path for live calls and replayed lines.

``complete`` judges the outcome (``Plan.judge_result`` / ``judge_error``), keeps what the layers
need of it (``Plan.features``), builds the ``CallRecord``, books it in the run (or the run's
store) and publishes it (``CallCompleted``). Where nothing reads the judgement on the next call,
the record is a ``LateRecord``, which judges the result when first read.
A live call passes what the function returned or raised; replay passes what the trace recorded,
where a recorded fingerprint or ``failed`` flag stands for a result the trace left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.fastinit import new_record
from fuzeguard._private.meaning.fingerprint import fingerprint
from fuzeguard._private.meaning.outcome import error_text
from fuzeguard._private.meaning.records import Call, CallRecord, Decision
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.events import CallCompleted
from fuzeguard._private.publish.log import emit

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals


class _Unknown:
    """The result of a call whose result is not known (a trace line without one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
_NONE: dict[str, Any] = {}  # the features of a call no layer keeps anything of (never changed)
_LATE_TEXT = 4096  # texts up to this length may be judged when first read (``LateRecord``)


class _Late:
    """What a ``LateRecord``'s result fingerprint holds until it is judged."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "LATE"


_LATE: Any = _Late()


class _Pending:
    """What a ``LateRecord``'s features hold until extracted: the call, its result, and the value
    judged of it (``_LATE`` until judged)."""

    __slots__ = ("call", "plan", "result", "value")

    def __init__(self, plan: Plan, call: Call, result: Any) -> None:
        self.plan = plan
        self.call = call
        self.result = result
        self.value: Any = _LATE


_RESULT_FP = CallRecord.__dict__["result_fp"]
_FEATURES = CallRecord.__dict__["features"]
_SLOTS = tuple(CallRecord.__dict__[name] for name in CallRecord.__slots__)


class LateRecord(CallRecord):
    """A completed call's record whose result fingerprint and kept features (``Plan.features``)
    are computed from its result when first read, each as ``complete`` computes it.

    ``complete`` makes one where nothing reads them on the next call: a short text or a number
    answered by work of an acknowledging kind (``Plan.defer``) in a streak of calls of one
    function, that did not fail, whose next call the layers settle without reading it
    (``progress`` sees acknowledged work, ``cycle`` a streak of new arguments). Whether the call
    failed is read at once (a text that reads as an error is never late). The result is
    immutable (a string or a number), so the value judged later is the value the call
    returned; the built-in content extractor never raises, so there is nothing to report,
    whichever thread reads first and whatever lock it holds. Threads reading at once each get
    the same values. It equals the ``CallRecord`` that ``complete`` would have built, and a copy
    or a pickle of it is one.

    It has a ``CallRecord``'s slots and no other: until judged, ``result_fp`` holds ``_LATE``,
    and until extracted, ``features`` holds the ``_Pending`` call (the fingerprint is always
    judged first, from the call it holds).
    """

    __slots__ = ()

    @property
    def result_fp(self) -> bytes | None:
        fp = _RESULT_FP.__get__(self, CallRecord)
        if fp is _LATE:
            fp = self._judge()
        return fp  # type: ignore[no-any-return]

    @result_fp.setter
    def result_fp(self, value: bytes | None) -> None:
        # Reached only by ``object.__setattr__``, as ``__init__`` sets a field: a record built
        # from values (``dataclasses.replace``), never late. Assignment stays refused (frozen).
        _RESULT_FP.__set__(self, value)

    @property
    def features(self) -> Mapping[str, Any]:
        features = _FEATURES.__get__(self, CallRecord)
        if type(features) is _Pending:
            features = self._extract(features)
        return features  # type: ignore[no-any-return]

    @features.setter
    def features(self, value: Mapping[str, Any]) -> None:
        _FEATURES.__set__(self, value)

    @property
    def in_flight(self) -> bool:
        return False  # a completed call, judged or not

    def _judge(self) -> bytes | None:
        pending = _FEATURES.__get__(self, CallRecord)
        if type(pending) is not _Pending:  # extracted meanwhile, in another thread: judged first
            return _RESULT_FP.__get__(self, CallRecord)  # type: ignore[no-any-return]
        fp, _, value = judged(pending.plan, pending.call, pending.result)
        # The fingerprint first: a thread that finds the value judged extracts the features and
        # lets the pending call go, after which the fingerprint must be there to be read.
        _RESULT_FP.__set__(self, fp)
        pending.value = value
        return fp

    def _extract(self, pending: _Pending) -> Mapping[str, Any]:
        if pending.value is _LATE:
            self._judge()  # the features are extracted from the judged value
        plan = pending.plan
        # Late for calls of the plan's own kind only (``complete``).
        features: Mapping[str, Any] = plan.features(pending.call.arguments, pending.value, None,
                                                    kind=plan.kind)
        _FEATURES.__set__(self, features)  # the call is let go
        return features

    def _fields(self) -> tuple[Any, ...]:
        return (self.fn, self.index, self.args_fp, self.result_fp, self.error, self.cost,
                self.start, self.duration, self.features, self.kind)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CallRecord):
            return self._fields() == LateRecord._fields(other)  # type: ignore[arg-type]
        return NotImplemented

    __hash__ = CallRecord.__hash__

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return CallRecord, self._fields()


_set = object.__setattr__  # past the frozen record's own, which refuses


def _late_by_class(
    plan: Plan, call: Call, result: Any, cost: float | None, start: float,
    duration: float | None,
) -> LateRecord:
    record: Any = new_record(call.fn, call.index, call.args_fp, _LATE, None, cost, start,
                             duration, _Pending(plan, call, result), call.kind)
    _set(record, "__class__", LateRecord)  # the same slots: CPython allows it
    return record  # type: ignore[no-any-return]


def _late_by_slots(
    plan: Plan, call: Call, result: Any, cost: float | None, start: float,
    duration: float | None,
) -> LateRecord:
    record = object.__new__(LateRecord)
    for slot, value in zip(_SLOTS, (call.fn, call.index, call.args_fp, _LATE, None, cost, start,
                                    duration, _Pending(plan, call, result), call.kind),
                           strict=True):
        slot.__set__(record, value)
    return record


def _class_changes() -> bool:
    """Whether a ``CallRecord`` can become a ``LateRecord`` here (an interpreter that refuses
    the ``__class__`` assignment raises): else each slot is set through its descriptor."""
    try:
        _late_by_class(None, Call("f", 1, b""), 1, None, 0.0, None)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


#: The record of ``call``, which returned ``result`` without failing, judged when first read:
#: ``late_record(plan, call, result, cost, start, duration)``.
late_record = _late_by_class if _class_changes() else _late_by_slots


def judged(plan: Plan, call: Call, result: Any) -> tuple[bytes | None, str | None, Any]:
    """``Plan.judge_result`` of a result that did not raise: its fingerprint, ``"ErrorResult"``
    if it reads as an error, and the value kept of it; ``None``, ``None`` and the result itself
    when the judge did not expect the value (its outcome is unknown)."""
    t = type(result)
    try:
        if t is int or t is float or t is bool or result is None:
            return fingerprint(result), None, result  # judge_result's first case, inlined
        return plan.judge_result(result, call)
    except Exception as exc:
        emit("error", "fuzeguard.internal_error", fn=call.fn, phase="fingerprint",
             error=exception_text(exc))
        return None, None, result


def judged_late(plan: Plan, call: Call, result: Any, streak: bool) -> bool:
    """Whether ``complete`` leaves ``result``, which ``call`` returned without raising, to be
    judged when first read (``LateRecord``): a short text that does not read as an error, or a
    number, answered by a function of a fixed acknowledging kind (``Plan.defer``) in a
    ``streak`` of its calls."""
    t = type(result)
    return (
        plan.defer and streak and call.kind == plan.kind
        and (t is int or t is float
             or (t is str and len(result) <= _LATE_TEXT and plan.failure(result, call) is None))
    )


def _in_a_streak(run: RunInternals, call: Call) -> bool:
    """Whether the run's latest call was of the same function (read without the lock: a guess
    of what the next call will read, never a judgement)."""
    history = run._history
    return bool(history) and history[-1].fn == call.fn


def complete(
    run: RunInternals,
    plan: Plan,
    call: Call,
    decision: Decision,
    start: float,
    duration: float | None,
    cost: float | None,
    result: Any = UNKNOWN,
    error: BaseException | None = None,
    stream: bool = False,
    *,
    error_message: str | None = None,
    result_fp: bytes | None = None,
    failed: str | None = None,
) -> CallRecord:
    """Record a call that ran: it returned ``result`` or raised ``error`` (replay may pass both:
    a trace that recorded the output of a call that failed; what failed is read from it).

    ``error_message`` is the ``"Name: message"`` text of the error when it is known better than
    the exception object tells (a trace's recorded text). ``result_fp`` and ``failed`` are what
    a trace recorded: they win over what the result, if known, gives.
    """
    value: Any = None
    record: CallRecord | None = None
    if error is not None:
        output = None if result is UNKNOWN else result
        if result_fp is None:
            result_fp = plan.judge_error(error_message or error_text(error), output)
        failed = type(error).__name__
        result = None
        value = output  # what the failed call printed, when a trace recorded it
    elif result is not UNKNOWN:
        if (
            plan.defer and result_fp is None and failed is None
            and judged_late(plan, call, result, _in_a_streak(run, call))
        ):
            record = late_record(plan, call, result, cost or None, start, duration)
        else:
            fp, read_failed, value = judged(plan, call, result)
            if result_fp is None:
                result_fp = fp
            failed = failed or read_failed
    else:
        result = None
    if record is None:
        if plan.result_features or plan.call_features or (failed and plan.failure_features):
            features: Mapping[str, Any] = plan.features(
                call.arguments, value, error, run._feature_failed, failed is not None, call.kind)
        else:
            features = _NONE
        record = new_record(call.fn, call.index, call.args_fp, result_fp, failed, cost or None,
                            start, duration, features, call.kind)
    # Booked in the run (or its store), then published.
    if run._store is not None:
        run._store.complete(run, record, plan, call)
    else:
        with run._lock:
            run._book(record)
    if CallCompleted in run._subs or run._outbox:
        run._deliver(CallCompleted(run, plan, call, decision, record, result, error, stream))
    return record
