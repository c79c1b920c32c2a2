"""``crewai_python``: a Python with CrewAI and this project installed, for the CrewAI tests.

CrewAI pins mcp below 2 and the test environment has mcp 2.x, so CrewAI gets ``.venv-crewai/``
(see ``side_env``).
"""

from __future__ import annotations

from typing import Any

import pytest
from side_env import CREWAI, measured_by


@pytest.fixture(scope="session")
def crewai_python() -> str:
    """The path of a Python that has CrewAI and this project (editable) installed."""
    return CREWAI.build()


@pytest.fixture(scope="session")
def crewai_extras(crewai_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``crewai_extras.py`` measured (notes reaching the model), run once."""
    return measured_by(crewai_python, "crewai_extras.py", tmp_path_factory)
