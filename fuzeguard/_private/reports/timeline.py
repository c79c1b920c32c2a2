"""The calls of a run as a stop report shows them: one ``Mark`` per call, collected from the run's
events (``events.py``).

A ``Timeline`` subscribes to a run in one of two ways. ``full``: every call event, so each call
has its mark with its arguments' preview (replay's runs, for ``fuze report``). Light (live runs,
the default): only the rarely published ``Detected`` event, so a guarded call pays nothing for it;
the run's history then gives the other calls (``marks_of``), and the arguments are previewed
for the calls a layer fired on.

Argument previews are redacted as traces are (``secrets.py``): values under secret-named keys
become ``"[redacted]"``, secret-shaped text and the redacted values wherever else they appear are
scrubbed, and the preview is cut short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.records import CallRecord, Detection
from fuzeguard._private.meaning.secrets import redactor
from fuzeguard._private.meaning.values import Encoder, scrub_tree
from fuzeguard._private.publish.events import (
    CallCompleted,
    CallInterrupted,
    CallRefused,
    Detected,
    RunKilled,
)
from fuzeguard._private.runs.forksafe import new_lock

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import Publisher

PREVIEW_CHARS = 80
# Marks a full timeline keeps (the oldest are dropped first) and previews a light one keeps.
MAX_MARKS = 5000
MAX_PREVIEWS = 256


@dataclass(frozen=True, slots=True)
class Mark:
    """One call of a run: what it was, when, and what the guard did with it.

    ``action`` is ``"call"``, ``"warn"``, ``"skip"``, ``"kill"``, ``"observe"`` (a detection let
    through in observe mode) or ``"interrupted"``; ``start`` is in run seconds; ``args`` the
    redacted preview of its arguments, None where it is not known; ``result_fp`` None for an
    unknown outcome. ``detections`` are those made on this call.
    """

    index: int
    fn: str
    start: float
    action: str
    args_fp: bytes
    result_fp: bytes | None = None
    error: str | None = None
    cost: float | None = None
    duration: float | None = None
    args: str | None = None
    kind: str = "other"
    detections: tuple[Detection, ...] = field(default=())


def preview(arguments: Any, plan: Plan, limit: int = PREVIEW_CHARS) -> str:
    """``name='value', ...``: the arguments redacted and scrubbed as a trace writes them, cut to
    ``limit`` characters."""
    red = redactor(plan.settings.redact)
    try:
        values = red.secret_values(arguments)
        encoded = scrub_tree(Encoder(red).top(arguments), values)
    except Exception:
        return "…"
    if isinstance(encoded, dict):
        text = ", ".join(f"{k}={_short(v)}" for k, v in encoded.items())
    else:
        text = _short(encoded)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


class Timeline:
    """Collects a run's marks (``full``) or the previews of the calls detections were made on."""

    def __init__(self, run: Publisher, *, full: bool = False) -> None:
        self.full = full
        self._lock = new_lock()
        self._marks: dict[int, Mark] = {}
        # Light mode: the call index -> (preview, start, args_fp) of calls a layer fired on.
        self._seen: dict[int, tuple[str, float, bytes]] = {}
        self._found: dict[int, tuple[Detection, ...]] = {}
        self.killed: Detection | None = None
        # The plan of each function a layer fired on: the settings the report's advice starts from.
        self.plans: dict[str, Plan] = {}
        if full:
            run.subscribe(self._event, CallCompleted, CallRefused, CallInterrupted, Detected,
                          RunKilled)
        else:
            run.subscribe(self._event, Detected, RunKilled)

    def _event(self, event: Any) -> None:
        kind = type(event)
        if kind is RunKilled:
            self.killed = event.detection
            return
        if kind is Detected:
            with self._lock:
                self.plans[event.call.fn] = event.plan
                index = event.call.index
                self._found[index] = (*self._found.get(index, ()), *event.decision.detections)
                if not self.full:
                    self._seen[index] = (preview(event.call.arguments, event.plan),
                                         event.run.elapsed(), event.call.args_fp)
                    _bound(self._seen, MAX_PREVIEWS)
                    _bound(self._found, MAX_PREVIEWS)
            return
        call, decision = event.call, event.decision
        action = decision.action
        if kind is CallCompleted:
            record = event.record
            mark = Mark(call.index, call.fn, record.start, _shown(action, decision), call.args_fp,
                        record.result_fp, record.error, record.cost, record.duration,
                        preview(call.arguments, event.plan), call.kind)
        elif kind is CallInterrupted:
            mark = Mark(call.index, call.fn, event.start, "interrupted", call.args_fp,
                        args=preview(call.arguments, event.plan), kind=call.kind)
        else:
            if not decision.detections:
                return  # refused because the run was already dead: no call of its own
            mark = Mark(call.index, call.fn, event.run.elapsed(), action, call.args_fp,
                        args=preview(call.arguments, event.plan), kind=call.kind)
        with self._lock:
            found = self._found.pop(call.index, ())
            if found:
                mark = _with(mark, found)
            self._marks[call.index] = mark
            _bound(self._marks, MAX_MARKS)

    def marks(self) -> list[Mark]:
        """The marks collected (full mode), oldest first."""
        with self._lock:
            return sorted(self._marks.values(), key=lambda m: m.index)

    def marks_of(self, history: list[CallRecord], kept: tuple[Detection, ...]) -> list[Mark]:
        """Light mode: the marks of a live run's history, its kept detections and the kill."""
        with self._lock:
            seen = dict(self._seen)
        # Equal fingerprints, equal arguments: one preview serves every call that made them.
        by_fp = {fp: text for text, _, fp in seen.values()}
        found: dict[int, list[Detection]] = {}
        for d in kept:
            found.setdefault(d.call_index, []).append(d)
        marks: dict[int, Mark] = {}
        for record in history:
            if record.in_flight:
                continue
            ds = tuple(found.get(record.index, ()))
            action = _action_of(ds)
            if action == "skip":  # a skipped call's record stands for the outcome the model had
                mark = Mark(record.index, record.fn, record.start, "skip", record.args_fp,
                            record.result_fp, kind=record.kind)
            else:
                mark = Mark(record.index, record.fn, record.start, action, record.args_fp,
                            record.result_fp, record.error, record.cost, record.duration,
                            kind=record.kind)
            marks[record.index] = _with(mark, ds, by_fp.get(record.args_fp))
        killed = self.killed
        if killed is not None and killed.call_index not in marks:
            start = max((m.start for m in marks.values()), default=0.0)
            known = seen.get(killed.call_index)
            fp = known[2] if known is not None else b""
            mark = Mark(killed.call_index, killed.fn, known[1] if known else start, "kill", fp)
            marks[killed.call_index] = _with(mark, tuple(found.get(killed.call_index, ())) or
                                             (killed,), by_fp.get(fp))
        return [marks[i] for i in sorted(marks)]


def _action_of(detections: tuple[Detection, ...]) -> str:
    actions = {d.action for d in detections}
    for action in ("kill", "skip", "warn", "observe"):
        if action in actions:
            return action
    return "call"


def _shown(action: str, decision: Any) -> str:
    if action == "call" and decision.detections:
        return "observe"
    return action


def _with(mark: Mark, detections: tuple[Detection, ...], args: str | None = None) -> Mark:
    changes: dict[str, Any] = {}
    if detections:
        changes["detections"] = detections
    if args is not None and mark.args is None:
        changes["args"] = args
    return replace(mark, **changes) if changes else mark


def _bound(d: dict[Any, Any], limit: int) -> None:
    while len(d) > limit:
        del d[next(iter(d))]


def outcomes(marks: Sequence[Mark]) -> dict[int, str]:
    """Each call's outcome as the report shows it, linked to the first call it repeats."""
    first_of: dict[tuple[bytes, bytes | None], int] = {}
    by_result: dict[bytes, int] = {}
    labels: dict[bytes, str] = {}
    shown: dict[int, str] = {}
    for mark in marks:
        shown[mark.index] = _outcome(mark, first_of, by_result, labels)
        if mark.result_fp is not None and mark.action not in ("skip", "kill"):
            first_of.setdefault((mark.args_fp, mark.result_fp), mark.index)
            by_result.setdefault(mark.result_fp, mark.index)
    return shown


def _outcome(mark: Mark, first_of: dict[tuple[bytes, bytes | None], int],
             by_result: dict[bytes, int], labels: dict[bytes, str]) -> str:
    """What a call came to, linked to the earlier call it repeats."""
    if mark.action == "kill":
        return "not run: the run stopped here"
    if mark.action == "skip":
        return "not run: answered by the guard"
    if mark.action == "interrupted":
        return "interrupted"
    fp = mark.result_fp
    same = first_of.get((mark.args_fp, fp))
    if fp is not None and same is not None and same != mark.index:
        return f"same as call {same}"
    if fp is None:
        text = "outcome unknown"
    elif mark.error is not None:
        text = f"error {mark.error}"
    else:
        if fp not in labels:
            labels[fp] = _letter(len(labels))
        text = f"result {labels[fp]}"
    other = by_result.get(fp) if fp is not None else None
    if other is not None and other != mark.index:
        return f"same result as call {other}"
    return text


def _letter(n: int) -> str:
    text = ""
    n += 1
    while n:
        n, rem = divmod(n - 1, 26)
        text = chr(65 + rem) + text
    return text
