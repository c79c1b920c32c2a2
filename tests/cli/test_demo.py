"""The demo: a scripted agent loops, the guard warns, answers for the tool, and kills."""

from __future__ import annotations

import io
import subprocess
import sys

from fuzeguard._private.cli.demo import main


def test_demo_shows_warnings_a_skip_and_the_kill_and_exits_zero() -> None:
    out = io.StringIO()
    assert main(["--no-color"], out=out) == 0
    text = out.getvalue()
    assert "⚠ warn" in text
    assert "skipped: the tool did not run" in text
    assert "✖ run killed by the" in text
    assert "fuzeguard.run_killed" in text


def test_demo_runs_as_a_module_and_exits_zero() -> None:
    done = subprocess.run([sys.executable, "-m", "fuzeguard", "demo", "--no-color"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "run killed" in done.stdout
