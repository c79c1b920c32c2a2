"""Evidence grades the response (SPEC §4): habits that are not loops are never killed; a
pattern's first signal is a warning that reaches the model; a loop is killed when it persists
after the model was told, or at once when the evidence leaves no doubt.

Every scenario runs through the default configuration (layers, ladder and early warnings).
"""

from __future__ import annotations

from pathlib import Path

from scripted import Step, play, words

from fuzeguard import Config, Detection
from fuzeguard._private.judging.core import early_warning
from fuzeguard._private.reports.replay import replay


def bash(command: str, result: str = "", error: BaseException | None = None) -> Step:
    return Step("bash", {"command": command}, result, error)


def assert_never_killed(steps: list[Step]) -> None:
    played = play(steps)
    assert played.killed_at is None, [
        (d.call_index, d.layer, d.action, d.message) for d in played.detections
    ]
    assert played.calls == len(steps)


LISTING = "README.md\nsetup.py\nsrc\ntests"


def test_ls_revisited_between_reads_of_other_files() -> None:
    steps = []
    for i in range(3):
        steps.append(bash("ls", LISTING))
        steps.append(bash(f"cat src/module_{i}.py", words(i, 30)))
        steps.append(bash(f"cat tests/test_{i}.py", words(100 + i, 30)))
    assert_never_killed(steps)


def test_a_file_re_read_twice_among_other_reads() -> None:
    steps = [Step("read_file", {"path": "src/parser.py"}, words(1, 40))]
    for i in range(2):
        steps.append(Step("read_file", {"path": f"src/other_{i}.py"}, words(10 + i, 40)))
        steps.append(Step("read_file", {"path": "src/parser.py"}, words(1, 40)))
    assert_never_killed(steps)


FAILING_TEST = (
    "============================= FAILURES =============================\n"
    "E   AssertionError: assert parse('1.0') == Version(1, 0)\n"
    "1 failed, 41 passed in 0.8s"
)


def test_fixes_applied_by_a_script_each_followed_by_the_same_failing_test_run() -> None:
    """The write is invisible (a script changes the file): the re-test reads as a repeat, but
    "no write seen" is no proof that nothing changed."""
    steps = [bash("python -m pytest tests/test_parser.py", FAILING_TEST, RuntimeError("exit code 1"))]
    for variant in range(1, 5):
        steps.append(bash(f"python scripts/apply_fix.py --variant {variant}", "applied"))
        steps.append(bash("python -m pytest tests/test_parser.py", FAILING_TEST,
                          RuntimeError("exit code 1")))
    steps.append(bash("python scripts/apply_fix.py --variant 5", "applied"))
    steps.append(bash("python -m pytest tests/test_parser.py", "42 passed in 0.8s"))
    assert_never_killed(steps)


def test_a_date_tried_in_four_formats_before_the_fifth_is_accepted() -> None:
    steps = [
        Step("parse_date", {"text": text}, None,
             ValueError(f"time data '{text}' does not match format '%Y-%m-%d'"))
        for text in ("28/11/2026", "11/28/2026", "28.11.2026", "Nov 28 2026")
    ]
    steps.append(Step("parse_date", {"text": "2026-11-28"}, "2026-11-28T00:00:00"))
    assert_never_killed(steps)


def test_paging_through_results() -> None:
    steps = [Step("list_issues", {"page": page}, words(page, 30)) for page in range(1, 16)]
    steps.append(Step("list_issues", {"page": 16}, "[]"))
    assert_never_killed(steps)


def test_a_poll_whose_output_grows() -> None:
    steps = []
    log = ""
    for i in range(30):
        log += f"step {i}: compiled module_{i}\n"
        steps.append(Step("get_build_log", {"build": "42"}, log))
    assert_never_killed(steps)


def test_sixty_distinct_commands() -> None:
    steps = [bash(f"grep -rn symbol_{i} src/", f"src/file_{i}.py:{i}: symbol_{i} = {i}")
             for i in range(60)]
    assert_never_killed(steps)


def test_a_tight_identical_loop_is_stopped_by_its_fifth_call() -> None:
    steps = [Step("search_docs", {"query": "retry policy"}, "No results found.")] * 12
    played = play(steps)
    assert played.killed_at is not None and played.killed_at <= 5
    assert played.first() == 3  # the first signal, a warning, came before
    assert [d.action for d in played.detections if d.call_index < played.killed_at] == [
        "warn"
    ] * len([d for d in played.detections if d.call_index < played.killed_at])


def test_the_same_payment_sent_three_times_is_stopped_by_the_third() -> None:
    pay = Step("send_money", {"recipient": "DE89370400440532013000", "amount": 100.0},
               {"message": "Transaction sent.", "id": 7})
    played = play([pay, Step("get_balance", {}, "1,200.00"), pay, pay, pay])
    assert played.killed_at is not None and played.killed_at <= 4  # the third payment
    warned = [d for d in played.detections if d.action == "warn"]
    assert warned and warned[0].call_index == 3  # the second payment was not run silently


def test_a_spread_repeat_warns_first_and_is_killed_when_it_persists() -> None:
    steps = []
    for i in range(5):
        steps.append(Step("get_user", {"id": 1}, {"name": "Ada"}))
        steps.append(Step("get_order", {"id": 100 + i}, words(i, 10)))
    played = play(steps)
    kinds = [(d.call_index, d.action) for d in played.detections if d.layer == "dedup"]
    assert kinds[0] == (5, "warn")  # the third get_user: its first signal
    assert played.killed_at == 7  # the fourth: the pattern persisted after the warning


def test_a_varied_failure_streak_warns_but_a_different_call_after_it_runs() -> None:
    """After three failing test runs of a one-tool shell agent, a plain read is not killed."""
    fail = RuntimeError("exit code 1")
    steps = [bash(f"python -m pytest -k case_{i}", "E   ImportError: no module named foo", fail)
             for i in range(3)]
    steps.append(bash("cat setup.py", words(3, 30)))
    played = play(steps)
    assert played.killed_at is None
    assert played.calls == len(steps)


def test_evidence_decides_whether_a_loop_is_an_early_warning() -> None:
    loop = Detection(layer="dedup", fn="f", message="m", pattern="p")
    sure = Detection(layer="dedup", fn="f", message="m", pattern="p", evidence="certain")
    weak = Detection(layer="dedup", fn="f", message="m", pattern="p", evidence="weak")
    assert early_warning(loop, 1, lambda _: 0)
    assert not early_warning(loop, 1, lambda _: 1)  # the model was told about it once
    assert early_warning(loop, 2, lambda _: 1)
    assert not early_warning(sure, 1, lambda _: 0)
    assert early_warning(weak, 1, lambda _: 5)
    assert not early_warning(weak, 0)  # early_warnings = 0: every loop takes on_loop at once
    assert not early_warning(loop, 0)


def test_early_warnings_do_not_use_up_the_ladder() -> None:
    """A skip ladder answers a streak with its two skips after the early warnings, then kills."""
    steps = [Step("search_docs", {"query": "retry policy"}, "No results found.")] * 9
    played = play(steps, on_loop="skip")
    assert [(d.call_index, d.action) for d in played.detections] == [
        (3, "warn"), (4, "warn"), (5, "skip"), (6, "skip"), (7, "kill")
    ]
    assert [d.kind for d in played.detections][:2] == ["warning", "warning"]


def test_a_trace_without_results_is_judged_no_more_harshly_than_the_live_run(
    tmp_path: Path,
) -> None:
    lines = '{"fn": "search", "args": {"q": "x"}}\n' * 6
    with_results = '{"fn": "search", "args": {"q": "x"}, "result": "r"}\n' * 6
    actions = []
    for text in (lines, with_results):
        trace = tmp_path / "t.jsonl"
        trace.write_text(text, encoding="utf-8")
        [summary] = replay([str(trace)], Config())
        actions.append([(d.call, d.detection.action) for d in summary.detections])
    assert actions[0] == actions[1] == [(3, "warn"), (4, "warn"), (5, "kill")]
