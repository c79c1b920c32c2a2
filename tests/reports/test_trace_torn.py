"""A killed process never costs a whole trace line (SPEC §8).

From an adversarial review: one SIGKILL in six left a torn 4 MB line, onto which the next process
appended its ``run_info`` line, losing both. Each line is one ``write()`` to a file opened with
``O_APPEND``; a writer that finds the file ending inside a line starts on a fresh one, and replay
reports a fragment and reads every whole line after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import fuzeguard
from fuzeguard import Config
from fuzeguard._private.reports.replay import Replayer

FRAGMENT = '{"fn":"w","args":{"i":"' + "x" * 4000  # what a writer killed mid-line leaves


@fuzeguard.guard(name="w", layers=["limits"])
def w(i: int) -> int:
    return i


def test_a_writer_appending_after_a_torn_line_starts_on_a_fresh_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(FRAGMENT)
    with fuzeguard.run("next", trace=str(trace)):
        w(1)
        w(2)
    lines = trace.read_text().split("\n")
    assert lines[0] == FRAGMENT and lines[-1] == ""
    written = [json.loads(line) for line in lines[1:-1]]
    assert [(x["args"], "run_info" in x) for x in written] == [({"i": 1}, True), ({"i": 2}, False)]


def test_a_writer_appending_to_a_whole_trace_adds_no_blank_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    for run in ("first", "second"):
        with fuzeguard.run(run, trace=str(trace)):
            w(1)
    assert [bool(line) for line in trace.read_text().split("\n")] == [True, True, False]


def test_replay_after_a_torn_line_recovers_every_whole_line(tmp_path: Path) -> None:
    """The fragment of the killed run is reported once; the next run replays whole."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(FRAGMENT)
    with fuzeguard.run("next", trace=str(trace), max_calls=2):
        w(0)
        w(1)
        with pytest.raises(fuzeguard.LoopDetected):
            w(2)
    summary = Replayer(Config()).replay_file(str(trace))
    assert [p.line for p in summary.problems] == [1]
    assert [(d.call, d.detection.layer) for d in summary.detections] == [(4, "limits")]


def test_replay_recovers_a_line_glued_to_a_fragment_by_an_older_writer(tmp_path: Path) -> None:
    """Traces written before writers started on a fresh line hold the fragment and the next
    process's first line (its run_info) on one line: both runs' whole lines are replayed."""
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run("next", trace=str(trace), max_calls=1):
        w(1)
        with pytest.raises(fuzeguard.LoopDetected):
            w(2)
    trace.write_text(FRAGMENT + trace.read_text())
    summary = Replayer(Config()).replay_file(str(trace))
    assert [p.line for p in summary.problems] == [1]
    assert "a torn line" in summary.problems[0].message
    assert summary.runs == 1 and [d.detection.layer for d in summary.detections] == ["limits"]


def test_each_line_is_written_whole_with_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[bytes] = []
    real_write = os.write

    def spy(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        monkeypatch.setattr(os, "write", spy)
        w(1)
        w(2)
        monkeypatch.undo()
    assert len(writes) == 2 and all(data.endswith(b"\n") and data.count(b"\n") == 1
                                    for data in writes)
    assert trace.read_bytes() == b"".join(writes)


CHILD = r"""
import sys, threading, fuzeguard
@fuzeguard.guard(name="w", layers=["limits"], trace_max_result_bytes=8_000_000)
def w(i, size): return "x" * size
def work(k):
    i = 0
    while True:
        i += 1; w(f"{k}-{i}", 2_000_000 if i % 3 == 0 else 100)
with fuzeguard.run("heavy", trace=sys.argv[1]) as r:
    ts = [threading.Thread(target=r.bind(work), args=(k,), daemon=True) for k in range(4)]
    [t.start() for t in ts]
    print("go", flush=True)
    [t.join() for t in ts]
"""


def test_processes_killed_while_writing_big_lines_lose_no_whole_line(tmp_path: Path) -> None:
    """The reproduction: SIGKILL writers of 2 MB lines, appending to one file, several times."""
    trace = tmp_path / "t.jsonl"
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(trace)], stdout=subprocess.PIPE)
        assert child.stdout is not None and child.stdout.readline() == b"go\n"
        # Kill while lines are being written: wait until the file has grown past a big line.
        start = trace.stat().st_size if trace.exists() else 0
        while not trace.exists() or trace.stat().st_size < start + 4_000_000:
            pass
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    raw = trace.read_text()
    runs_started = raw.count('"run_info":')
    summary = Replayer(Config()).replay_file(str(trace))
    # Every problem is a torn fragment; every run's first line (its run_info) was recovered.
    assert all("torn line" in p.message or "not valid JSON" in p.message for p in summary.problems)
    assert summary.runs == runs_started == 3
