"""The scripts in ``examples/`` run with one command, offline, and never rewrite committed files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzeguard._private.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"


def _calls(path: Path) -> list[str]:
    return [json.loads(line)["fn"] for line in path.read_text().splitlines() if line.strip()]


def test_record_traces_writes_into_its_own_directory_and_leaves_the_committed_traces_alone(
    tmp_path: Path,
) -> None:
    committed = {p.name: p.read_bytes() for p in TRACES.glob("*.jsonl")}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "record_traces.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_bytes() for p in TRACES.glob("*.jsonl")} == committed
    recorded = tmp_path / "recorded-traces"
    assert sorted(p.name for p in recorded.glob("*.jsonl")) == sorted(committed)
    for name in committed:  # the same calls as the committed examples
        assert _calls(recorded / name) == _calls(TRACES / name), name
    assert "recorded-traces/stuck_search.jsonl:" in done.stdout


def test_the_tuning_page_shows_the_summary_replay_prints_for_the_example_traces(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the page's sample summary was stale (32 calls, dedup 11...)."""
    page = (ROOT / "docs" / "tuning.md").read_text(encoding="utf-8")
    shown = re.search(r"the summary reads:\n\n```text\n(.*?)\n```", page, re.S)
    assert shown is not None
    monkeypatch.chdir(ROOT)
    assert main(["replay", "examples/traces/", "--config", "examples/traces/live.toml"]) == 0
    assert shown.group(1) in capsys.readouterr().out


@pytest.mark.parametrize(("script", "expected"), [
    ("plain.py", r"stopped at call \d+ by dedup"),
    ("langchain_agent.py", r"Stopped: the agent was looping \(dedup at tool call \d+, `search`\)\."),
    ("openai_agents_agent.py", r"final output: Stopped: the agent was looping \(dedup"),
    ("pydantic_ai_agent.py", r"search killed after \d+ calls"),
    ("smolagents_agent.py", r"agent stopped at call \d+"),
])
def test_each_framework_example_runs_offline_with_one_command(
    script: str, expected: str, tmp_path: Path
) -> None:
    """Run from an empty directory, as a reader would after a checkout: no fuze.toml, no key."""
    path = ROOT / "examples" / "frameworks" / script
    done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=_offline_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(expected, done.stdout), done.stdout[-2000:]
    assert script in (ROOT / "examples" / "frameworks" / "README.md").read_text(encoding="utf-8")


def _offline_env() -> dict[str, str]:
    # No API key: the models are scripted, and nothing may reach a network.
    return {k: v for k, v in os.environ.items() if not k.startswith(("FUZE_", "OPENAI_"))}
