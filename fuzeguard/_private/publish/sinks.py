"""The standard subscribers of a live run: the structured log, ``on_detect`` hooks and
``testing.capture_detections()``, OpenTelemetry, the stop report's timeline and the trace
(``events.py``).

Replay's runs have none of them: a replay never logs detections as live ones, calls hooks, touches
spans or writes a trace; it subscribes its own reporting instead. A live run's timeline listens
to its detections only, for its stop report (``timeline.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.secrets import hide_unnamed, redactor
from fuzeguard._private.meaning.values import encode_value
from fuzeguard._private.publish.events import BudgetWarning, Detected, RunKilled
from fuzeguard._private.publish.hooks import run_hooks
from fuzeguard._private.publish.log import emit
from fuzeguard._private.publish.otel import annotate
from fuzeguard._private.publish.trace import TraceRecorder
from fuzeguard._private.reports.timeline import Timeline
from fuzeguard._private.runs import state

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals


def attach_standard(run: RunInternals) -> None:
    """Subscribe the standard subscribers to a new live run."""
    run.subscribe(report, Detected)
    run.subscribe(span_events, Detected)
    run.subscribe(log_kill, RunKilled)
    run.subscribe(log_budget, BudgetWarning)
    run._timeline = Timeline(run)
    TraceRecorder(run).attach()


def report(event: Detected) -> None:
    """Each detection, in order: its log event (``fuzeguard.loop_detected`` or
    ``fuzeguard.limit_reached``), the run's and the guard's ``on_detect`` hooks, and the lists of
    ``testing.capture_detections()``."""
    run, plan, call = event.run, event.plan, event.call
    observe = plan.observe or state.mode_override == "observe"
    hooks = (*run.hooks, *plan.hooks)
    for detection in event.decision.detections:
        fields: dict[str, Any] = {
            "layer": detection.layer,
            "fn": detection.fn,
            "run_id": run.id,
            "run_name": run.name,
            "call_index": detection.call_index,
            "kind": detection.kind,
            "action": detection.action,
            "observe": observe,
            "count": detection.count,
            "threshold": detection.threshold,
            "similarity": detection.similarity,
            "args_fp": run.public_fp(call.args_fp).hex(),
            "message": detection.message,
        }
        if plan.settings.log_values:
            fields["args"] = _logged_args(call.arguments, plan)
        name = "fuzeguard.limit_reached" if detection.kind == "limit" else "fuzeguard.loop_detected"
        emit("warning", name, **fields)
        if hooks:
            run_hooks(hooks, detection, run.id)
        for sink in state.captures:
            sink.append(detection)


def log_kill(event: RunKilled) -> None:
    d = event.detection
    emit("error", "fuzeguard.run_killed", run_id=event.run.id, run_name=event.run.name, fn=d.fn,
         layer=d.layer, call_index=d.call_index, message=d.message)


def log_budget(event: BudgetWarning) -> None:
    emit("warning", "fuzeguard.budget_warning", run_id=event.run.id, run_name=event.run.name,
         limit=event.limit, fraction=event.fraction, used=event.used, budget=event.budget,
         message=event.message)


def span_events(event: Detected) -> None:
    """The detections as events on the OpenTelemetry span around the call (``otel.py``)."""
    decision = event.decision
    killed = decision.detection if decision.action == "kill" else None
    annotate(decision.detections, killed, event.run.id)


def _logged_args(arguments: Any, plan: Plan) -> str:
    """The arguments as logged with ``log_values = true``: redacted and scrubbed, then cut."""
    shown = hide_unnamed(arguments, plan.binder.unnamed)
    return _short_repr(encode_value(shown, redactor(plan.settings.redact)))


def _short_repr(value: Any, limit: int = 200) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
