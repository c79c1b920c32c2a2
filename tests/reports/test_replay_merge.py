"""``fuze replay --merge``: several traces of one shared run replayed as one stream, by time."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fuzeguard._private.cli import main, replay


def _trace(path: Path, moments: list[float], worker: str) -> None:
    lines = [{"fn": "ask", "args": {"q": "same"}, "result": "no answer to that",
              "run": "shared", "worker": worker, "ts": t - 100.0, "at": t} for t in moments]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_merged_traces_are_replayed_as_one_run_in_time_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _trace(tmp_path / "a.jsonl", [100.0, 102.0, 104.0], "a")
    _trace(tmp_path / "b.jsonl", [101.0, 103.0], "b")
    status = main(["replay", "--merge", "--format", "json", str(tmp_path / "a.jsonl"),
                   str(tmp_path / "b.jsonl")])
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    # One run: warned at its 3rd and 4th identical call, killed at the 5th.
    assert [(f["call"], f["action"]) for f in found] == [(3, "warn"), (4, "warn"), (5, "kill")]


def test_the_same_traces_replayed_one_by_one_show_no_loop(tmp_path: Path) -> None:
    _trace(tmp_path / "a.jsonl", [100.0, 102.0], "a")
    _trace(tmp_path / "b.jsonl", [101.0, 103.0], "b")
    out = io.StringIO()
    replay([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], fmt="json", out=out,
           err=io.StringIO())
    assert out.getvalue() == ""


HOSTILE = {
    "deep": '{"fn":"ask","at":' + "[" * 100_000 + "]" * 100_000 + "}",
    "bigint": '{"fn":"ask","args":{"q":"same"},"result":"no answer to that","run":"shared",'
              '"at":' + "9" * 400 + "}",
    "not_json": '{"fn":"ask",',
}


def test_a_hostile_line_in_a_merged_replay_is_reported_by_file_and_line_and_the_rest_replayed(
    tmp_path: Path,
) -> None:
    """Second review d09: the merged reader json.loads()ed each line unbounded and float()ed
    "at" unchecked, so one line ended the whole merged replay with a traceback."""
    _trace(tmp_path / "a.jsonl", [100.0, 102.0], "a")
    hostile = tmp_path / "b.jsonl"
    hostile.write_text("".join(line + "\n" for line in HOSTILE.values()))
    out, err = io.StringIO(), io.StringIO()
    status = replay([str(tmp_path / "a.jsonl"), str(hostile)], merge=True, fmt="json", out=out,
                    err=err, progress=False)
    assert status == 0
    problems = err.getvalue().splitlines()
    assert [p.split(": ", 2)[1] for p in problems] == [f"{hostile}:1", f"{hostile}:3"]
    assert "nested too deeply" in problems[0] and "not valid JSON" in problems[1]
    # The line with a 400-digit "at" has no time: it sorts first with the other bad lines and is
    # replayed; the good lines are calls 4 and 5, the third identical call is a loop (warned).
    assert [(f["call"], f["action"]) for f in map(json.loads, out.getvalue().splitlines())] == [
        (5, "warn")
    ]


def test_endless_input_in_a_merged_replay_stops_that_input_only(tmp_path: Path) -> None:
    from fuzeguard import Config
    from fuzeguard._private.reports.replay import Replayer

    _trace(tmp_path / "a.jsonl", [100.0, 101.0, 102.0, 103.0], "a")
    endless = tmp_path / "endless.jsonl"
    endless.write_text("\0" * 5000)
    summary = Replayer(Config(), max_line=1000).replay_merged(
        [str(endless), str(tmp_path / "a.jsonl")]
    )
    assert [(p.trace, p.line) for p in summary.problems] == [(str(endless), 1)]
    assert "no end of line in 2,001 characters" in summary.problems[0].message
    # The endless line is call 1; the trace's 3rd and 4th identical calls are warned.
    assert [(d.call, d.detection.action) for d in summary.detections] == [(4, "warn"), (5, "warn")]
