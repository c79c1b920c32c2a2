"""``strands_python``: a Python with Strands Agents and this project installed, for its tests.

Strands pins mcp below 2.2 and the test environment has mcp 2.3, so Strands gets
``.venv-strands/`` (see ``side_env``).
"""

from __future__ import annotations

import pytest
from side_env import SideEnv

STRANDS = SideEnv("strands", "strands-agents>=1.62", "import strands.hooks")


@pytest.fixture(scope="session")
def strands_python() -> str:
    """The path of a Python that has Strands Agents and this project (editable) installed."""
    return STRANDS.build()
