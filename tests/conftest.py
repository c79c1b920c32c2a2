"""Shared fixtures: every test starts with no config discovered from the environment, a fresh
implicit run and no testing mode left over from another test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer

from fuzeguard import Config
from fuzeguard._private.runs import state
from fuzeguard.testing import reset_implicit_run
from tests.helpers.crewai_env import crewai_extras, crewai_python
from tests.helpers.mcp1_env import mcp1_python
from tests.helpers.strands_env import strands_extras, strands_python

__all__ = ["crewai_extras", "crewai_python", "mcp1_python", "strands_extras", "strands_python"]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("FUZE_CONFIG", "FUZE_ENV", "FUZE_TRACE", "FUZE_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    reset_implicit_run()
    state.mode_override = None
    yield
    state.mode_override = None
    reset_implicit_run()


@pytest.fixture
def defaults() -> Config:
    """The built-in defaults, independent of any fuze.toml."""
    return Config()


@pytest.fixture(scope="session")
def redis_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_server(redis_session: RedisServer) -> Iterator[RedisServer]:
    """The tests' redis-server, emptied before each test."""
    client = redis_session.client()
    client.flushall()
    client.close()
    yield redis_session


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, for tests that stop, restart or pause it."""
    server = RedisServer(tmp_path / "redis")
    server.directory.mkdir()
    server.start()
    yield server
    server.stop()
