"""The cycle layer: ping-pong and short cycles over tool names and full call fingerprints."""

from __future__ import annotations

import pytest
from scripted import History, Step, play, words

from fuzeguard import Config, ConfigError
from fuzeguard._private.records import Call, CallRecord
from fuzeguard.layers import Cycle

SEARCH_RESULTS = "1. Loop detection in agents\n2. Tool call cycles explained\n3. Stopping runaway agents"
PAGE = "A long article about agent loops that the fetch returns every time, unchanged."


def ping_pong(laps: int) -> list[Step]:
    """web_search ↔ web_fetch with new arguments each time and results that stopped changing."""
    steps = []
    for i in range(laps):
        steps.append(Step("web_search", {"query": f"agent loop detection {i}"}, SEARCH_RESULTS))
        steps.append(Step("web_fetch", {"url": f"https://example.com/article?ref={i}"}, PAGE))
    return steps


def test_ping_pong_with_unchanged_results_warns_at_third_lap_and_stops_at_fourth() -> None:
    """DeerFlow cycle layer (PR #2590): a web_search ↔ web_fetch alternation that the hash and
    name-frequency checks miss warns at the 3rd repetition (call 6) and stops at the 4th (call 8)."""
    played = play(ping_pong(10), layers=["cycle"])
    assert played.at("cycle", "warning") == [6]
    assert played.killed_at == 8


def test_three_tool_cycle_warns_at_call_9_and_stops_at_call_12() -> None:
    """DeerFlow cycle layer: a 3-tool pattern (a, b, c) hard-stops at 4 cycles (12 calls)."""
    steps = [Step(name, {"n": lap}, f"{name} says the same") for lap in range(6)
             for name in ("plan", "search", "summarize")]
    played = play(steps, layers=["cycle"])
    assert played.at("cycle", "warning") == [9]
    assert played.killed_at == 12


def test_edit_test_alternation_with_changing_test_output_is_work() -> None:
    """Issue 3: edit → run tests → edit → run tests with different test output each time is work."""
    steps = []
    for lap in range(12):
        steps.append(Step("edit_file", {"path": "app.py", "patch": f"fix {lap}"}, "Patch applied."))
        steps.append(Step("run_tests", {}, f"{12 - lap} failed, {30 + lap} passed"))
    played = play(steps, layers=["cycle"])
    assert played.detections == []


def test_alternation_whose_results_stop_changing_is_caught_from_that_point() -> None:
    """Issue 3: alternation whose results change is work until they stop changing; then the usual
    laps apply, counted from the laps with unchanged results."""
    steps = []
    for lap in range(10):
        output = f"{max(5 - lap, 1)} failed"  # improves for four laps, then stuck at "1 failed"
        steps.append(Step("edit_file", {"patch": f"attempt {lap}"}, "Patch applied."))
        steps.append(Step("run_tests", {}, output))
    played = play(steps, layers=["cycle"], on_loop="warn")
    # run_tests first returns "1 failed" at call 10 (lap 5); laps 5, 6, 7 are unchanged.
    assert played.first("cycle", "warning") == 14
    assert played.first("cycle", "loop") == 16


def test_single_name_repeats_are_left_to_dedup_and_iterations() -> None:
    """DeerFlow cycle layer: `len(set(cycle)) < 2` is skipped so the layers never overlap."""
    steps = [Step("read_file", {"path": f"f{i % 2}.py"}, "same content") for i in range(20)]
    played = play(steps, layers=["cycle"])
    assert played.detections == []


def test_mixed_sequence_does_not_trigger() -> None:
    """DeerFlow cycle layer: a mixed sequence (a, b, a, c, a, b) is not a cycle."""
    steps = [Step(name, {}, "ok result text") for name in "abacab"]
    played = play(steps, layers=["cycle"])
    assert played.detections == []


def test_exact_fingerprint_cycle_is_reported_as_the_same_calls() -> None:
    """OpenFang/Hermes ping-pong over call hashes: the message says the arguments repeat too."""
    steps = [Step(name, {"path": "app.py"}, f"{name} output") for _ in range(5)
             for name in ("read_file", "lint")]
    played = play(steps, layers=["cycle"], on_loop="warn")
    warning = next(d for d in played.detections if d.kind == "warning")
    assert warning.call_index == 6
    assert "with the same arguments" in warning.message


def test_the_same_cycle_is_one_pattern_whichever_step_it_is_entered_at() -> None:
    """OpenFang/Hermes escalation: repeated detections of one cycle step the same ladder."""
    played = play(ping_pong(8), layers=["cycle"], on_loop="warn")
    loops = [d for d in played.detections if d.kind == "loop"]
    assert [d.call_index for d in loops] == list(range(8, 17))
    assert len({d.pattern for d in loops}) == 1


def test_unknown_results_are_no_evidence_of_change() -> None:
    """DeerFlow cycle layer: a tool-name log without results (a replayed trace from a system that
    records only calls) is judged by its names, as DeerFlow judges it: warned at the 6th call of a
    ping-pong and stopped at the 8th, whether or not the arguments vary."""
    def record(i: int, fn: str, args_fp: bytes) -> CallRecord:
        return CallRecord(fn=fn, index=i, args_fp=args_fp, result_fp=None)

    layer = Cycle()
    varied = History([record(i + 1, "ab"[i % 2], bytes([i])) for i in range(5)])
    warned = layer.check(varied, Call("b", 6, bytes([5])))
    assert warned is not None and warned.kind == "warning"
    varied = History([record(i + 1, "ab"[i % 2], bytes([i])) for i in range(7)])
    found = layer.check(varied, Call("b", 8, bytes([7])))
    assert found is not None and found.kind == "loop"
    exact = History([record(i + 1, "ab"[i % 2], b"a" if i % 2 == 0 else b"b") for i in range(7)])
    found = layer.check(exact, Call("b", 8, b"b"))
    assert found is not None and found.kind == "loop"


def test_result_aware_false_counts_laps_whatever_the_results() -> None:
    """Plain DeerFlow behaviour: names alone, results ignored."""
    steps = []
    for lap in range(6):
        steps.append(Step("search", {"q": lap}, words(lap)))
        steps.append(Step("fetch", {"u": lap}, words(100 + lap)))
    played = play(steps, layers=["cycle"], result_aware=False)
    assert played.killed_at == 8


def test_longer_cycles_are_configurable() -> None:
    steps = [Step(name, {"lap": lap}, "same") for lap in range(6) for name in "abcde"]
    assert play(steps, layers=["cycle"]).detections == []
    assert play(steps, layers=["cycle"], cycle_max_length=5).killed_at == 20


def test_cycle_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="cycle_warn_repeats"):
        Config.from_dict({"loop_detection": {"cycle_warn_repeats": 5}})
    with pytest.raises(ConfigError, match="cycle_min_length"):
        Config.from_dict({"loop_detection": {"cycle_min_length": 5, "cycle_max_length": 3}})
