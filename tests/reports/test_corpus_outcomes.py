"""The scorers of recorded runs (``benchmarks/corpora/outcomes.py``) judge by outcomes: a resolved
run killed is lost work whatever its label, unless the kill stopped an identical write sent again;
a loop is flagged by its ``loop_at``; a stuck loop (in a run that failed) is stopped by
``loop_at + 5``. Issue 34: the earlier scorer counted as harm only kills of resolved runs without a
label, so a resolved run with a labelled loop killed by the guard counted for nothing. Scored here
on a hand-made corpus with the detections given, so that each rule is seen alone; the trade-off
table's settings are checked against the configuration they claim."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fuzeguard import Config

CORPORA = Path(__file__).resolve().parents[2] / "benchmarks" / "corpora"
PAY = {"fn": "send_money", "args": {"to": "GB29", "amount": 100}, "result": "sent"}
READ = {"fn": "get_balance", "args": {}, "result": "1000"}


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(CORPORA))
    import outcomes

    yield outcomes


@pytest.fixture
def tradeoff(outcomes: ModuleType) -> Iterator[ModuleType]:
    import tradeoff

    yield tradeoff


def _run(outcome: str, calls: list[dict[str, object]], loop_at: int | None = None,
         limit: bool = False) -> dict[str, object]:
    return {"outcome": outcome, "n_calls": len(calls), "loop_at": loop_at, "limit_exhausted": limit,
            "why": "hand-made", "calls": calls}


def _corpus(tmp_path: Path, runs: dict[str, dict[str, object]], writes: list[str] | None) -> Path:
    (tmp_path / "traces").mkdir()
    truth = {}
    for name, run in runs.items():
        calls = run.pop("calls")
        lines = "".join(json.dumps(c) + "\n" for c in calls)  # type: ignore[attr-defined]
        (tmp_path / "traces" / f"{name}.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
        truth[f"{name}.jsonl"] = run
    (tmp_path / "truth.json").write_text(json.dumps(truth))
    if writes is not None:
        (tmp_path / "writes.json").write_text(json.dumps(writes))
    return tmp_path


def _dets(**found: list[tuple[str, int]]) -> dict[str, list[dict[str, object]]]:
    """Detections by run: each run's (action, call) in order."""
    return {f"{name}.jsonl": [{"action": action, "call": call, "layer": "dedup"} for action, call in pairs]
            for name, pairs in found.items()}


RUNS = {
    "clean_killed": _run("resolved", [READ] * 5),
    "labelled_killed": _run("resolved", [READ] * 6, loop_at=3),
    "paid_again": _run("resolved", [PAY, READ, PAY, READ]),
    "killed_at_the_end": _run("resolved", [READ] * 4),
    "stuck_stopped": _run("unresolved", [READ] * 12, loop_at=3, limit=True),
    "stuck_late": _run("unresolved", [READ] * 12, loop_at=3),
    "stuck_missed": _run("unresolved", [READ] * 6, loop_at=4),
}
DETECTIONS = {
    "clean_killed": [("kill", 3)], "labelled_killed": [("warn", 3), ("kill", 4)],
    "paid_again": [("kill", 3)], "killed_at_the_end": [("kill", 4)],
    "stuck_stopped": [("warn", 3), ("kill", 8)], "stuck_late": [("warn", 2), ("kill", 9)],
    "stuck_missed": [("warn", 5)],
}


def test_a_resolved_run_killed_is_lost_work_whatever_its_label(tmp_path: Path,
                                                                outcomes: ModuleType) -> None:
    corpus = outcomes.Corpus(_corpus(tmp_path, json.loads(json.dumps(RUNS)), ["send_money"]),
                             _dets(**DETECTIONS))
    o = corpus.outcomes()
    assert sorted(o.lost) == ["clean_killed.jsonl", "labelled_killed.jsonl"]
    assert o.dup == ["paid_again.jsonl"]  # the payment sent again: damage prevented, counted apart
    assert "killed_at_the_end.jsonl" not in o.lost  # a kill at the last call loses nothing


def test_stuck_loops_are_stopped_by_loop_at_plus_five_and_calls_saved_on_failed_runs(
        tmp_path: Path, outcomes: ModuleType) -> None:
    corpus = outcomes.Corpus(_corpus(tmp_path, json.loads(json.dumps(RUNS)), ["send_money"]),
                             _dets(**DETECTIONS))
    o = corpus.outcomes()
    assert o.stuck == ["stuck_late.jsonl", "stuck_missed.jsonl", "stuck_stopped.jsonl"]
    assert o.stopped == ["stuck_stopped.jsonl"] and o.never == ["stuck_missed.jsonl"]
    assert o.flagged == ["labelled_killed.jsonl", "stuck_late.jsonl", "stuck_stopped.jsonl"]  # not 5 for 4
    assert o.saved == (12 - 9 + 1) + (12 - 8 + 1)  # resolved runs' kills are not savings
    assert o.summary() == (
        "resolved runs killed 2/4 (+1 stopped at a duplicate write); warned 3/3; loops flagged by "
        "loop_at 3/4; stuck loops stopped by loop_at+5 1/3 (never 1); calls saved on unresolved runs "
        "9; cost-limit runs stopped 1/1"
    )
    assert not o.perfect()
    assert "resolved run killed (labelled loop at 3) labelled_killed.jsonl at call 4 of 6 by dedup" in (
        corpus.detail(o))


def test_without_writes_json_a_repeated_write_killed_is_lost_work(tmp_path: Path,
                                                                   outcomes: ModuleType) -> None:
    corpus = outcomes.Corpus(_corpus(tmp_path, json.loads(json.dumps(RUNS)), None), _dets(**DETECTIONS))
    o = corpus.outcomes()
    assert "paid_again.jsonl" in o.lost and not o.dup
    assert o.summary().startswith("resolved runs killed 3/4; warned")


def test_a_write_killed_the_first_time_it_is_sent_is_lost_work(tmp_path: Path,
                                                                outcomes: ModuleType) -> None:
    runs = {"new_payment": _run("resolved", [READ, PAY, READ]),
            "failed_then_paid": _run("resolved", [{**PAY, "error": "ValueError: no funds"}, READ, PAY, READ])}
    corpus = outcomes.Corpus(_corpus(tmp_path, runs, ["send_money"]),
                             _dets(new_payment=[("kill", 2)], failed_then_paid=[("kill", 3)]))
    o = corpus.outcomes()
    assert sorted(o.lost) == ["failed_then_paid.jsonl", "new_payment.jsonl"] and not o.dup


@pytest.mark.parametrize("args", [["--config"], ["--config", "no-such.toml"]])
def test_a_scorer_given_no_config_file_says_so_and_exits_2(args: list[str]) -> None:
    done = subprocess.run([sys.executable, str(CORPORA / "real" / "score.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--config needs the path of a fuze.toml" in done.stdout


def test_each_trade_off_setting_is_the_configuration_its_row_names(tradeoff: ModuleType,
                                                                    tmp_path: Path) -> None:
    defaults = tradeoff.defaults()
    rows = tradeoff.settings()
    for knob, values in tradeoff.KNOBS:
        varied = [s for k, s in rows if k == knob]
        assert varied.count(()) == 1  # the defaults' row, once per knob
        tried = sorted(dict(s).get(knob, defaults[knob]) for s in varied)
        assert tried == sorted({*values, defaults[knob]})
    for _, setting in rows:
        path = tmp_path / "fuze.toml"
        path.write_text(tradeoff.toml(setting))
        got, built_in = Config.load(path).settings_for(), Config.from_dict({}).settings_for()
        for key, value in setting:
            want = tuple(value) if isinstance(value, list) else value
            assert got[key] in (want, (want,)) and got[key] != built_in[key], (key, got[key])


def test_kept_trade_off_figures_are_used_only_while_nothing_they_depend_on_changed(
        tradeoff: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[object] = []
    monkeypatch.setattr(tradeoff, "KEPT", tmp_path / "tradeoff.json")
    monkeypatch.setattr(tradeoff, "measure", lambda s: measured.append(s) or {"mark": {"n": len(measured)}})
    monkeypatch.setattr(tradeoff, "digest", lambda: "before")
    default = {"mark": {"n": 0}}
    with pytest.raises(tradeoff.Stale, match="holds no figures of"):
        tradeoff.figures(default, True, lambda _: None)  # a check measures nothing
    assert not measured and not (tmp_path / "tradeoff.json").exists()
    first = tradeoff.figures(default, False, lambda _: None)
    others = sum(1 for _, s in tradeoff.settings() if s)
    assert len(measured) == others and [f for _, s, f in first if not s] == [default] * len(tradeoff.KNOBS)
    assert tradeoff.figures(default, True, lambda _: None) == first  # kept, and the check passes
    monkeypatch.setattr(tradeoff, "digest", lambda: "after")
    with pytest.raises(tradeoff.Stale):
        tradeoff.figures(default, True, lambda _: None)
    tradeoff.figures(default, False, lambda _: None)
    assert len(measured) == 2 * others  # measured again
    assert json.loads((tmp_path / "tradeoff.json").read_text())["digest"] == "after"
