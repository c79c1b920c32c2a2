"""``crewai_python``: a Python with CrewAI and this project installed, for the CrewAI tests.

CrewAI pins mcp below 2 and the test environment has mcp 2.x, so CrewAI gets ``.venv-crewai/``
(see ``side_env``).
"""

from __future__ import annotations

import pytest
from side_env import SideEnv

CREWAI = SideEnv("crewai", "crewai>=1.15", "import crewai.hooks")


@pytest.fixture(scope="session")
def crewai_python() -> str:
    """The path of a Python that has CrewAI and this project (editable) installed."""
    return CREWAI.build()
