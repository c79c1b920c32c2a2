"""The mechanisms behind graded evidence, each on a hand-made case: what counts as a change of
state, what a failure is known by, what is masked, and which errors are read in which
ecosystems."""

from __future__ import annotations

import pytest
from scripted import Step, play, words

from fuzeguard._private.meaning.outcome import mask_text, output_failure, read_failure
from fuzeguard._private.meaning.records import CallRecord
from fuzeguard._private.reports.replay import _error_object
from fuzeguard.layers._evidence import changes_state
from fuzeguard.layers.dedup import bare_failure


def record(fn: str, kind: str, error: str | None) -> CallRecord:
    return CallRecord(fn=fn, index=1, args_fp=b"a", result_fp=b"r", error=error, kind=kind)


def test_a_shell_command_that_writes_then_fails_changed_the_state() -> None:
    """``cat > t.py <<EOF ... EOF && python t.py`` wrote the file even though running it failed."""
    assert changes_state(record("bash", "write", "exit code 1"))
    assert changes_state(record("write_file", "write", None))
    assert not changes_state(record("write_file", "write", "PermissionError"))  # a tool's write failed
    assert not changes_state(record("bash", "exec", "exit code 1"))


def test_a_here_doc_rewritten_and_run_again_is_not_a_repeat() -> None:
    fail = RuntimeError("exit code 1")
    steps = []
    for i in range(4):
        here_doc = f"cat > check.py <<'EOF'\nprint(parse({i}))\nEOF\npython check.py"
        steps.append(Step("bash", {"command": here_doc},
                          "Traceback (most recent call last):\nValueError: bad input", fail))
        steps.append(Step("bash", {"command": "python -m pytest -q"}, "1 failed", fail))
    played = play(steps)
    assert played.killed_at is None
    assert not [d for d in played.detections if d.fn == "bash" and d.count and d.count > 2
                and "pytest" in d.message]


def test_outputs_that_differ_above_a_common_footer_are_different_failures() -> None:
    footer = "\n----\nRan in 1.2s\nDone."
    a = output_failure("checking module a\nmismatch in a: 3 != 4" + footer)
    b = output_failure("checking module b\nmissing symbol b_init" + footer)
    assert a != b
    assert output_failure("checking module a\nmismatch in a: 3 != 4" + footer) == a


def test_replay_keeps_every_recorded_error_message() -> None:
    assert str(_error_object("ValueError: bad date")) == "bad date"
    assert str(_error_object("exit code 1")) == "exit code 1"
    assert str(_error_object("command not found: mvn")) == "command not found: mvn"


@pytest.mark.parametrize(("error", "result", "bare"), [
    (RuntimeError("exit code 1"), "", True),
    (RuntimeError("Exit status: 2"), None, True),
    (RuntimeError("Command 'grep x f' returned non-zero exit status 1."), "", True),
    (RuntimeError(""), "", True),
    (RuntimeError("exit code 1"), "E   AssertionError", False),
    (RuntimeError("command not found: mvn"), "", False),
    (ValueError("bad date"), None, False),
])
def test_a_bare_exit_status_is_a_miss_whatever_the_trace_shape(
    error: BaseException, result: object, bare: bool
) -> None:
    assert bare_failure(error, result) is bare


def test_line_numbers_are_masked_only_in_a_shell_prefix_and_traceback_positions() -> None:
    assert mask_text("processed line 0 of 10") != mask_text("processed line 1 of 10")
    assert mask_text('  File "a.py", line 12, in f') == mask_text('  File "a.py", line 40, in f')
    assert mask_text("Cell In[3], line 7") == mask_text("Cell In[9], line 2")
    assert mask_text("bash: line 12: mvn: command not found") == mask_text(
        "bash: line 99: mvn: command not found")


def test_counts_of_work_are_progress_but_retries_and_ids_are_not() -> None:
    for a, b in (("run 3 finished", "run 4 finished"), ("iteration 1200", "iteration 1300"),
                 ("job 4 running", "job 5 running"), ("build 17 queued", "build 18 queued")):
        assert mask_text(a) != mask_text(b), (a, b)
    for a, b in (("attempt 3 failed", "attempt 4 failed"), ("pid 4242 exited", "pid 977 exited")):
        assert mask_text(a) == mask_text(b), (a, b)


def test_a_poll_whose_job_counter_moves_is_not_a_loop() -> None:
    steps = [Step("get_job_status", {"id": "train"}, f"training: iteration {100 * i} of 5000")
             for i in range(30)]
    assert play(steps).detections == []


@pytest.mark.parametrize(("output", "found"), [
    ("   Compiling x v0.1.0\nerror[E0425]: cannot find value `y` in this scope\n --> src/main.rs:2:5",
     "error[E0425]: cannot find value `y` in this scope"),
    ("\n> x@1.0.0 test\n> jest\n\nnpm ERR! code ELIFECYCLE\nnpm ERR! errno 1\nnpm ERR! x@1.0.0 test: `jest`\n"
     "npm ERR! Exit status 1\nnpm ERR!\nnpm ERR! Failed at the x@1.0.0 test script.\n"
     "npm ERR! This is probably not a problem with npm.\nlog written",
     "npm ERR! Failed at the x@1.0.0 test script."),
    ("# example.com/m\n./main.go:12:5: undefined: foo\n./main.go:13:2: x declared and not used",
     "./main.go:12:5: undefined: foo"),
    ("____ test_a ____\n\n    def test_a():\n>       assert parse(1) == 2\n"
     "E   AssertionError: assert 1 == 2\n\n"
     "tests/test_a.py:3: AssertionError\n===== short test summary info =====\n"
     + "\n".join(f"PASSED tests/test_{i}.py::test" for i in range(5)) + "\n1 failed, 5 passed in 0.12s",
     "E   AssertionError: assert 1 == 2"),
])
def test_errors_of_other_ecosystems_are_read_by_their_shape(output: str, found: str) -> None:
    assert read_failure(output, True) == found


def test_a_zero_argument_call_revisited_among_other_work_only_warns() -> None:
    steps = []
    for i in range(5):
        steps.append(Step("get_current_day", {}, "2024-05-15"))
        steps.append(Step("search_events", {"query": f"meeting {i}"}, words(i, 20)))
    played = play(steps)
    assert played.killed_at is None
    assert {d.action for d in played.detections if d.fn == "get_current_day"} == {"warn"}
