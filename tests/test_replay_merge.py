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
    _trace(tmp_path / "a.jsonl", [100.0, 102.0], "a")
    _trace(tmp_path / "b.jsonl", [101.0, 103.0], "b")
    status = main(["replay", "--merge", "--format", "json", str(tmp_path / "a.jsonl"),
                   str(tmp_path / "b.jsonl")])
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert [(f["call"], f["action"]) for f in found] == [(3, "kill")]


def test_the_same_traces_replayed_one_by_one_show_no_loop(tmp_path: Path) -> None:
    _trace(tmp_path / "a.jsonl", [100.0, 102.0], "a")
    _trace(tmp_path / "b.jsonl", [101.0, 103.0], "b")
    out = io.StringIO()
    replay([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], fmt="json", out=out,
           err=io.StringIO())
    assert out.getvalue() == ""
