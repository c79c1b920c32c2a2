"""``mcp1_python``: a Python with mcp 1.x and this project installed, for the mcp 1.x tests.

mcp 1.x (``FastMCP``) and mcp 2.x cannot share one environment, and the test environment has
2.x. This session fixture builds ``.venv-mcp1/`` at the repository root once (gitignored; pip
installs ``mcp>=1.25,<2`` and the project, editable) and reuses it while it still answers; it
never skips: if it cannot be built, the tests that need it fail with pip's message.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-mcp1"
REQUIREMENT = "mcp>=1.25,<2"
_CHECK = (
    "import importlib.metadata as m, fuzeguard, mcp.server.fastmcp; "
    "v = m.version('mcp'); assert v.split('.')[0] == '1', v; "
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
def mcp1_python() -> str:
    """The path of a Python that has mcp 1.x and this project (editable) installed."""
    if not _ready():
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        done = subprocess.run(
            [str(_python()), "-m", "pip", "install", "-q", REQUIREMENT, "-e", str(ROOT)],
            capture_output=True, text=True,
        )
        if done.returncode != 0 or not _ready():
            pytest.fail(f"could not build {VENV.name} with {REQUIREMENT}:\n{done.stdout}{done.stderr}")
    return str(_python())
