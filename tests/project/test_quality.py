"""The code stays strictly typed and lint-clean (STYLE 8): the test command runs both checkers."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the test extra, pip install -e '.[test]'")
    return found


def test_package_passes_mypy_strict() -> None:
    done = subprocess.run([tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_code_passes_ruff() -> None:
    done = subprocess.run([tool("ruff"), "check", "fuzeguard", "tests", "benchmarks", "examples"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
