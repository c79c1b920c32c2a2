"""``mcp1_python``: a Python with mcp 1.x and this project installed, for the mcp 1.x tests.

mcp 1.x (``FastMCP``) and mcp 2.x cannot share one environment, and the test environment has
2.x, so mcp 1.x gets ``.venv-mcp1/`` (see ``side_env``).
"""

from __future__ import annotations

import pytest
from side_env import MCP1


@pytest.fixture(scope="session")
def mcp1_python() -> str:
    """The path of a Python that has mcp 1.x and this project (editable) installed."""
    return MCP1.build()
