"""``strands_python``: a Python with Strands Agents and this project installed, for its tests.

Strands pins mcp below 2.2 and the test environment has mcp 2.3, so Strands gets
``.venv-strands/`` (see ``side_env``).
"""

from __future__ import annotations

from typing import Any

import pytest
from side_env import STRANDS, measured_by


@pytest.fixture(scope="session")
def strands_python() -> str:
    """The path of a Python that has Strands Agents and this project (editable) installed."""
    return STRANDS.build()


@pytest.fixture(scope="session")
def strands_extras(strands_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``strands_extras.py`` measured (notes reaching the model, metering), run once."""
    return measured_by(strands_python, "strands_extras.py", tmp_path_factory)
