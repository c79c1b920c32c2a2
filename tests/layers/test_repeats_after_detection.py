"""Once a pattern is detected, repeating it never runs the real tool again in that run (unless a
write changed something since), and a model that keeps repeating it climbs the ladder one step per
repeat."""

from __future__ import annotations

from typing import Any

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard.testing import capture_detections

LADDER = ["warn", "skip", "kill"]
# What happens once a loop is acted on is tested here, not the grading: every loop takes the
# ladder at its first detection (graded evidence is tested in test_evidence_grades.py).
ACT_AT_ONCE: dict[str, Any] = {"early_warnings": 0}


def _tools(on_loop: Any) -> tuple[Any, Any, Any, list[str]]:
    ran: list[str] = []

    def search(query: str) -> str:
        ran.append("search")
        return f"3 results for {query}"

    def tool_a(query: str) -> str:
        ran.append("tool_a")
        return "nothing new"

    def tool_b(query: str) -> str:
        ran.append("tool_b")
        return "nothing new"

    return (guard(search, on_loop=on_loop, **ACT_AT_ONCE),
            guard(tool_a, on_loop=on_loop, **ACT_AT_ONCE),
            guard(tool_b, on_loop=on_loop, **ACT_AT_ONCE), ran)


def _shape(outputs: list[Any]) -> str:
    """R: the tool ran; S: the guard answered; K: killed."""
    return "".join(
        "K" if isinstance(o, LoopDetected) else "S" if o.startswith(("You ", "The last")) else "R"
        for o in outputs
    )


def _alternate(a: Any, b: Any, n: int) -> list[Any]:
    """A, B, A, B... with new arguments every call (their results never change)."""
    out: list[Any] = []
    for i in range(n):
        try:
            out.append((a if i % 2 == 0 else b)(f"q{i}"))
        except LoopDetected as exc:
            out.append(exc)
            break
    return out


def _repeat(tool: Any, n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(tool("laptops"))
        except LoopDetected as exc:
            out.append(exc)
            break
    return out


def test_a_skipped_identical_call_never_runs_again_and_is_killed_when_skipping_does_not_help() -> None:
    search, _, _, ran = _tools("skip")
    with fuzeguard.run() as run:
        out = _repeat(search, 50)
    assert _shape(out) == "RRSSK"
    assert ran == ["search"] * 2
    assert run.stats().calls == 2 and run.stats().skipped == 2 and run.stats().killed


def test_a_skipped_alternation_never_runs_either_tool_again_and_is_killed() -> None:
    _, a, b, ran = _tools("skip")
    with fuzeguard.run():
        out = _alternate(a, b, 40)
    assert _shape(out) == "R" * 7 + "SSK"
    assert len(ran) == 7


def test_a_ladder_whose_last_step_is_skip_kills_after_two_skips_at_that_step() -> None:
    search, _, _, ran = _tools(["warn", "skip"])
    with capture_detections() as found, fuzeguard.run():
        out = _repeat(search, 20)
    assert _shape(out) == "RRRSSK"
    assert [d.action for d in found if d.kind == "loop"] == ["warn", "skip", "skip", "kill"]
    assert len(ran) == 3


def test_a_ladder_ending_in_warn_never_escalates_past_it() -> None:
    search, _, _, _ = _tools(["skip", "warn"])
    with fuzeguard.run():
        out = _repeat(search, 20)
    assert "K" not in _shape(out)


def test_the_ladder_kills_a_two_tool_alternation_at_its_tenth_call() -> None:
    _, a, b, ran = _tools(LADDER)
    with capture_detections() as found, fuzeguard.run():
        out = _alternate(a, b, 40)
    assert _shape(out) == "R" * 8 + "SK"
    loops = [(d.call_index, d.action) for d in found if d.kind == "loop" and d.layer == "cycle"]
    assert loops == [(8, "warn"), (9, "skip"), (10, "kill")]
    assert len(ran) == 8


def test_the_ladder_kills_an_identical_call_loop_two_repeats_after_its_first_detection() -> None:
    search, _, _, ran = _tools(LADDER)
    out: list[Any] = []
    with capture_detections() as found, fuzeguard.run():
        for _ in range(10):
            try:
                out.append(search("laptops"))
            except LoopDetected as exc:
                out.append(exc)
                break
    assert _shape(out) == "RRRSK"
    assert [(d.call_index, d.action) for d in found if d.kind == "loop"] == [
        (3, "warn"), (4, "skip"), (5, "kill")
    ]
    assert len(ran) == 3


def test_a_cycle_steps_the_ladder_at_each_of_its_calls_whichever_tool_is_pending() -> None:
    _, a, b, _ = _tools(["warn", "warn", "warn", "kill"])
    with capture_detections() as found, fuzeguard.run():
        out = _alternate(a, b, 40)
    loops = [(d.call_index, d.fn, d.action) for d in found if d.kind == "loop" and d.layer == "cycle"]
    assert loops == [(8, "tool_b", "warn"), (9, "tool_a", "warn"), (10, "tool_b", "warn"),
                     (11, "tool_a", "kill")]
    assert isinstance(out[-1], LoopDetected)


def test_a_skipped_call_costs_nothing_and_counts_no_error() -> None:
    def failing(query: str) -> str:
        raise ValueError("backend down")

    tool = guard(failing, on_loop="skip", cost=1.0, **ACT_AT_ONCE)
    with fuzeguard.run() as run:
        for _ in range(5):
            try:
                tool("q")
            except (ValueError, LoopDetected):
                pass
    stats = run.stats()
    assert (stats.calls, stats.skipped, stats.errors, stats.cost) == (2, 2, 2, 2.0)


def test_a_skipped_repeat_runs_again_after_a_change_of_state_not_after_a_read() -> None:
    """State-aware dedup: a write in between may change what the repeat answers, so it runs
    again; reading something else changes nothing, so the repeat is still answered for."""
    ran: list[str] = []

    @guard(on_loop="skip", **ACT_AT_ONCE)
    def search(query: str) -> str:
        ran.append(query)
        return "3 results"

    @guard(on_loop="skip", **ACT_AT_ONCE)
    def read(path: str) -> str:
        return f"contents of {path}"

    @guard(on_loop="skip", **ACT_AT_ONCE)
    def write_file(path: str) -> str:
        return "written"

    with fuzeguard.run():
        out = _repeat(search, 3)
        read("new-file.txt")
        out += _repeat(search, 1)
        write_file("notes.txt")
        out += _repeat(search, 2)
    assert _shape(out) == "RRS" + "S" + "RR"
    assert len(ran) == 4


def test_a_skip_only_search_that_keeps_finding_nothing_is_ended_within_ten_tool_runs() -> None:
    """New queries, each answered "No results found.": the skipped call stays a search in the
    history, so the stale run goes on, and two skips that did not help end the run."""
    ran: list[str] = []

    @guard(on_loop="skip", **ACT_AT_ONCE)
    def search(query: str) -> str:
        ran.append(query)
        return "No results found."

    with capture_detections() as found, fuzeguard.run() as run:
        for i in range(50):
            try:
                search(f"laptop {i}")
            except LoopDetected:
                break
    assert run.killed is not None and len(ran) <= 10
    assert [d.action for d in found if d.kind == "loop"] == ["skip", "skip", "kill"]
