"""Run events: what a run publishes, in what order, and what subscribers may do."""

from __future__ import annotations

import ast
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard._private.reports.replay import replay
from fuzeguard.events import (
    CallCompleted,
    CallInterrupted,
    CallRefused,
    CallStarted,
    CostAdded,
    Detected,
    RunClosed,
    RunKilled,
    RunReset,
    TurnEnded,
)
from fuzeguard.testing import capture_detections

PACKAGE = Path(__file__).resolve().parents[2] / "fuzeguard"


def echo(x: object) -> object:
    return x


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_a_call_that_goes_ahead_is_started_then_completed_with_its_record_and_result() -> None:
    tool = guard(echo)
    seen: list[Any] = []
    with fuzeguard.run() as run:
        run.subscribe(seen.append, CallStarted, CallCompleted)
        assert tool("a") == "a"
    started, completed = seen
    assert isinstance(started, CallStarted) and isinstance(completed, CallCompleted)
    assert started.call is completed.call and started.decision.action == "call"
    assert completed.result == "a" and completed.error is None and not completed.stream
    assert completed.record.index == 1 and completed.record in run.history


def test_a_failed_call_is_completed_with_its_error() -> None:
    @guard
    def broken() -> None:
        raise ValueError("no")

    seen: list[CallCompleted] = []
    with fuzeguard.run() as run:
        run.subscribe(seen.append, CallCompleted)
        with pytest.raises(ValueError):
            broken()
    assert isinstance(seen[0].error, ValueError) and seen[0].record.error == "ValueError"


def test_a_kill_publishes_the_detection_then_the_kill_then_the_refused_call() -> None:
    tool = guard(echo)
    seen: list[Any] = []
    with fuzeguard.run() as run:
        run.subscribe(seen.append, Detected, RunKilled, CallRefused)
        with pytest.raises(LoopDetected) as info:
            for _ in range(10):
                tool("same")
    # Warned at the 3rd and 4th identical call (they go ahead), killed at the 5th.
    assert kinds(seen) == ["Detected", "Detected", "Detected", "RunKilled", "CallRefused"]
    assert [e.decision.action for e in seen[:3]] == ["warn", "warn", "kill"]
    assert seen[3].detection == info.value.detection and seen[2].call is seen[4].call
    assert seen[4].decision.action == "kill" and seen[4].call.index == 5


def test_a_skip_publishes_a_refused_call() -> None:
    tool = guard(echo, on_loop="skip")
    refused: list[CallRefused] = []
    with fuzeguard.run() as run:
        run.subscribe(refused.append, CallRefused)
        for _ in range(5):
            tool("same")
    assert [e.decision.action for e in refused] == ["skip"]  # the 5th; the 3rd and 4th warned


def test_turns_resets_and_cost_outside_calls_are_published_with_their_values() -> None:
    seen: list[Any] = []
    with fuzeguard.run(max_resets=2) as run:
        run.subscribe(seen.append, TurnEnded, RunReset, CostAdded)
        run.end_turn()
        fuzeguard.add_cost(0.5)
        run.reset()
    assert seen == [TurnEnded(run, 2), CostAdded(run, 0.5), RunReset(run, 1)]


def test_cost_added_inside_a_call_is_the_call_s_not_an_event() -> None:
    @guard
    def spend() -> None:
        fuzeguard.add_cost(2.0)

    seen: list[Any] = []
    with fuzeguard.run() as run:
        run.subscribe(seen.append, CostAdded, CallCompleted)
        spend()
    assert kinds(seen) == ["CallCompleted"] and seen[0].record.cost == 2.0


def test_a_subagent_s_spending_reaches_the_parent_s_subscribers() -> None:
    tool = guard(echo, cost=0.25)
    seen: list[CostAdded] = []
    with fuzeguard.run("parent") as parent:
        parent.subscribe(seen.append, CostAdded)
        with fuzeguard.run("child", parent=parent):
            tool("a")
        assert seen == []  # delivered with the parent's next event
        parent.end_turn()
    assert seen == [CostAdded(parent, 0.25)]


def test_a_generator_closed_early_is_interrupted_with_its_chunks() -> None:
    @guard
    def numbers() -> Iterator[int]:
        yield from itertools.count()

    seen: list[CallInterrupted] = []
    with fuzeguard.run() as run:
        run.subscribe(seen.append, CallInterrupted)
        stream = numbers()
        next(stream), next(stream)
        stream.close()
    assert len(seen) == 1 and seen[0].chunks == [0, 1]


def test_a_detection_made_mid_stream_is_published() -> None:
    def chant() -> Iterator[str]:
        yield "Let me look at the failing test and explain what goes wrong in the parser. "
        while True:
            yield "I will now check the file again to be sure. "

    stream_llm = guard(chant, layers=["semantic"], name="stream_llm")
    seen: list[Any] = []
    with fuzeguard.run() as run:
        run.subscribe(seen.append, Detected, RunKilled)
        with pytest.raises(LoopDetected):
            for _ in stream_llm():
                pass
    assert kinds(seen)[-2:] == ["Detected", "RunKilled"]
    assert seen[-2].decision.detections[0].layer == "semantic"


def test_closing_the_run_is_published_once_per_last_exit() -> None:
    closed: list[RunClosed] = []
    run = fuzeguard.run()
    run.subscribe(closed.append, RunClosed)
    with run:
        with run:
            pass
        assert closed == []
    assert closed == [RunClosed(run)]


def test_a_subscriber_may_read_the_run_while_it_is_delivered_to() -> None:
    """Events are delivered outside the run's lock: reading the run from a subscriber never
    deadlocks (run in a thread so that a deadlock fails the test instead of hanging it)."""
    tool = guard(echo)
    calls: list[int] = []

    def work() -> None:
        with fuzeguard.run() as run:
            run.subscribe(lambda event: calls.append(run.stats().calls),
                          CallStarted, CallCompleted, Detected)
            tool("a")
            tool("b")

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "a subscriber reading the run deadlocked"
    assert calls == [1, 1, 2, 2]


def test_a_subscriber_that_raises_is_logged_and_the_call_goes_on() -> None:
    tool = guard(echo)

    def broken(event: object) -> None:
        raise RuntimeError("metrics backend down")

    with capture_logs() as logs, fuzeguard.run() as run:
        run.subscribe(broken, CallCompleted)
        assert tool("a") == "a"
        assert run.stats().calls == 1
    failed = [e for e in logs if e["event"] == "fuzeguard.subscriber_failed"]
    assert len(failed) == 1 and failed[0]["event_type"] == "CallCompleted"
    assert "metrics backend down" in failed[0]["error"]


def test_unsubscribing_stops_deliveries() -> None:
    tool = guard(echo)
    seen: list[Any] = []
    with fuzeguard.run() as run:
        unsubscribe = run.subscribe(seen.append, CallCompleted)
        tool("a")
        unsubscribe()
        tool("b")
    assert [e.result for e in seen] == ["a"]


def test_subscribing_to_something_that_is_not_an_event_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"fuzeguard\.events"):
        fuzeguard.run().subscribe(print, dict)


def test_a_replay_publishes_nothing_to_the_standard_subscribers(tmp_path: Path) -> None:
    """A replay's detections are reported by the replay, never logged as live ones nor handed
    to capture_detections() or hooks."""
    tool = guard(echo)
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        with pytest.raises(LoopDetected):
            for _ in range(10):
                tool("same")
    with capture_logs() as logs, capture_detections() as found:
        [summary] = replay([str(trace)], fuzeguard.Config())
    assert summary.detected == 3 and summary.kills  # warned twice, then killed
    assert logs == [] and found == []


def _runtime_imports(module: Path) -> set[str]:
    """The fuzeguard modules ``module`` imports when it is loaded (not under TYPE_CHECKING)."""
    tree = ast.parse(module.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for item in ast.walk(node):
            if isinstance(item, ast.ImportFrom) and item.module:
                found.add(item.module)
                found.update(f"{item.module}.{alias.name}" for alias in item.names)
            elif isinstance(item, ast.Import):
                found.update(alias.name for alias in item.names)
    return {name for name in found if name.startswith("fuzeguard._private")}


def test_private_modules_import_each_other_without_cycles() -> None:
    modules = {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"):
        path
        for path in (PACKAGE / "_private").rglob("*.py")
    }
    graph = {name: _runtime_imports(path) & modules.keys() - {name}
             for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            cycle = " -> ".join((*path[path.index(name):], name))
            raise AssertionError(f"import cycle: {cycle}")
        if name in done:
            return
        for dependency in graph[name]:
            visit(dependency, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_the_run_never_imports_the_trace_recorder() -> None:
    """The run publishes; the recorder subscribes (``sinks.py``): run.py names no trace code."""
    source = (PACKAGE / "_private" / "runs" / "run.py").read_text()
    assert "publish.trace" not in source and "publish import trace" not in source
