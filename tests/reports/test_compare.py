"""``fuze replay --compare A.toml B.toml TRACES``: what each config does to each trace, and the
difference, on the example traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuzeguard._private.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
         *args: str) -> tuple[int, str, str]:
    monkeypatch.chdir(ROOT)
    status = main(["replay", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_compare_shows_each_trace_under_both_configs_and_the_difference(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out, _ = _run(capsys, monkeypatch, "examples/traces/", "--compare",
                          "examples/traces/live.toml", "examples/traces/candidate.toml")
    assert status == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("examples/")}
    assert set(rows) == {f"examples/traces/{t}.jsonl"
                         for t in ("ping_pong", "polling", "spending", "stuck_search")}
    spending = rows["examples/traces/spending.jsonl"]
    assert "killed at call 10 by limits" in spending
    assert "killed at call 9 by cost_velocity" in spending
    assert spending.endswith("B stops it 1 call earlier")
    assert rows["examples/traces/polling.jsonl"].split()[1:] == [
        "nothing", "fires", "nothing", "fires", "same"]
    assert "1 of 4 traces differ." in out


def test_compare_agrees_with_replaying_under_each_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, out, _ = _run(capsys, monkeypatch, "examples/traces/", "--compare",
                     "examples/traces/live.toml", "fuze.toml", "--format", "json")
    found = {o["trace"]: o for o in map(json.loads, out.splitlines())}
    for side, config in (("a", "examples/traces/live.toml"), ("b", "fuze.toml")):
        _, alone, _ = _run(capsys, monkeypatch, "examples/traces/", "--config", config,
                           "--format", "json")
        kills: dict[str, int] = {}
        for item in map(json.loads, alone.splitlines()):
            if item["action"] == "kill":
                kills.setdefault(item["trace"], item["call"])
        for trace, result in found.items():
            first = result[side]["first_kill"]
            assert (first["call"] if first else None) == kills.get(trace)
    assert found["examples/traces/stuck_search.jsonl"]["difference"] == "B stops it 2 calls earlier"


@pytest.mark.parametrize(
    "extra", [["--config", "fuze.toml"], ["--fail-on-detect"], ["--merge"]]
)
def test_compare_refuses_options_it_would_ignore(
    extra: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, _, err = _run(capsys, monkeypatch, "examples/traces/", "--compare", "fuze.toml",
                          "fuze.toml", *extra)
    assert status == 2 and "--compare" in err


def test_compare_with_a_bad_config_names_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[loop_detection]\nrepeat_threshold = -1\n", encoding="utf-8")
    status, _, err = _run(capsys, monkeypatch, "examples/traces/", "--compare", "fuze.toml",
                          str(bad))
    assert status == 2 and "repeat_threshold" in err


def test_a_run_resumed_and_killed_again_counts_as_one_run_killed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Third review e06: each kill of a resumed run counted as a killed run: "10 calls in 1 run
    ... 3 runs killed", and "7 of 4 runs killed" in --compare."""
    import structlog.testing

    import fuzeguard
    from fuzeguard import guard

    lookup = guard(lambda q: "none", name="lookup")
    other = guard(lambda q: f"x{q}", name="other")
    trace = tmp_path / "resumed.jsonl"
    with structlog.testing.capture_logs(), fuzeguard.run("t", trace=str(trace)) as run:
        for k in range(3):  # killed at the 5th identical call, then at the 3rd: "none" again
            try:
                for _ in range(5):
                    lookup(f"same{k}")
            except fuzeguard.LoopDetected:
                run.resume(extra_calls=5, note="go on")
        other(1)
    _, out, _ = _run(capsys, monkeypatch, str(trace))
    assert out.count("run killed at call") == 3
    assert "5 detections" in out and "1 run killed." in out
    live = tmp_path / "live.toml"
    live.write_text("", encoding="utf-8")
    _, out, _ = _run(capsys, monkeypatch, str(trace), "--compare", str(live), str(live),
                     "--format", "json")
    assert json.loads(out.splitlines()[0])["a"]["killed"] == 1
    _, out, _ = _run(capsys, monkeypatch, str(trace), "--compare", str(live), str(live))
    assert "runs killed" not in out  # one run in the trace: "killed at call N"
