"""Side environments for the tests of packages that cannot share the test environment.

mcp 1.x, CrewAI (which pins mcp below 2) and Strands Agents (mcp below 2.2) cannot be installed
beside the mcp 2.x of the test extras. ``SideEnv`` builds such an environment once at the
repository root (gitignored; pip installs the requirement and this project, editable) and reuses
it while it still answers. It never skips: if it cannot be built, the tests that need it fail with
pip's message.

``python tests/helpers/side_env.py`` (standard library only) builds all of them at once, ahead of the
suite: CI starts it in the background while the test environment installs. A build holds a file
lock, so a test that needs an environment being built waits for it, then finds it ready.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: builds are not shared between processes there
    fcntl = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SideEnv:
    """``.venv-NAME/`` with ``requirement`` and this project; ``check`` is Python code that runs
    without error once the environment is usable."""

    name: str
    requirement: str
    check: str

    @property
    def path(self) -> Path:
        return ROOT / f".venv-{self.name}"

    @property
    def python(self) -> Path:
        return self.path / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")

    def ready(self) -> bool:
        if not self.python.exists():
            return False
        check = f"{self.check}; import fuzeguard; assert fuzeguard.__file__.startswith({str(ROOT)!r})"
        return subprocess.run([str(self.python), "-c", check], capture_output=True).returncode == 0

    def build(self) -> str:
        """The path of the environment's Python, built first if it is not usable (the test fails
        with pip's message if it cannot be built)."""
        failure = self.built()
        if failure is not None:
            import pytest

            pytest.fail(failure)
        return str(self.python)

    def built(self) -> str | None:
        """Build the environment if it is not usable, under its lock (one build at a time, in any
        process); None once it is ready, else why not."""
        with open(ROOT / f".venv-{self.name}.lock", "w") as lock:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if self.ready():
                return None
            venv.EnvBuilder(with_pip=True, clear=True).create(self.path)
            done = subprocess.run(
                [str(self.python), "-m", "pip", "install", "-q", self.requirement, "-e", str(ROOT)],
                capture_output=True, text=True,
            )
            if done.returncode != 0 or not self.ready():
                return (f"could not build {self.path.name} with {self.requirement}:\n"
                        f"{done.stdout}{done.stderr}")
            return None


MCP1 = SideEnv(
    "mcp1",
    "mcp>=1.25,<2",
    "import importlib.metadata as m, mcp.server.fastmcp; "
    "v = m.version('mcp'); assert v.split('.')[0] == '1', v",
)
CREWAI = SideEnv("crewai", "crewai>=1.15", "import crewai.hooks")
STRANDS = SideEnv("strands", "strands-agents>=1.62", "import strands.hooks")
SIDE_ENVS = (MCP1, CREWAI, STRANDS)


def measured_by(python: str, script: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run ``SCRIPT`` of the tests' helpers (beside this file) with ``python``; what it wrote to the
    JSON file named by its argument."""
    out = tmp_path_factory.mktemp(Path(script).stem) / "measured.json"
    run_in(python, [str(Path(__file__).resolve().with_name(script)), str(out)], out.parent)
    found: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return found


def run_in(python: str, args: list[str], cwd: Path) -> str:
    """Run ``python args...`` in ``cwd`` with this project on the path; its stdout (the test fails
    with its stderr if it fails)."""
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


if __name__ == "__main__":
    with ThreadPoolExecutor(len(SIDE_ENVS)) as pool:
        failures = [f for f in pool.map(SideEnv.built, SIDE_ENVS) if f is not None]
    for failure in failures:
        print(failure, file=sys.stderr)
    sys.exit(1 if failures else 0)
