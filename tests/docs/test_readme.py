"""The README's quick start runs and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_quick_start_prints_what_it_claims() -> None:
    text = README.read_text(encoding="utf-8")
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S)
    assert code is not None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), "README.md", "exec"), {})
    printed = out.getvalue()
    assert "stopped by dedup at call 7" in printed
    assert "5 calls ran, 1 answered by the guard" in printed
    assert "`stopped by dedup at call 7`" in text and "`5 calls ran, 1 answered by the guard`" in text


def test_readme_quick_start_logs_on_stderr_what_the_readme_says(tmp_path: Path) -> None:
    """A newcomer's review: four coloured lines on stderr that the README did not mention."""
    text = README.read_text(encoding="utf-8")
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", text, re.S)
    assert code is not None
    done = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=True)
    events = [line.split()[0] for line in done.stderr.splitlines()]
    assert events == ["fuzeguard.loop_detected"] * 5 + ["fuzeguard.run_killed"]
    assert "(five `fuzeguard.loop_detected` lines and a `fuzeguard.run_killed`)" in " ".join(
        text.split())


def test_readme_has_the_two_fresh_machine_commands() -> None:
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    test_command = 'pip install -e ".[test,frameworks]" && .venv/bin/python -m pytest -q'
    assert test_command in text and test_command in ci
    assert "pip install . && .venv/bin/fuze demo" in text
