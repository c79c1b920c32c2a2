"""``fuze replay`` reads gzip-compressed traces (``.jsonl.gz``) as it reads plain ones: the same
detections, the same bounds on the decompressed text, and a broken archive reported, never a
traceback. The labelled corpora in ``benchmarks/corpora/`` are stored this way."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fuzeguard import Config
from fuzeguard._private import cli
from fuzeguard._private.cli import common
from fuzeguard._private.reports.replay import Replayer

ROOT = Path(__file__).resolve().parents[2]
STUCK = [{"fn": "web_search", "args": {"query": "q"}, "result": "r", "ts": float(i)} for i in range(5)]


def _text(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _found(out: str) -> list[tuple[int, str, str]]:
    return [(d["call"], d["layer"], d["action"]) for d in map(json.loads, out.splitlines())]


def _plain(tmp_path: Path, lines: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    """What the same trace, uncompressed, gives: the reference for the compressed one."""
    path = tmp_path / "reference.jsonl"
    path.write_bytes(_text(lines))
    summary = Replayer(Config.from_dict({})).replay_file(str(path))
    found = [(d.call, d.detection.layer, d.detection.action) for d in summary.detections]
    assert any(action == "kill" for _, _, action in found)
    return found


def test_a_gzip_trace_replays_with_the_detections_of_the_plain_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain, packed = tmp_path / "run.jsonl", tmp_path / "run.jsonl.gz"
    plain.write_bytes(_text(STUCK))
    packed.write_bytes(gzip.compress(_text(STUCK)))
    assert cli.replay([str(plain)], fmt="json") == 0
    from_plain = _found(capsys.readouterr().out)
    assert cli.replay([str(packed)], fmt="json") == 0
    assert _found(capsys.readouterr().out) == from_plain == _plain(tmp_path, STUCK)


def test_a_directory_stands_for_its_gzip_traces_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jsonl").write_bytes(_text(STUCK))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(_text(STUCK)))
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"not a trace\n"))
    assert cli.replay([str(tmp_path)], fmt="json") == 0
    traces = {Path(d["trace"]).name for d in map(json.loads, capsys.readouterr().out.splitlines())}
    assert traces == {"a.jsonl", "b.jsonl.gz"}


def test_a_gzip_file_is_recognised_by_its_content_whatever_its_name(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"  # compressed, though named as plain text
    path.write_bytes(gzip.compress(_text(STUCK)))
    summary = Replayer(Config.from_dict({})).replay_file(str(path))
    found = [(d.call, d.detection.layer, d.detection.action) for d in summary.detections]
    assert summary.calls == 5 and found == _plain(tmp_path, STUCK)


def test_gzip_on_standard_input_is_decompressed(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "fuzeguard", "replay", "-", "--format", "json"],
                          input=gzip.compress(_text(STUCK)), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _found(done.stdout.decode()) == _plain(tmp_path, STUCK)


def test_the_line_length_bound_applies_to_the_decompressed_text(tmp_path: Path) -> None:
    """A short archive that inflates to one huge line is skipped like the plain huge line."""
    path = tmp_path / "bomb.jsonl.gz"
    huge = {"fn": "t", "args": {"q": 1}, "result": "x" * 100_000}
    path.write_bytes(gzip.compress(_text([huge, *STUCK])))
    assert path.stat().st_size < 2_000
    summary = Replayer(Config.from_dict({}), max_line=60_000).replay_file(str(path))
    assert [(p.line, p.message.split(",")[0]) for p in summary.problems] == [
        (1, "a line of 100")
    ]
    assert "longer than the 60,000" in summary.problems[0].message
    assert "kill" in summary.by_action  # the lines after it still replay


def test_a_truncated_archive_replays_every_line_before_the_break_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = gzip.compress(_text(STUCK * 200))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    assert cli.replay([str(path)], fmt="json") == 0
    captured = capsys.readouterr()
    assert _found(captured.out)[:2] == _plain(tmp_path, STUCK)[:2]
    assert "truncated gzip" in captured.err and "Traceback" not in captured.err


def test_a_corrupt_archive_is_reported_not_raised(tmp_path: Path) -> None:
    whole = bytearray(gzip.compress(_text(STUCK * 50)))
    whole[20:40] = b"\xff" * 20
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bytes(whole))
    summary = Replayer(Config.from_dict({})).replay_file(str(path))
    assert any("compressed trace is corrupt" in p.message for p in summary.problems)


def test_merged_replay_reads_gzip_traces(tmp_path: Path) -> None:
    first, second = tmp_path / "w1.jsonl.gz", tmp_path / "w2.jsonl"
    first.write_bytes(gzip.compress(_text(STUCK[::2])))
    second.write_bytes(_text(STUCK[1::2]))
    summary = Replayer(Config.from_dict({})).replay_merged([str(first), str(second)])
    found = [(d.call, d.detection.layer, d.detection.action) for d in summary.detections]
    assert summary.calls == 5 and found == _plain(tmp_path, STUCK)


@pytest.mark.parametrize("corpus", ["peers", "real", "agentdojo"])
def test_each_labelled_corpus_is_in_the_repository_compressed_and_complete(corpus: str) -> None:
    """Every labelled trace is present as ``NAME.jsonl.gz`` beside truth.json, score.py and a
    README saying where the traces came from; nothing is read from outside the checkout."""
    here = ROOT / "benchmarks" / "corpora" / corpus
    truth = json.loads((here / "truth.json").read_text())
    stored = sorted(p.name for p in (here / "traces").iterdir())
    assert stored == sorted(f"{name}.gz" for name in truth)
    for name in stored[:5]:
        with gzip.open(here / "traces" / name) as trace:
            assert trace.read(1) == b"{"
    assert (here / "score.py").is_file() and "came from" in (here / "README.md").read_text()


def test_the_progress_bar_counts_a_gzip_trace_by_its_uncompressed_size(tmp_path: Path) -> None:
    """The bar counts characters read; a compressed file's own size would fill it early."""
    text = _text(STUCK * 100)
    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress(text))
    assert common._text_size(str(path)) == len(text)
    plain = tmp_path / "big.jsonl"
    plain.write_bytes(text)
    assert common._text_size(str(plain)) == len(text)
