"""Layers 1 and 2: the iteration cap and result-aware dedup (Fuze layers 1-2, OpenFang/Hermes)."""

from __future__ import annotations

from typing import Any

import pytest
from scripted import words

import fuzeguard
from fuzeguard import Detection, LoopDetected, guard
from fuzeguard.layers import Dedup, Iterations
from fuzeguard.testing import capture_detections


def calls_until_killed(tool: Any, args: list[Any]) -> int | None:
    """Make the calls in order; return the 1-based index of the call that was killed."""
    with fuzeguard.run():
        for i, a in enumerate(args, start=1):
            try:
                tool(a)
            except LoopDetected:
                return i
    return None


def test_iterations_kills_the_call_after_a_max_iterations_the_user_wrote() -> None:
    """Fuze layer 1: a max_iterations the user writes is an absolute cap, whatever the results."""
    tool = guard(lambda x: f"result {x}", name="tool", max_iterations=25)
    assert calls_until_killed(tool, list(range(30))) == 26


def test_a_user_cap_from_the_run_or_the_file_is_absolute_too() -> None:
    """Issue: a number the user writes, wherever, is Fuze's cap; only the built-in one adapts."""
    tool = guard(lambda x: f"result {x}", name="tool", layers=["iterations"])
    with fuzeguard.run(max_iterations=10), pytest.raises(LoopDetected) as info:
        for i in range(30):
            tool(i)
    assert info.value.detection.call_index == 11
    config = fuzeguard.Config.from_dict({"functions": {"tool": {"max_iterations": 5}}})
    with fuzeguard.run(config=config), pytest.raises(LoopDetected) as info:
        for i in range(30):
            tool(i)
    assert info.value.detection.call_index == 6


def test_the_builtin_cap_waives_a_batch_of_distinct_calls_that_return_nothing() -> None:
    """A batch of 30 distinct writes returning None is work (DeerFlow users' complaint: 'Tool bash
    called 53 times'), so the built-in cap is waived."""
    tool = guard(lambda x: None, name="tool", layers=["iterations"])
    assert calls_until_killed(tool, list(range(60))) is None


def test_iterations_caps_calls_whose_results_are_unknown() -> None:
    """Fuze layer 1 on calls that never return (unbounded recursion): no evidence of progress."""

    @guard(layers=["iterations"])
    def recurse(n: int) -> int:
        if n < 40:
            return recurse(n + 1)
        return n

    with fuzeguard.run(), pytest.raises(LoopDetected) as info:
        recurse(0)
    # The built-in cap adapts, so its first detection (the 26th call) warns; the 27th persists.
    assert info.value.detection.call_index == 27


def test_iterations_waives_the_cap_for_a_function_that_keeps_bringing_new_results() -> None:
    """A batch over 50 distinct files is work, not a loop (issue: false alarms are defects)."""
    read_file = guard(lambda path: f"contents of {path}", name="read_file", layers=["iterations"])
    assert calls_until_killed(read_file, [f"src/module_{i}.py" for i in range(60)]) is None


def test_iterations_waiver_tolerates_a_few_repeated_results_in_a_batch() -> None:
    """Two empty __init__.py files in a batch do not make it a loop."""
    contents = {i: ("" if i in (7, 30) else f"code {i}") for i in range(60)}
    read_file = guard(lambda i: contents[i], name="read_file", layers=["iterations"])
    assert calls_until_killed(read_file, list(range(60))) is None


def test_iterations_waiver_ends_when_results_start_repeating() -> None:
    answers = [f"page {i}" for i in range(30)] + ["no more pages"] * 30
    fetch = guard(lambda i: answers[min(i, 59)], name="fetch", layers=["iterations"])
    killed = calls_until_killed(fetch, list(range(30)) + [99] * 30)
    assert killed is not None and 30 < killed <= 46  # warned at the cap, killed the call after


def test_iterations_waives_the_cap_for_writes_acknowledged_alike() -> None:
    write_file = guard(lambda path: "OK", name="write_file", layers=["iterations"])
    assert calls_until_killed(write_file, [f"out/{i}.txt" for i in range(60)]) is None


def test_iterations_caps_a_function_that_keeps_failing_the_same_way() -> None:
    """New arguments are exploration, but not when every call fails with the same error."""
    def fail(i: int) -> None:
        raise OSError("disk full")

    step = guard(fail, name="step", layers=["iterations"])
    with fuzeguard.run(), pytest.raises(LoopDetected) as info:
        for i in range(30):
            try:
                step(i)
            except OSError:
                pass
    assert info.value.detection.call_index == 27  # the built-in cap warns first


def test_iterations_plain_fuze_cap_when_not_result_aware() -> None:
    """result_aware = false: the absolute Fuze cap, whatever the results."""
    tool = guard(lambda x: x, name="tool", layers=["iterations"], result_aware=False)
    assert calls_until_killed(tool, list(range(30))) == 26


def test_iterations_counts_per_function() -> None:
    """Fuze layer 1 counts each function on its own."""
    a = guard(lambda x: x, name="a", max_iterations=2)
    b = guard(lambda x: x, name="b", max_iterations=2)
    with fuzeguard.run() as r:
        a(1), b(1), a(2), b(2)
        with pytest.raises(LoopDetected):
            b(3)
    assert r.stats().calls_by_fn == {"a": 2, "b": 2}


def test_iterations_detection_reports_count_and_threshold() -> None:
    tool = guard(lambda x: x, name="tool", max_iterations=3)
    with fuzeguard.run(), pytest.raises(LoopDetected) as info:
        for i in range(4):
            tool(i)
    d = info.value.detection
    assert (d.layer, d.count, d.threshold, d.call_index) == ("iterations", 4, 3, 4)
    assert "`tool`" in d.message


def test_dedup_warns_the_third_identical_call_and_kills_a_streak_of_five() -> None:
    """The same call with the same result twice and nothing changed since: the 3rd is detected
    (a warning: a few re-runs are often followed by a change of approach); the same call and
    outcome five times back to back leaves no doubt."""
    search = guard(lambda q: "same results", name="search")
    with capture_detections() as found:
        assert calls_until_killed(search, ["q"] * 10) == 5
    assert [(d.call_index, d.action) for d in found] == [(3, "warn"), (4, "warn"), (5, "kill")]


def test_dedup_with_fuze_numbers_kills_the_fourth_identical_call() -> None:
    """Fuze layer 2 allows 3 identical calls: repeat_threshold = 3 makes the 4th the loop (with
    plain Fuze counting, acted on at once; result-aware, a streak that short is a warning)."""
    search = guard(lambda q: "same results", name="search", repeat_threshold=3,
                   result_aware=False)
    assert calls_until_killed(search, ["q"] * 10) == 4
    search = guard(lambda q: "same results", name="search", repeat_threshold=3)
    with capture_detections() as found:
        assert calls_until_killed(search, ["q"] * 10) == 5
    assert found[0].call_index == 4


def test_dedup_warns_early_when_an_early_warning_is_set() -> None:
    """OpenFang/Hermes: 'same hash 3+ times' warns; with Fuze's threshold and a warning at 3, the
    3rd identical call with an unchanged result gets a warning before the 4th is acted on."""
    search = guard(lambda q: "same results", name="search", repeat_threshold=3,
                   repeat_warn_threshold=3)
    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(5):
            search("q")
    assert [(d.call_index, d.kind, d.action) for d in found] == [
        (3, "warning", "warn"), (4, "warning", "warn"), (5, "loop", "kill")
    ]


def test_dedup_warns_a_spread_repeat_first_by_default() -> None:
    """The first signal of a repeat spread among other calls is a warning; the pattern detected
    again after it is a loop (``early_warnings = 1``)."""
    search = guard(lambda q: "r", name="search")
    other = guard(lambda i: f"new {i}", name="fetch")
    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected):
        for i in range(4):
            search("q")
            other(i)
    assert [(d.call_index, d.kind, d.action) for d in found] == [(5, "warning", "warn"),
                                                                 (7, "loop", "kill")]


def test_dedup_remembers_outcomes_over_repeat_memory_calls_only() -> None:
    """Repeats spread over more than repeat_memory calls are not remembered together."""
    search = guard(lambda q: f"r-{q}", name="search", max_iterations=1000, layers=["dedup"],
                   repeat_memory=8)
    args = []
    for _ in range(10):
        args += ["same", *[f"other{i}" for i in range(len(args), len(args) + 4)]]
    assert calls_until_killed(search, args) is None


def test_dedup_result_aware_repeat_with_changing_result_is_progress() -> None:
    """Polling a status that changes, re-running tests after edits: not a loop."""
    states = iter(["queued", "running", "running 40%", "running 80%", "done", "done2", "x", "y"])
    poll = guard(lambda job: next(states), name="poll")
    assert calls_until_killed(poll, ["job-1"] * 8) is None


def test_dedup_result_aware_counts_the_streak_since_the_result_last_changed() -> None:
    results = iter(["a", "b", "c", "c", "c", "c", "c"])
    poll = guard(lambda job: next(results), name="fetch_job")
    # calls 3 and 4 return "c": the 5th is the 3rd call with that answer (a warning: a streak),
    # the 7th the 5th back to back
    with capture_detections() as found:
        assert calls_until_killed(poll, ["job"] * 7) == 7
    assert found[0].call_index == 5


def test_dedup_spares_identical_waits_between_polls_whose_answer_changes() -> None:
    """sleep(5) between status checks returns None every time; the run still moves on."""
    states = iter(f"deploying: {p}% done" for p in range(0, 100, 5))
    check_status = guard(lambda job: next(states), name="check_status")
    sleep = guard(lambda seconds: None, name="sleep")
    with capture_detections() as found, fuzeguard.run():
        for _ in range(12):
            check_status("deploy-42")
            sleep(5)
    assert found == []


def test_dedup_still_catches_identical_calls_between_calls_that_change_nothing() -> None:
    check_status = guard(lambda job: "deploying: 40% done", name="check_status", exempt_from=["dedup"])
    wait = guard(lambda seconds: "done", name="pause")
    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(6):
            check_status("deploy-42")
            wait(5)
    by_dedup = [(d.fn, d.call_index, d.action) for d in found if d.layer == "dedup"]
    assert by_dedup == [("pause", 6, "warn"), ("pause", 8, "kill")]


def test_unchanged_polls_wait_until_the_tenth_and_loop_at_the_twentieth() -> None:
    """Polls wait (OpenClaw's known-poll rule): an unchanged answer to an identical status check
    is warned at the 10th poll and a loop at the 20th, with or without sleeps in between."""
    check_status = guard(lambda job: "deploying: 40% done", name="check_status")
    assert calls_until_killed(check_status, ["deploy-42"] * 30) == 20
    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(30):
            check_status("deploy-42")
            guard(lambda seconds: None, name="sleep")(5)
    first = min(found, key=lambda d: d.call_index)
    assert (first.kind, first.call_index) == ("warning", 19)  # the 10th poll
    assert max(d.call_index for d in found) == 39  # the 20th poll is the loop


def test_dedup_spares_relisting_a_directory_after_each_file_written() -> None:
    list_dir = guard(lambda path: "a.py b.py c.py d.py e.py f.py", name="list_dir")
    write_file = guard(lambda path: f"wrote {path}", name="write_file")
    with capture_detections() as found, fuzeguard.run():
        for name in "abcdef":
            list_dir(".")
            write_file(f"{name}.py")
    assert found == []


def test_dedup_stops_relisting_a_directory_between_reads_that_change_nothing() -> None:
    """What reads return is no change of state: the same listing a third time is a loop, however
    new the files read between them: warned at the 3rd listing, killed at the 4th."""
    list_dir = guard(lambda path: "a.py b.py c.py d.py e.py f.py", name="list_dir")
    read_file = guard(lambda path: words(len(path) * ord(path[0])), name="read_file")
    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected):
        for name in "abcdef":
            list_dir(".")
            read_file(f"{name}.py")
    assert [(d.fn, d.call_index, d.action) for d in found] == [("list_dir", 5, "warn"),
                                                              ("list_dir", 7, "kill")]


def test_dedup_plain_mode_counts_arguments_only() -> None:
    """Fuze's plain behaviour: result_aware = false."""
    results = iter(range(100))
    poll = guard(lambda job: next(results), name="fetch_job", result_aware=False)
    assert calls_until_killed(poll, ["job"] * 10) == 3
    poll = guard(lambda job: next(results), name="fetch_job", result_aware=False,
                 repeat_threshold=3)
    assert calls_until_killed(poll, ["job"] * 10) == 4


def test_dedup_counts_unknown_results_as_repeats() -> None:
    """A call whose outcome is unknown (e.g. it failed oddly) is not evidence of progress."""
    from fuzeguard._private.meaning.records import Call, CallRecord

    class View:
        id = "r"

        def __init__(self, records: list[CallRecord]) -> None:
            self.records = self.history = records

        def same_args(self, fp: bytes) -> list[CallRecord]:
            return [r for r in self.records if r.args_fp == fp]

    records = [CallRecord("f", i, b"fp", None) for i in range(1, 4)]
    d = Dedup().check(View(records), Call("f", 4, b"fp"))  # type: ignore[arg-type]
    assert d is not None and d.kind == "loop" and d.count == 4


def test_dedup_treats_a_repeated_error_as_the_same_result() -> None:
    """Hermes: 'retrying a terminal command that keeps failing'."""

    @guard
    def terminal(cmd: str) -> str:
        raise PermissionError("permission denied")

    with fuzeguard.run(), capture_detections() as found:
        with pytest.raises(LoopDetected):
            for _ in range(5):
                try:
                    terminal("make deploy")
                except OSError:
                    pass
    # A streak of one failure: warned at the 3rd and 4th attempts, killed at the 5th.
    assert [(d.call_index, d.action) for d in found] == [(3, "warn"), (4, "warn"), (5, "kill")]


def test_dedup_message_is_written_for_the_model() -> None:
    search = guard(lambda q: "r", name="web_search")
    with fuzeguard.run(), pytest.raises(LoopDetected) as info:
        for _ in range(5):
            search("q")
    assert info.value.detection.message == (
        "You called `web_search` with the same arguments 5 times and got the same result each "
        "time, and nothing changed in between. Use what you have, or try different arguments or "
        "another tool."
    )


def test_dedup_warn_threshold_above_the_hard_one_is_refused() -> None:
    with pytest.raises(ValueError, match="repeat_warn_threshold"):
        Dedup(repeat_threshold=3, repeat_warn_threshold=4)


def test_layers_are_frozen_and_hold_no_state() -> None:
    layer = Iterations(max_iterations=3)
    with pytest.raises(AttributeError):
        layer.max_iterations = 4  # type: ignore[misc]
    assert not hasattr(layer, "__dict__")


def test_exempt_function_is_not_checked_by_the_exempted_layer() -> None:
    """OpenFang/Hermes exempt_tools: status polls may repeat."""
    poll = guard(lambda job: "running", name="check_status", exempt_from=["dedup"])
    assert calls_until_killed(poll, ["j"] * 20) is None


def test_function_gets_its_own_thresholds() -> None:
    poll = guard(lambda job: job, name="check_status", max_iterations=200)
    assert calls_until_killed(poll, list(range(150))) is None


def test_layer_objects_can_be_passed_in_code() -> None:
    tool = guard(lambda x: "r", name="tool",
                 layers=[Dedup(repeat_threshold=1, repeat_warn_threshold=0, streak_threshold=2)])
    assert calls_until_killed(tool, ["a", "a"]) == 2


def test_custom_layer_written_against_the_protocol_runs() -> None:
    from dataclasses import dataclass
    from typing import ClassVar

    from fuzeguard import Call
    from fuzeguard.layers import RunView

    @dataclass(frozen=True, slots=True)
    class NoDeletesAfterErrors:
        name: ClassVar[str] = "no_deletes_after_errors"

        def check(self, run: RunView, call: Call) -> Detection | None:
            if call.fn.startswith("delete") and run.errors:
                # certain evidence: on_loop applies at once (else it warns first)
                return Detection(layer=self.name, fn=call.fn, evidence="certain",
                                 message="Do not delete after an error.")
            return None

    @guard(layers=["iterations", NoDeletesAfterErrors()])
    def delete_rows(table: str) -> None:
        raise OSError("db locked")

    with fuzeguard.run(), pytest.raises(LoopDetected) as info:
        for _ in range(2):
            try:
                delete_rows("users")
            except OSError:
                pass
    assert info.value.detection.layer == "no_deletes_after_errors"
    assert info.value.detection.call_index == 2


def test_a_layer_object_without_check_is_refused_when_the_guard_is_declared() -> None:
    with pytest.raises(TypeError, match="check"):
        guard(lambda x: x, name="tool", layers=[object()])
