"""The cycle layer: ping-pong and short cycles over tool names and full call fingerprints."""

from __future__ import annotations

import pytest
from scripted import History, Step, play, words

from fuzeguard import Config, ConfigError
from fuzeguard._private.meaning.records import Call, CallRecord
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
    """Alternation whose results change is work until they stop changing; then the usual laps
    apply, counted from the laps with unchanged results."""
    steps = []
    for lap in range(10):
        output = f"{max(5 - lap, 1)} failed"  # improves for four laps, then stuck at "1 failed"
        steps.append(Step("lint", {"path": "app.py"}, f"{lap} warnings" if lap < 4 else "clean"))
        steps.append(Step("run_tests", {}, output))
    played = play(steps, layers=["cycle"], on_loop="warn")
    # run_tests first returns "1 failed" at call 10 (lap 5); laps 5, 6, 7 are unchanged.
    assert played.first("cycle", "warning") == 14
    assert played.first("cycle", "loop") == 16


def test_new_edits_between_test_runs_are_work_even_when_the_output_stays() -> None:
    """A file whose content changed is progress: edit → test with a new edit each lap is not a
    cycle, whatever the tests say (the fix → re-test loop real agents run before a fix lands)."""
    steps = []
    for lap in range(10):
        steps.append(Step("edit_file", {"patch": f"attempt {lap}"}, "Patch applied."))
        steps.append(Step("run_tests", {}, "1 failed"))
    assert play(steps, layers=["cycle"]).detections == []


def test_the_same_edit_reapplied_between_test_runs_is_a_cycle() -> None:
    """The same edit re-applied while the tests fail the same way: an identical write is a repeat
    whatever its receipt, so the laps count as unchanged."""
    steps = []
    for lap in range(6):
        steps.append(Step("edit_file", {"patch": "the same patch"}, f"Patch applied (rev {lap})."))
        steps.append(Step("run_tests", {}, "1 failed"))
    played = play(steps, layers=["cycle"])
    assert played.at("cycle", "warning") == [6]
    assert played.killed_at == 8


def test_one_function_cycling_through_the_same_calls_is_a_cycle() -> None:
    """read a, read b, read a, read b…: one name, but the calls themselves cycle."""
    steps = [Step("read_file", {"path": f"f{i % 2}.py"}, "same content") for i in range(20)]
    played = play(steps, layers=["cycle"])
    assert played.at("cycle", "warning") == [6]
    assert played.killed_at == 8


def test_one_function_with_ever_new_arguments_is_not_a_cycle() -> None:
    """DeerFlow cycle layer: a single name repeating is not a cycle of names (batch work)."""
    steps = [Step("read_file", {"path": f"f{i}.py"}, "same content") for i in range(20)]
    assert play(steps, layers=["cycle"]).detections == []


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


def record(i: int, fn: str, args_fp: bytes) -> CallRecord:
    return CallRecord(fn=fn, index=i, args_fp=args_fp, result_fp=None)


def test_unknown_results_of_the_same_calls_are_no_evidence_of_change() -> None:
    """DeerFlow cycle layer: a tool-name log without results is judged as DeerFlow judges it when
    the calls repeat exactly: warned at the 6th call of a ping-pong and stopped at the 8th."""
    layer = Cycle()
    exact = History([record(i + 1, "ab"[i % 2], b"a" if i % 2 == 0 else b"b") for i in range(5)])
    warned = layer.check(exact, Call("b", 6, b"b"))
    assert warned is not None and warned.kind == "warning"
    exact = History([record(i + 1, "ab"[i % 2], b"a" if i % 2 == 0 else b"b") for i in range(7)])
    found = layer.check(exact, Call("b", 8, b"b"))
    assert found is not None and found.kind == "loop"


def test_varied_calls_with_unknown_results_are_a_loop_only_when_they_run_away() -> None:
    """DeerFlow issue #2569: web_search ↔ web_fetch with new arguments and no recorded results is
    batch work for a while (four rounds of glob, read, grep are exploration) and a runaway by lap
    10: warned when lap 10 completes (call 20), a loop from lap 20 (call 40)."""
    layer = Cycle()

    def varied(n: int) -> History:
        return History([record(i + 1, "ab"[i % 2], bytes([i])) for i in range(n)])

    assert layer.check(varied(7), Call("b", 8, bytes([7]))) is None
    assert layer.check(varied(18), Call("b", 19, bytes([18]))) is None
    warned = layer.check(varied(19), Call("b", 20, bytes([19])))
    assert warned is not None and warned.kind == "warning"
    found = layer.check(varied(39), Call("b", 40, bytes([39])))
    assert found is not None and found.kind == "loop"


def test_result_aware_false_counts_laps_whatever_the_results() -> None:
    """Plain DeerFlow behaviour: names alone, results ignored."""
    steps = []
    for lap in range(6):
        steps.append(Step("search", {"q": lap}, words(lap)))
        steps.append(Step("fetch", {"u": lap}, words(100 + lap)))
    played = play(steps, layers=["cycle"], result_aware=False)
    assert played.killed_at == 8


def test_cycle_lengths_are_configurable() -> None:
    """gemini-cli finds a 5-call cycle; the default looks for cycles of 2 to 5 calls."""
    steps = [Step(name, {"lap": lap}, "same") for lap in range(6) for name in "abcde"]
    assert play(steps, layers=["cycle"]).killed_at == 20
    assert play(steps, layers=["cycle"], cycle_max_length=4).detections == []


def test_cycle_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="cycle_warn_repeats"):
        Config.from_dict({"loop_detection": {"cycle_repeats": 4, "cycle_warn_repeats": 5}})
    with pytest.raises(ConfigError, match="cycle_min_length"):
        Config.from_dict({"loop_detection": {"cycle_min_length": 5, "cycle_max_length": 3}})


def test_a_waiting_cycle_is_warned_at_its_tenth_lap_whatever_the_early_warning_setting() -> None:
    """A cycle that waits on a poll is warned when lap 10 completes, even with the ordinary
    early warning set later than that (the layer's quick look must not rule it out first)."""
    steps = []
    for _ in range(12):
        steps.append(Step("get_job_status", {"job": "build-7"}, "running"))
        steps.append(Step("read_log", {"path": "build.log"}, "compiling..."))
    played = play(steps, layers=["cycle"], cycle_warn_repeats=12, cycle_repeats=15,
                  max_iterations=100)
    assert played.at("cycle", "warning") == [20]
