"""Progress is a change in meaning: result skeletons, results that read as errors, tool kinds."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
from scripted import Step, play

import fuzeguard
from fuzeguard import Config, ConfigError, LoopDetected, guard
from fuzeguard._private.meaning.kinds import call_kind, infer_kind
from fuzeguard._private.meaning.outcome import failure_fingerprint, mask_text, reads_as_error, skeleton
from fuzeguard._private.reports.replay import Replayer
from fuzeguard.testing import capture_detections


def same(a: object, b: object) -> bool:
    from fuzeguard._private.meaning.fingerprint import fingerprint

    return fingerprint(skeleton(a)) == fingerprint(skeleton(b))


# ----------------------------------------------------------------------------- volatile parts


#: Pairs of results that differ only in volatile parts: the same result (docs/quality.md shows them).
SAME_MEANING = [
    ("bash: line 12: javac: command not found", "bash: line 13: javac: command not found"),
    ("1 failed, 3 passed in 0.52s", "1 failed, 3 passed in 1.07s"),
    ("job 0f8e2c1a-5d1b-4c3e-9a7b-2e4f6a8b0c1d queued", "job 7c1e9f0a-1b2c-4d3e-8f9a-0b1c2d3e4f5a queued"),
    ("built 3fa9c1e in 2026-11-24T03:08:25Z", "built 8d0b2aa in 2026-11-24T03:09:41Z"),
    ("Started process pid 4242", "Started process pid 4251"),
    ("attempt 3 failed: timeout", "attempt 4 failed: timeout"),
    ("write /tmp/a.md revision 4", "write /tmp/a.md revision 5"),
    ("Out[12]: 42", "Out[13]: 42"),
    ("created /tmp/tmpa8b3k2c9/out.txt", "created /tmp/tmpq9z7x1c4/out.txt"),
    ('{"status": "done", "requestId": "r-1", "durationMs": 12}',
     '{"status": "done", "requestId": "r-2", "durationMs": 31}'),
]
#: Pairs of results whose difference is real progress.
REAL_CHANGE = [
    ("Building... 12%", "Building... 40%"),
    ("1 failed, 3 passed in 0.52s", "2 failed, 2 passed in 0.52s"),
    ("def parse(text):\n    return 1", "def parse(text):\n    return 2"),
    ("status: running", "status: done"),
]


@pytest.mark.parametrize(("a", "b"), SAME_MEANING)
def test_text_that_differs_only_in_volatile_tokens_is_the_same_result(a: str, b: str) -> None:
    assert same(a, b)


@pytest.mark.parametrize(("a", "b"), REAL_CHANGE)
def test_real_change_is_still_progress(a: str, b: str) -> None:
    assert not same(a, b)


def test_json_results_lose_volatile_keys_by_name_and_value_shape_at_any_depth() -> None:
    a = {"status": "completed", "exitCode": 0, "durationMs": 100, "cwd": "/tmp/run-0",
         "kernel": {"execution_count": 100, "mode": "session"}, "requestId": "abc",
         "output": "Loki\nPrometheus", "digest": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b"}
    b = {**a, "durationMs": 250, "cwd": "/tmp/run-7", "kernel": {"execution_count": 101,
         "mode": "session"}, "requestId": "def", "digest": "2c26b46b68ffc68ff99b453c1d30413413422d70"}
    assert same(a, b)
    assert not same(a, {**a, "exitCode": 1})


def test_json_held_in_text_at_any_depth_is_judged_as_json() -> None:
    """MCP tools return their JSON as text inside content blocks."""
    def reply(n: int) -> dict[str, object]:
        body = {"message": {"id": f"qa_{n}", "conversation": {"id": f"room-{n}"}, "text": "hello"}}
        return {"content": [{"type": "text", "text": json.dumps(body, indent=2)}]}

    assert same(reply(0), reply(1))


def test_a_volatile_field_a_user_declares_is_left_out(tmp_path: Path) -> None:
    """Issue: tools declare which result fields are volatile ([functions.NAME] volatile = [...])."""
    counter = iter(range(100))

    @guard(volatile=["build_number"], repeat_warn_threshold=0)
    def get_build(job: str) -> dict[str, object]:
        return {"state": "queued", "build_number": next(counter)}

    with fuzeguard.run() as r, pytest.raises(LoopDetected):
        for _ in range(6):
            get_build("app")
    assert r.stats().calls == 4  # five identical answers back to back: the 5th is refused

    @guard(repeat_warn_threshold=0)
    def get_build2(job: str) -> dict[str, object]:
        return {"state": "queued", "build_number": next(counter)}

    with fuzeguard.run() as r:
        for _ in range(6):
            get_build2("app")
    assert r.stats().calls == 6


# ----------------------------------------------------------------------------- errors in text


@pytest.mark.parametrize(
    "text",
    [
        "bash: line 12: javac: command not found",
        "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad",
        '  File "x.py", line 1\n    print(\n          ^\nSyntaxError: unexpected EOF while parsing',
        "error: pathspec 'main2' did not match any file(s) known to git",
        "fatal: not a git repository (or any of the parent directories): .git",
        "cat: missing.txt: No such file or directory",
        "[ERROR] Failed to execute goal: Compilation failure",
    ],
)
def test_text_that_reports_a_failure_reads_as_an_error(text: str) -> None:
    assert reads_as_error(text)


@pytest.mark.parametrize(
    "value",
    ["", "No results found.", "3 passed in 0.12s", "src/a.py:12:1: E302 expected 2 blank lines",
     "Error handling is done in utils.py", {"ok": True}, {"status": "running"}],
)
def test_ordinary_output_does_not_read_as_an_error(value: object) -> None:
    assert not reads_as_error(value)


@pytest.mark.parametrize(
    "value",
    [{"error": "no route"}, {"status": "failed"}, {"ok": False}, {"isError": True, "content": []}],
)
def test_structured_failures_read_as_errors(value: object) -> None:
    assert reads_as_error(value)


def test_a_result_that_reads_as_an_error_counts_as_an_error() -> None:
    @guard
    def bash(command: str) -> str:
        return "bash: line 3: javac: command not found"

    with fuzeguard.run() as r:
        bash("javac A.java")
        bash("javac B.java")
    assert r.stats().errors == 2


def test_the_same_action_failing_again_is_a_repeat_however_the_message_drifts() -> None:
    """OpenHands: the same invalid command fails with a different message each time: the very
    same call failing again is a repeat, whatever its message says this time."""
    messages = iter(["Command not found", "Command still not found", "Different error", "x", "y"])

    @guard
    def execute_bash(command: str) -> str:
        raise RuntimeError(next(messages))

    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(5):
            try:
                execute_bash("invalid_command")
            except LoopDetected:
                raise
            except RuntimeError:
                pass
    # One failure back to back: warned at the 3rd and 4th attempts, a loop at the 5th.
    assert [(d.call_index, d.evidence, d.action) for d in found] == [
        (3, "weak", "warn"), (4, "weak", "warn"), (5, "certain", "kill")
    ]


def test_failures_are_fingerprinted_by_what_failed_with_drifting_parts_masked() -> None:
    assert failure_fingerprint('File "a.py", line 3\nOSError: disk error') == failure_fingerprint(
        'File "a.py", line 4\nOSError: disk error')
    # A line number elsewhere may be the progress ("line 0" -> "line 1").
    assert failure_fingerprint("OSError: disk error at line 3") != failure_fingerprint(
        "OSError: disk error at line 4")
    assert failure_fingerprint("KeyError: 'alice'") != failure_fingerprint("KeyError: 'bob'")
    assert failure_fingerprint("OSError: disk full") != failure_fingerprint("KeyError: 'x'")
    assert failure_fingerprint("exit code 1", "pid 4242: Segmentation fault") == failure_fingerprint(
        "exit code 1", "pid 77: Segmentation fault")


def test_masking_keeps_plain_numbers_and_words() -> None:
    assert mask_text("defaced 12 items") == "defaced 12 items"


def test_every_uuid_in_text_is_masked_whole_whatever_its_groups_start_with() -> None:
    """A UUID that starts with a digit and whose last group starts with a letter used to lose
    only that group, so a fresh one on every call made each result look new."""
    rng = random.Random(3)
    for _ in range(2000):
        token = str(uuid.UUID(int=rng.getrandbits(128)))
        assert mask_text(f"created job {token} at step 4") == "created job _ at step 4", token
    assert mask_text("job 1b4e28ba-2fa1-11d2-883f-b9a761bde3fb queued") == "job _ queued"


# ----------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(
    ("name", "kind"),
    [("web_search", "search"), ("search_dir", "search"), ("find_file", "search"),
     ("read_file", "read"), ("open", "read"), ("web_fetch", "read"), ("write_file", "write"),
     ("edit", "write"), ("send_message", "write"), ("update_status", "write"),
     ("check_status", "poll"), ("get_status", "poll"), ("bash", "exec"), ("execute_code", "exec"),
     ("shell_exec", "exec"), ("python", "exec"), ("__output__", "model"), ("tool", "other"),
     ("getJobStatus", "poll")],
)
def test_a_kind_is_inferred_from_common_names(name: str, kind: str) -> None:
    assert infer_kind(name) == kind


def test_arguments_refine_the_kind_of_one_call() -> None:
    assert call_kind("other", {"action": "poll", "sessionId": "s"}) == "poll"
    assert call_kind("write", {"action": "read", "target": "chat"}) == "read"
    assert call_kind("exec", {"command": "kubectl get pods --watch"}) == "poll"
    assert call_kind("exec", {"command": "sleep 30"}) == "poll"
    assert call_kind("exec", {"command": "python reproduce.py"}) == "exec"


def test_a_remembered_command_kind_is_the_kind_read_afresh_and_the_memory_stays_bounded() -> None:
    from fuzeguard._private.meaning import kinds

    commands = ["sleep 30", "python reproduce.py", "pip install x", "git status",
                "echo hi > out.txt", "ls", "x" * (kinds._COMMAND_REMEMBERED + 1)]
    fresh = {c: kinds.command_kind(c) for c in commands}
    assert fresh["sleep 30"] == "poll" and fresh["pip install x"] == "write"
    assert fresh["python reproduce.py"] is None
    for _ in range(2):
        for c in commands:
            assert kinds.command_kind(c) == fresh[c]
            assert call_kind("exec", {"command": c}) == (fresh[c] or "exec")
    assert commands[-1] not in kinds._COMMAND_KINDS  # too long to keep
    for i in range(kinds._COMMANDS_REMEMBERED + 10):
        kinds.command_kind(f"python step_{i}.py")
    assert len(kinds._COMMAND_KINDS) <= kinds._COMMANDS_REMEMBERED


def test_a_declared_kind_is_used_as_it_is() -> None:
    """Issue: a user fixes a false alarm by saying what a tool is, without switching a layer off."""
    @guard
    def refresh(job: str) -> str:
        return "pending"

    assert play([Step("refresh", {"job": "a"}, "pending")] * 8).killed_at == 5

    config = Config.from_dict({"functions": {"refresh": {"kind": "poll"}}})
    with capture_detections() as found, fuzeguard.run(config=config):
        for _ in range(9):
            refresh("a")
    assert found == []


def test_kind_can_be_declared_in_guard() -> None:
    @guard(kind="poll")
    def refresh(job: str) -> str:
        return "pending"

    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected) as info:
        for _ in range(30):
            refresh("a")
    assert [d.call_index for d in found if d.kind == "warning"] == [10]
    assert info.value.detection.call_index == 20


def test_an_unknown_kind_is_a_config_error_that_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r'unknown kind .pol.*"poll"'):
        Config.from_dict({"functions": {"refresh": {"kind": "pol"}}})


def test_identical_writes_are_a_loop_even_with_a_new_receipt_each_time() -> None:
    """OpenClaw: the same 'hello' sent again and again, a new message id in every receipt."""
    steps = [Step("send_message", {"to": "chat-1", "text": "hello"},
                  {"ok": True, "messageId": f"om_{i}", "receipt": f"p_{i}"}) for i in range(8)]
    assert play(steps).killed_at == 3


def test_a_models_wordless_output_is_never_a_repeat() -> None:
    """gemini-cli PR #6893: a box-drawing divider is decoration, not a loop."""
    steps = [Step("__output__", {}, "─" * 40)] * 15
    assert play(steps).detections == []
    chant = [Step("__output__", {}, "This is the same sentence again. ")] * 6
    assert play(chant).killed_at == 5


# ----------------------------------------------------------------------------- live = replay


def test_replay_judges_text_errors_and_refined_kinds_as_the_live_run_did(tmp_path: Path) -> None:
    """A trace written without arguments or results still carries what the judgement needed
    (but for near-identical failing attempts, which need the arguments' text: docs/tracing.md)."""
    trace = tmp_path / "t.jsonl"

    @guard(record_args=False, record_results=False, on_loop="warn")
    def process(action: str, session: str) -> str:
        return "(no new output)\nProcess still running."

    @guard(record_args=False, record_results=False, on_loop="warn")
    def bash(command: str) -> str:
        return "bash: line 4: javac: command not found"

    with capture_detections() as live, fuzeguard.run(trace=str(trace)):
        for _ in range(12):
            process("poll", "s-1")
            bash("javac A.java")
    summary = Replayer(Config()).replay_file(str(trace))
    replayed = [(d.call, d.detection.layer, d.detection.kind) for d in summary.detections]
    assert replayed == [(d.call_index, d.layer, d.kind) for d in live]
    assert replayed  # the javac failures are judged as errors
