"""``crewai_python``: a Python with CrewAI and this project installed, for the CrewAI tests.

CrewAI pins mcp below 2, and the test environment has mcp 2.x, so CrewAI gets an environment of
its own. This session fixture builds ``.venv-crewai/`` at the repository root once (gitignored;
pip installs ``crewai>=1.15`` and the project, editable) and reuses it while it still answers; it
never skips: if it cannot be built, the tests that need it fail with pip's message.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-crewai"
REQUIREMENT = "crewai>=1.15"
_CHECK = (
    "import fuzeguard, crewai.hooks; "
    f"assert fuzeguard.__file__.startswith({str(ROOT)!r}), fuzeguard.__file__"
)


def _python() -> Path:
    return VENV / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def _ready() -> bool:
    python = _python()
    if not python.exists():
        return False
    return subprocess.run([str(python), "-c", _CHECK], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def crewai_python() -> str:
    """The path of a Python that has CrewAI and this project (editable) installed."""
    if not _ready():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        done = subprocess.run(
            [str(_python()), "-m", "pip", "install", "-q", REQUIREMENT, "-e", str(ROOT)],
            capture_output=True, text=True,
        )
        if done.returncode != 0 or not _ready():
            pytest.fail(f"could not build {VENV.name} with {REQUIREMENT}:\n{done.stdout}{done.stderr}")
    return str(_python())
