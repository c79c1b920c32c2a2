"""Replay semantics on hand-written traces: unknowns, kills, skips, independence, bad lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fuzeguard import Config
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replayed import TraceSummary
from fuzeguard._private.reports.trace_reading import trace_files


def _write(path: Path, lines: list[dict[str, Any] | str]) -> str:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return str(path)


def _replay(path: str, config: dict[str, Any] | None = None, **kwargs: Any) -> TraceSummary:
    """Replay under ``config``; unless it says otherwise, with the layers these tests are about."""
    config = dict(config or {})
    config["defaults"] = {"layers": ["iterations", "dedup", "limits"], **config.get("defaults", {})}
    return Replayer(Config.from_dict(config), **kwargs).replay_file(path)


def _found(summary: TraceSummary) -> list[tuple[int, str, str]]:
    return [(d.call, d.detection.layer, d.detection.action) for d in summary.detections]


def test_a_trace_with_only_function_names_still_counts_iterations(tmp_path: Path) -> None:
    """`fn` is the only required key; everything else is unknown."""
    path = _write(tmp_path / "t.jsonl", [{"fn": "search"}] * 4)
    summary = _replay(path, {"defaults": {"max_iterations": 3, "on_loop": "warn"}})
    # Four calls with the same (unknown) arguments are also a dedup loop.
    assert _found(summary) == [(3, "dedup", "warn"), (4, "iterations", "warn"),
                               (4, "dedup", "warn")]


def test_unknown_results_count_as_repeats_for_dedup(tmp_path: Path) -> None:
    """Lines without "result" replay as calls whose outcome is unknown (dedup: a repeat)."""
    path = _write(tmp_path / "t.jsonl", [{"fn": "search", "args": {"q": "x"}}] * 4)
    # The replay's handling of unknowns and of a kill is tested here, not the grading: the loop
    # is acted on at its first detection.
    summary = _replay(path, {"defaults": {"early_warnings": 0}})
    assert _found(summary) == [(3, "dedup", "kill")]
    assert summary.not_evaluated == 1


def test_changing_recorded_results_are_progress_not_a_loop(tmp_path: Path) -> None:
    """Without recorded fingerprints, results are fingerprinted as the live guard does."""
    lines = [{"fn": "get_job", "args": {"job": 1}, "result": {"state": s, "request_id": i}}
             for i, s in enumerate(["queued", "running", "done", "done", "done", "done"])]
    path = _write(tmp_path / "t.jsonl", lines)
    # request_id is volatile: the "done" answers are the same result, the third of them a loop
    # (warned: a streak shorter than streak_threshold).
    assert _found(_replay(path)) == [(5, "dedup", "warn"), (6, "dedup", "warn")]


def test_after_a_kill_the_rest_of_the_trace_is_not_evaluated(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{"fn": "tool", "args": {"n": n}} for n in range(10)])
    summary = _replay(path, {"defaults": {"max_calls": 3}})
    assert _found(summary) == [(4, "limits", "kill")]
    assert summary.not_evaluated == 6
    assert [k.call for k in summary.kills] == [4]


def test_a_call_the_replay_skips_is_not_executed_but_counts_as_a_repeat(tmp_path: Path) -> None:
    """The skipped 3rd call stays in the history as a repeat, as live: the 4th is the 4th."""
    path = _write(tmp_path / "t.jsonl", [{"fn": "s", "args": {"q": 1}, "result": "r"}] * 5)
    # The replay of a skip is tested here, not the grading: the ladder starts at the first
    # detection.
    summary = _replay(path, {"defaults": {"on_loop": ["skip", "skip", "kill"], "early_warnings": 0}})
    assert _found(summary) == [(3, "dedup", "skip"), (4, "dedup", "skip"), (5, "dedup", "kill")]
    assert [d.detection.count for d in summary.detections] == [3, 4, 5]


def test_a_call_skipped_live_but_allowed_by_the_replay_config_runs_with_unknown_result(
    tmp_path: Path,
) -> None:
    lines: list[dict[str, Any] | str] = [
        {"fn": "s", "args": {"q": 1}, "result": "r"},
        {"fn": "s", "args": {"q": 1}, "action": "skip"},
        {"fn": "s", "args": {"q": 1}, "result": "r"},
    ]
    path = _write(tmp_path / "t.jsonl", lines)
    summary = _replay(path, {"loop_detection": {"repeat_threshold": 9, "repeat_warn_threshold": 3}})
    assert _found(summary) == [(3, "dedup", "warn")]


def test_several_traces_replay_as_independent_runs(tmp_path: Path) -> None:
    line = {"fn": "tool", "args": {"n": 1}, "result": "same"}
    a = _write(tmp_path / "a.jsonl", [line] * 2)
    b = _write(tmp_path / "b.jsonl", [line] * 2)
    replayer = Replayer(Config())
    assert [len(replayer.replay_file(p).detections) for p in (a, b)] == [0, 0]


def test_runs_sharing_a_trace_file_replay_independently(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [
        {"fn": "tool", "args": {"n": 1}, "result": "x", "run": run} for run in "ababab"
    ]
    summary = _replay(_write(tmp_path / "t.jsonl", lines))
    assert summary.runs == 2
    # Each run's third identical call is its loop (warned first): lines 5 and 6, not line 3.
    assert _found(summary) == [(5, "dedup", "warn"), (6, "dedup", "warn")]


def test_malformed_lines_are_reported_with_file_and_line_and_the_rest_is_replayed(
    tmp_path: Path,
) -> None:
    lines: list[dict[str, Any] | str] = [
        {"fn": "tool"},
        "{not json",
        '["a list"]',
        {"args": {"n": 1}},
        {"fn": "tool", "ts": "late"},
        {"fn": "tool", "args_fp": "zz"},
        {"fn": "tool"},
    ]
    path = _write(tmp_path / "t.jsonl", lines)
    config = {"defaults": {"max_iterations": 2, "on_loop": "warn", "layers": ["iterations"]}}
    summary = _replay(path, config)
    where = [(p.trace, p.line) for p in summary.problems]
    assert where == [(path, 2), (path, 3), (path, 4), (path, 5), (path, 6)]
    assert "not valid JSON" in summary.problems[0].message
    assert '"fn"' in summary.problems[2].message
    assert str(summary.problems[3]).startswith(f"{path}:5: ")
    # Lines 1, 5 and 7 were replayed (5 with an unknown ts): the third tool call is line 7.
    assert _found(summary) == [(7, "iterations", "warn")]


def test_recorded_timestamps_drive_max_duration(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [{"fn": "crawl", "args": {"n": n}, "ts": n * 10.0}
                                         for n in range(6)]
    summary = _replay(_write(tmp_path / "t.jsonl", lines), {"defaults": {"max_duration": "35s"}})
    assert _found(summary) == [(5, "limits", "kill")]
    assert summary.detections[0].detection.threshold == 35.0


def test_recorded_costs_drive_max_cost(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [{"fn": "llm", "args": {"n": n}, "cost": 1.5}
                                         for n in range(5)]
    summary = _replay(_write(tmp_path / "t.jsonl", lines), {"defaults": {"max_cost": 4}})
    assert _found(summary) == [(4, "limits", "kill")]


def test_recorded_errors_count_toward_error_limits(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [{"fn": "f", "args": {"n": n}, "error": "TimeoutError: slow"}
                                         for n in range(4)]
    summary = _replay(_write(tmp_path / "t.jsonl", lines),
                      {"defaults": {"max_consecutive_errors": 2}})
    # The third failure in a row, before dedup's 4th attempt failing the same way.
    assert _found(summary) == [(3, "limits", "kill")]


def test_function_tables_apply_by_function_name_as_live(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [{"fn": name, "args": {"n": n}}
                                         for n in range(4) for name in ("poll", "search")]
    config = {"defaults": {"max_iterations": 3},
              "functions": {"poll": {"max_iterations": 100}}}
    summary = _replay(_write(tmp_path / "t.jsonl", lines), config)
    assert [(d.detection.fn, d.detection.layer) for d in summary.detections] == [
        ("search", "iterations")
    ]


def test_recorded_guard_settings_win_over_the_config_unless_ignored(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [
        {"fn": "tool", "args": {"n": 0}, "guard": {"max_iterations": 2, "on_loop": ["warn"]}},
        {"fn": "tool", "args": {"n": 1}},
        {"fn": "tool", "args": {"n": 2}},
    ]
    path = _write(tmp_path / "t.jsonl", lines)
    assert _found(_replay(path)) == [(3, "iterations", "warn")]
    assert _found(_replay(path, use_code_settings=False)) == []


def test_a_reset_line_clears_the_run_as_run_reset_did(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = [{"fn": "t", "args": {"n": n}} for n in range(3)]
    lines += [{"fn": "t", "args": {"n": 3}, "reset": 1}, {"fn": "t", "args": {"n": 4}}]
    summary = _replay(_write(tmp_path / "t.jsonl", lines), {"defaults": {"max_iterations": 3}})
    assert _found(summary) == []


def test_blank_lines_are_ignored_and_not_counted_as_calls(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"fn": "a"}\n\n{"fn": "a"}\n   \n{"fn": "a"}\n')
    config = {"defaults": {"max_iterations": 2, "on_loop": "warn", "layers": ["iterations"]}}
    summary = _replay(str(path), config)
    assert summary.calls == 3 and summary.problems == []
    assert [(d.call, d.line) for d in summary.detections] == [(3, 5)]


def test_a_directory_stands_for_its_jsonl_files_in_name_order(tmp_path: Path) -> None:
    for name in ("b.jsonl", "a.jsonl", "notes.txt"):
        (tmp_path / name).write_text("")
    assert list(trace_files([str(tmp_path)])) == [
        str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    ]


@pytest.mark.parametrize(
    "result", ["plain text", {"rows": [1, 2], "id": 7}, [1, "two", None], (1, b"x")]
)
def test_results_are_fingerprinted_exactly_as_the_live_guard_did(
    tmp_path: Path, result: Any
) -> None:
    """A line without fingerprints gets the ones the live guard computed (before they were keyed
    for writing): three such lines are the same result three times for dedup."""
    import fuzeguard
    from fuzeguard import guard
    from fuzeguard._private.meaning.records import Call
    from fuzeguard._private.meaning.values import decode_value

    @guard
    def tool(n: int) -> Any:
        return result

    trace = tmp_path / "live.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)) as run:
        tool(1)
    (line,) = [json.loads(x) for x in trace.read_text().splitlines()]
    live = run.history[-1].result_fp
    assert live is not None and line["result_fp"] == run.public_fp(live).hex()
    plan = tool.guard.plan(run.config)  # type: ignore[attr-defined]
    replayed, _, _ = plan.judge_result(decode_value(line["result"]), Call("tool", 1, b"", {}))
    assert replayed == live
    stripped = {k: v for k, v in line.items() if k not in ("result_fp", "args_fp", "run", "run_info")}
    path = _write(tmp_path / "stripped.jsonl", [stripped] * 3)
    assert _found(_replay(path)) == [(3, "dedup", "warn")]  # warned: a streak shorter than five
