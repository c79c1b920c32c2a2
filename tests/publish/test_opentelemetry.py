"""OpenTelemetry: a detection annotates the active span (GenAI ``execute_tool`` conventions);
checked with the SDK's in-memory exporter."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected, guard


@pytest.fixture
def spans() -> Iterator[tuple[object, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def _calls(tracer: object, tool: object, n: int) -> None:
    """``n`` calls of ``tool``, each in an ``execute_tool`` span as instrumentation makes them."""
    with capture_logs(), fuzeguard.run("task"):
        for _ in range(n):
            with tracer.start_as_current_span(  # type: ignore[attr-defined]
                "execute_tool search",
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
            ):
                try:
                    tool("laptops")  # type: ignore[operator]
                except LoopDetected:
                    pass


def _search(query: str) -> str:
    return f"3 results for {query}"


def _finished(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    return tuple(exporter.get_finished_spans())


def test_a_detection_adds_a_span_event_with_the_detection(spans: tuple[object, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    _calls(tracer, guard(_search, on_loop="skip"), 5)
    fifth = _finished(exporter)[4]  # warned at the 3rd and 4th, skipped at the 5th
    event = fifth.events[-1]
    assert event.name == "fuzeguard.loop_detected"
    attributes = dict(event.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "_search"
    assert (attributes["fuzeguard.layer"], attributes["fuzeguard.action"]) == ("dedup", "skip")
    assert (attributes["fuzeguard.count"], attributes["fuzeguard.threshold"]) == (5, 2)
    assert fifth.attributes is not None and fifth.attributes["fuzeguard.action"] == "skip"
    assert fifth.status.status_code is StatusCode.UNSET


def test_quiet_calls_leave_their_spans_untouched(spans: tuple[object, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    _calls(tracer, guard(_search, on_loop="skip"), 2)
    assert all(not span.events for span in _finished(exporter))


def test_a_kill_sets_the_span_status_to_error_with_the_message(
    spans: tuple[object, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    _calls(tracer, guard(_search), 5)
    killed = _finished(exporter)[4]
    assert killed.status.status_code is StatusCode.ERROR
    assert killed.status.description is not None
    assert killed.status.description.startswith("You called `_search` with the same arguments 5 times")
    assert killed.attributes is not None and killed.attributes["error.type"] == "LoopDetected"


def test_an_early_warning_is_an_event_without_an_error(spans: tuple[object, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    _calls(tracer, guard(_search, repeat_threshold=3, repeat_warn_threshold=3), 3)
    third = _finished(exporter)[2]
    assert [e.name for e in third.events] == ["fuzeguard.loop_detected"]
    assert dict(third.events[0].attributes or {})["fuzeguard.kind"] == "warning"
    assert third.status.status_code is StatusCode.UNSET


def test_without_opentelemetry_imported_nothing_is_imported() -> None:
    code = (
        "import sys, fuzeguard\n"
        "s = fuzeguard.guard(lambda q: q, on_loop='skip')\n"
        "with fuzeguard.run():\n"
        "    [s('x') for _ in range(4)]\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules), 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
