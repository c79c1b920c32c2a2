"""The ``fuze`` command: check, replay (text and JSON), exit statuses, help, ``python -m``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fuzeguard._private.cli import main

JSON_KEYS = ["trace", "call", "fn", "layer", "action", "count", "threshold", "message"]


def _trace(path: Path, lines: list[dict[str, Any] | str]) -> str:
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    )
    return str(path)


def _stuck(path: Path) -> str:
    """Seven identical searches with the same result: dedup warns at 3 and 4, kills at 5."""
    return _trace(path, [{"fn": "web_search", "args": {"query": "q"}, "result": "r"}] * 7)


def _config(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_replay_json_prints_exactly_one_documented_object_per_detection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _stuck(tmp_path / "stuck.jsonl")
    assert main(["replay", trace, "--format", "json"]) == 0
    out = capsys.readouterr().out
    objects = [json.loads(line) for line in out.splitlines()]
    assert [list(o) for o in objects] == [JSON_KEYS] * 3
    warn, _, kill = objects
    assert warn == {
        "trace": trace, "call": 3, "fn": "web_search", "layer": "dedup", "action": "warn",
        "count": 3, "threshold": 2, "message": warn["message"],
    }
    assert kill["call"] == 5 and kill["action"] == "kill" and kill["count"] == 5
    assert isinstance(kill["message"], str) and "web_search" in kill["message"]
    assert out.endswith("\n") and out.count("\n") == 3


def test_replay_json_uses_null_for_a_detection_without_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "t.jsonl", [{"fn": "llm", "args": {"n": n}, "cost": 2.0}
                                          for n in range(4)])
    config = _config(tmp_path / "fuze.toml", "[defaults]\nmax_cost = 3\n")
    assert main(["replay", trace, "--config", config, "--format", "json"]) == 0
    (found,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert found["count"] is None and found["threshold"] == 3.0 and found["action"] == "kill"


def test_replay_names_each_trace_as_given_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _stuck(tmp_path / "a.jsonl")
    _stuck(tmp_path / "b.jsonl")
    assert main(["replay", "a.jsonl", "./b.jsonl", "--format", "json"]) == 0
    traces = [json.loads(line)["trace"] for line in capsys.readouterr().out.splitlines()]
    assert traces == ["a.jsonl"] * 3 + ["./b.jsonl"] * 3  # two warnings and the kill each


def test_fail_on_detect_exits_1_only_when_something_fired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = _trace(tmp_path / "quiet.jsonl", [{"fn": "f", "args": {"n": n}} for n in range(3)])
    stuck = _stuck(tmp_path / "stuck.jsonl")
    assert main(["replay", quiet, "--fail-on-detect"]) == 0
    assert main(["replay", stuck, "--fail-on-detect"]) == 1
    assert main(["replay", stuck]) == 0


def test_replay_with_a_bad_config_exits_2_with_the_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _stuck(tmp_path / "t.jsonl")
    config = _config(tmp_path / "fuze.toml", "[loop_detection]\nwindow = 3\n")
    assert main(["replay", trace, "--config", config, "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{config}:2:" in captured.err and "did you mean `window_size`" in captured.err


def test_replay_of_a_missing_trace_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such trace file" in capsys.readouterr().err


def test_replay_without_traces_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay"]) == 2
    assert "TRACE" in capsys.readouterr().err


def test_malformed_lines_go_to_stderr_with_file_and_line_and_stdout_stays_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = {"fn": "web_search", "args": {"query": "q"}, "result": "r"}
    trace = _trace(tmp_path / "t.jsonl", [line, line, "{oops", line, line, line])
    assert main(["replay", trace, "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert f"{trace}:3: not valid JSON" in captured.err
    found = [json.loads(x) for x in captured.out.splitlines()]
    assert [(f["call"], f["action"]) for f in found] == [(4, "warn"), (5, "warn"), (6, "kill")]


def test_replay_text_shows_a_table_per_trace_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _stuck(tmp_path / "stuck.jsonl")
    quiet = _trace(tmp_path / "quiet.jsonl", [{"fn": "f", "args": {"n": 1}}])
    assert main(["replay", trace, quiet]) == 0
    out = capsys.readouterr().out
    assert f"{trace}: 7 calls, 1 run, 3 detections" in out
    assert "call  fn" in out and "web_search  dedup  warn" in out and "web_search  dedup  kill" in out
    assert "run killed at call 5 by dedup" in out
    assert "2 later calls not evaluated" in out
    assert f"{quiet}: 1 call, 1 run, 0 detections" in out
    assert "Replayed 2 traces: 8 calls in 2 runs" in out
    assert "3 detections (by layer: dedup 3; by action: warn 2, kill 1); 1 run killed." in out


def test_replay_under_a_candidate_config_shows_what_it_would_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _stuck(tmp_path / "stuck.jsonl")
    loose = _config(tmp_path / "loose.toml", "[loop_detection]\nrepeat_threshold = 10\n"
                    "repeat_warn_threshold = 0\n")
    assert main(["replay", trace, "--config", loose, "--format", "json"]) == 0
    assert capsys.readouterr().out == ""


def test_replay_env_layers_the_environment_file_over_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "t.jsonl", [{"fn": "f", "args": {"n": n}} for n in range(6)])
    base = _config(tmp_path / "fuze.toml", "[defaults]\nmax_iterations = 100\n")
    _config(tmp_path / "fuze.production.toml", "[defaults]\nmax_iterations = 4\n")
    assert main(["replay", trace, "--config", base, "--format", "json"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["replay", trace, "--config", base, "--env", "production", "--format", "json"]) == 0
    (found,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert (found["layer"], found["call"]) == ("iterations", 5)


def test_check_prints_each_effective_value_with_where_it_comes_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _config(tmp_path / "fuze.toml", "[defaults]\nmax_iterations = 40\n"
                   "[loop_detection]\nwindow_size = 12\n"
                   "[functions.check_status]\non_loop = \"warn\"\nmax_iterations = 200\n")
    env = _config(tmp_path / "fuze.production.toml", "[loop_detection]\nwindow_size = 20\n")
    assert main(["check", base, "--env", "production"]) == 0
    out = capsys.readouterr().out
    top = out.split("[functions.")[0]
    lines = {line.split("=")[0].strip(): line for line in top.splitlines() if " = " in line}
    assert "= 40" in lines["max_iterations"] and f"# base file {base}" in lines["max_iterations"]
    assert "= 20" in lines["window_size"] and f"# env file {env}" in lines["window_size"]
    assert "# default" in lines["repeat_threshold"]
    assert "[functions.check_status]" in out
    section = out.partition("\n[functions.check_status]\n")[2]
    assert 'on_loop        = ["warn"]' in section
    assert f"# [functions.check_status] in base file {base}" in section


def test_check_with_a_bad_file_exits_2_with_the_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _config(tmp_path / "fuze.toml", "[defaults]\nmax_iterations = \"lots\"\n")
    assert main(["check", bad]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err and "max_iterations" in err and "whole number" in err


def test_check_without_a_config_file_reports_the_built_in_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "built-in defaults" in out and "max_iterations" in out


@pytest.mark.parametrize("command", [[], ["demo"], ["check"], ["replay"]])
def test_help_is_complete_and_shows_an_example(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "example" in out and "fuze " in out
    if command == ["replay"]:
        for option in ("--config", "--env", "--format", "--fail-on-detect"):
            assert option in out


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    import fuzeguard

    assert main(["--version"]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"fuzeguard {fuzeguard.__version__}\n" and not captured.err
    assert fuzeguard.__version__[0].isdigit()


def test_fuze_without_a_command_prints_help_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 2
    assert "commands" in capsys.readouterr().out


def test_python_dash_m_fuzeguard_behaves_like_fuze(tmp_path: Path) -> None:
    trace = _stuck(tmp_path / "t.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "fuzeguard", "replay", trace, "--format", "json"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )
    assert done.returncode == 0
    assert [json.loads(x)["layer"] for x in done.stdout.splitlines()] == ["dedup"] * 3


def test_python_dash_m_fuzeguard_without_arguments_runs_the_demo(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "fuzeguard"], capture_output=True, text=True,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0
    assert "fuzeguard demo" in done.stdout


def test_replay_of_a_directory_covers_every_trace_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    _stuck(folder / "one.jsonl")
    _stuck(folder / "two.jsonl")
    assert main(["replay", str(folder), "--format", "json"]) == 0
    traces = {json.loads(x)["trace"] for x in capsys.readouterr().out.splitlines()}
    assert traces == {str(folder / "one.jsonl"), str(folder / "two.jsonl")}


def test_the_progress_bar_goes_to_stderr_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _stuck(tmp_path / "t.jsonl")
    assert main(["replay", trace, "--format", "json", "--progress"]) == 0
    captured = capsys.readouterr()
    assert "[" in captured.err and "%" in captured.err
    assert all(json.loads(x) for x in captured.out.splitlines())


def test_text_tables_stop_at_fifty_rows_and_count_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "t.jsonl", [{"fn": "f", "args": {"n": n}} for n in range(62)])
    config = _config(tmp_path / "fuze.toml",
                     '[defaults]\nmax_iterations = 2\non_loop = "warn"\nlayers = ["iterations"]\n')
    assert main(["replay", trace, "--config", config]) == 0
    out = capsys.readouterr().out
    assert f"{trace}: 62 calls, 1 run, 60 detections" in out
    assert "... and 10 more (--format json lists them all)" in out
    assert "60 detections (by layer: iterations 60; by action: warn 60)" in out


def test_replay_into_a_closed_pipe_ends_quietly_with_status_zero() -> None:
    """``fuze replay ... | head -1``: the reader leaving is not an unreadable trace."""
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    traces = Path(__file__).resolve().parents[2] / "examples" / "traces"
    command = (f"{shlex.quote(sys.executable)} -m fuzeguard replay {shlex.quote(str(traces))} "
               "--format json | head -1 > /dev/null; echo ${PIPESTATUS[0]} >&2")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip() == "0"


def test_check_says_which_iteration_cap_is_in_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue: a max_iterations the user writes is absolute; only the built-in one adapts, and
    `fuze check` must say which is in force."""
    base = _config(tmp_path / "fuze.toml", "[functions.bash]\nmax_iterations = 40\n")
    assert main(["check", base]) == 0
    out = capsys.readouterr().out
    top, _, bash = out.partition("\n[functions.bash]\n")
    (default_line,) = [x for x in top.splitlines() if x.startswith("max_iterations")]
    assert "not set: 25, adaptive" in default_line
    (bash_line,) = [x for x in bash.splitlines() if x.startswith("max_iterations")]
    assert "= 40" in bash_line


@pytest.mark.parametrize("content", [
    '[defaults]\nmax_iterations = 25\n',                    # a TOML file
    '{"name": "web_search", "query": "q"}\n' * 3,           # JSON objects without "fn"
    '["web_search", "q"]\n',                                # JSON, not objects
])
@pytest.mark.parametrize("fail_on_detect", [False, True])
def test_replay_of_a_file_that_is_not_a_trace_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, fail_on_detect: bool
) -> None:
    path = tmp_path / "input.txt"
    path.write_text(content)
    argv = ["replay", str(path), *(["--fail-on-detect"] if fail_on_detect else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{path} is not a trace: none of its" in err and 'with "fn"' in err


def test_replay_of_an_empty_directory_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    assert main(["replay", str(tmp_path), "--fail-on-detect"]) == 2
    assert f"no traces in directory {tmp_path}" in capsys.readouterr().err


def test_a_not_a_trace_file_beside_real_traces_still_exits_2_after_replaying_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = _stuck(tmp_path / "stuck.jsonl")
    other = _config(tmp_path / "settings.toml", "[defaults]\n")
    assert main(["replay", stuck, other, "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() and "is not a trace" in captured.err


def test_a_trace_with_some_bad_lines_is_still_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path / "t.jsonl", ["not json", {"fn": "t", "args": {}}])
    assert main(["replay", trace]) == 0
    assert "is not a trace" not in capsys.readouterr().err
