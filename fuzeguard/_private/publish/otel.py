"""OpenTelemetry: a detection annotates the span active around the guarded call.

Only when the application uses OpenTelemetry: ``opentelemetry.trace`` is looked up in
``sys.modules`` (an application with spans has imported it), never imported here, so programs
without it pay nothing. The span is usually a GenAI ``execute_tool`` span made by the framework's
instrumentation; each detection adds a span event (``fuzeguard.loop_detected`` or
``fuzeguard.limit_reached``) and sets ``fuzeguard.*`` attributes next to the GenAI ones
(``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``); a kill sets the span's status
to ERROR with the detection's message and ``error.type = "LoopDetected"``, as the semantic
conventions describe a failed operation.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.publish.log import emit


def annotate(detections: Sequence[Detection], killed: Detection | None, run_id: str) -> None:
    """Record ``detections`` (and a kill) on the current span, if one is recording."""
    trace: Any = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return
    try:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        for d in detections:
            span.add_event(
                "fuzeguard.limit_reached" if d.kind == "limit" else "fuzeguard.loop_detected",
                _attributes(d, run_id),
            )
        last = killed or detections[-1]
        span.set_attributes({
            "gen_ai.tool.name": last.fn,
            "fuzeguard.action": last.action,
            "fuzeguard.layer": last.layer,
            "fuzeguard.run_id": run_id,
        })
        if killed is not None:
            span.set_attribute("error.type", "LoopDetected")
            span.set_status(trace.Status(trace.StatusCode.ERROR, killed.message))
    except Exception as exc:  # a broken tracing setup never breaks a guarded call
        emit("error", "fuzeguard.internal_error", phase="otel", error=repr(exc))


def _attributes(d: Detection, run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": d.fn,
        "fuzeguard.layer": d.layer,
        "fuzeguard.kind": d.kind,
        "fuzeguard.action": d.action,
        "fuzeguard.call_index": d.call_index,
        "fuzeguard.run_id": run_id,
        "fuzeguard.message": d.message,
    }
    for key, value in (("count", d.count), ("threshold", d.threshold), ("similarity", d.similarity)):
        if value is not None:
            out[f"fuzeguard.{key}"] = value
    return out
