"""How a call that ran becomes part of its run: one path for live calls and replayed lines.

``complete`` judges the outcome (``Plan.judge_result`` / ``judge_error``), keeps what the layers
need of it (``Plan.features``), builds the ``CallRecord``, books it in the run (or the run's
store) and publishes it (``CallCompleted``).
A live call passes what the function returned or raised; replay passes what the trace recorded,
where a recorded fingerprint or ``failed`` flag stands for a result the trace left out.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from fuzeguard._private.events import CallCompleted
from fuzeguard._private.fastinit import new_record
from fuzeguard._private.fingerprint import fingerprint
from fuzeguard._private.log import emit
from fuzeguard._private.outcome import error_text
from fuzeguard._private.records import Call, CallRecord, Decision
from fuzeguard._private.secrets import exception_text

if TYPE_CHECKING:
    from fuzeguard._private.plan import Plan
    from fuzeguard._private.run import Run


class _Unknown:
    """The result of a call whose result is not known (a trace line without one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
_NONE: dict[str, Any] = {}  # the features of a call no layer keeps anything of (never changed)
_DEFERRED_TEXT = 4096  # texts up to this length have their features extracted when first read
_NUMBERS = (int, float)  # number results, whose features are extracted when first read as well


class Deferred(Mapping[str, Any]):
    """What the layers keep of a call (``Plan.features``), extracted when first read.

    ``complete`` defers it where nothing reads it on the next call: a short text or a number
    answered by work of an acknowledging kind (``Plan.defer``) in a streak of calls of one
    function, whose next call the layers settle without reading it (``progress`` sees
    acknowledged work, ``cycle`` a streak of new arguments). The extraction is the one
    ``complete`` would have made, on the same value, and reads nothing that can change: the
    kept content's plain units come from the value alone (the units with the arguments' words
    masked are read for informing kinds only, which these calls are not). The built-in content
    extractor never raises, so there is no failure to report, whichever thread reads it first
    and whatever lock it holds.
    """

    __slots__ = ("_arguments", "_got", "_plan", "_value")

    def __init__(self, plan: Plan, arguments: Mapping[str, Any], value: str | float) -> None:
        self._plan: Plan | None = plan
        self._arguments: Mapping[str, Any] | None = arguments
        self._value = value
        self._got: dict[str, Any] | None = None

    def _settled(self) -> dict[str, Any]:
        got = self._got
        if got is None:
            plan, arguments = self._plan, self._arguments
            if plan is None or arguments is None:
                got = self._got  # extracted meanwhile in another thread, which set it first
                assert got is not None
                return got
            # Deferred for calls of the plan's own kind only (``complete``).
            got = self._got = plan.features(arguments, self._value, None, kind=plan.kind)
            self._plan = self._arguments = None  # nothing more to extract
        return got

    def __getitem__(self, key: str) -> Any:
        return self._settled()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._settled().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._settled()

    def __iter__(self) -> Iterator[str]:
        return iter(self._settled())

    def __len__(self) -> int:
        return len(self._settled())

    def __repr__(self) -> str:
        return repr(self._settled())


def _in_a_streak(run: Run, call: Call) -> bool:
    """Whether the run's latest call was of the same function (read without the lock: a guess
    of what the next call will read, never a judgement)."""
    history = run._history
    return bool(history) and history[-1].fn == call.fn


def complete(
    run: Run,
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
    if error is not None:
        output = None if result is UNKNOWN else result
        if result_fp is None:
            result_fp = plan.judge_error(error_message or error_text(error), output)
        failed = type(error).__name__
        result = None
        value = output  # what the failed call printed, when a trace recorded it
    elif result is not UNKNOWN:
        t = type(result)
        try:
            if t is int or t is float or t is bool or result is None:
                fp, read_failed, value = fingerprint(result), None, result  # judge_result's first
            else:
                fp, read_failed, value = plan.judge_result(result, call)
        except Exception as exc:  # a value the judge did not expect: its outcome is unknown
            emit("error", "fuzeguard.internal_error", fn=call.fn, phase="fingerprint",
                 error=exception_text(exc))
            fp, read_failed, value = None, None, result
        if result_fp is None:
            result_fp = fp
        failed = failed or read_failed
    else:
        result = None
    if (
        plan.defer and failed is None
        and ((type(value) is str and len(value) <= _DEFERRED_TEXT) or type(value) in _NUMBERS)
        and call.kind == plan.kind and _in_a_streak(run, call)
    ):
        features: Mapping[str, Any] = Deferred(plan, call.arguments, value)
    elif plan.result_features or plan.call_features or (failed and plan.failure_features):
        features = plan.features(call.arguments, value, error, run._feature_failed,
                                 failed is not None, call.kind)
    else:
        features = _NONE
    record: CallRecord = new_record(
        call.fn, call.index, call.args_fp, result_fp, failed, cost or None, start, duration,
        features, call.kind,
    )
    # Booked in the run (or its store), then published.
    if run._store is not None:
        run._store.complete(run, record)
    else:
        with run._lock:
            run._book(record)
    if CallCompleted in run._subs or run._outbox:
        run._deliver(CallCompleted(run, plan, call, decision, record, result, error, stream))
    return record
