"""MCP 2.x servers with ``LoopGuardMiddleware``: a real ``MCPServer`` and a real client session
(the SDK's in-memory transport) whose scripted model loops, under each action."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from structlog.testing import capture_logs

from fuzeguard.integrations.mcp import LoopGuardMiddleware
from tests.stuck_agents import ACTIONS, VARIANTS, Tally, check_run, script, tools

CALLS = 12  # an MCP client has no turn limit of its own: the stuck client stops after 12 calls


def _server(action: str, tally: Tally, **options: Any) -> MCPServer:
    middleware = LoopGuardMiddleware(on_loop=ACTIONS[action], on_detect=tally.on_detect, **options)
    server = MCPServer("shop", middleware=[middleware])
    for fn in tools(tally):
        server.tool()(fn)
    return server


async def _stuck_client(server: MCPServer, variant: str, calls: int = CALLS) -> list[tuple[bool, str]]:
    """One client session making ``calls`` tool calls; (is_error, text) of each answer."""
    seen = []
    async with Client(server) as client:
        for i in range(calls):
            name, args = script(variant, i)
            result = await client.call_tool(name, args)
            seen.append((bool(result.is_error), result.content[0].text))
    return seen


def _ended(seen: list[tuple[bool, str]]) -> str:
    stopped = sum(1 for error, text in seen if error and "Tool calls in this session are stopped" in text)
    if stopped:
        return f"session stopped: the last {stopped} of {len(seen)} calls answered with the stop message"
    return f"client gave up after {len(seen)} calls"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_client_behaves_as_recorded(action: str, variant: str) -> None:
    tally = Tally()
    with capture_logs():
        seen = asyncio.run(_stuck_client(_server(action, tally), variant))
    check_run("mcp", action, variant, tally, shown=[text for _, text in seen], turns=len(seen),
              ended=_ended(seen))


def test_a_skip_is_a_normal_result_carrying_the_message() -> None:
    tally = Tally()
    with capture_logs():
        seen = asyncio.run(_stuck_client(_server("skip", tally), "same"))
    assert tally.total == 3
    assert seen[3] == (False, seen[3][1]) and seen[3][1].startswith("You called `search`")
    assert all(not error for error, _ in seen)


def test_a_kill_answers_every_later_call_of_the_session_with_the_stop_message() -> None:
    tally = Tally()
    with capture_logs():
        seen = asyncio.run(_stuck_client(_server("kill", tally), "alternate"))
    assert tally.total == 7
    assert all(error and text.endswith("Stop calling tools and answer with what you have.")
               for error, text in seen[7:])


def test_each_client_session_has_its_own_run() -> None:
    """Two sessions one after the other: the second starts afresh (keyed on the session id)."""
    tally = Tally()
    sessions = iter(["a", "b"])
    current: dict[str, str] = {}

    def key(ctx: Any) -> str:
        return current["id"]

    server = _server("kill", tally, session_key=key)

    async def both() -> list[list[tuple[bool, str]]]:
        out = []
        for _ in range(2):
            current["id"] = next(sessions)
            out.append(await _stuck_client(server, "same", calls=5))
        return out

    with capture_logs():
        first, second = asyncio.run(both())
    assert first[3][0] and second[3][0]  # each session is killed at its own 4th call
    assert tally.total == 6


def test_other_requests_pass_through_untouched() -> None:
    tally = Tally()

    async def listing() -> list[str]:
        async with Client(_server("kill", tally)) as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert asyncio.run(listing()) == ["search", "tool_a", "tool_b"]


def test_a_sessions_calls_are_traced_as_one_run(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "session.jsonl"
    monkeypatch.setenv("FUZE_TRACE", str(trace))
    tally = Tally()
    with capture_logs():
        asyncio.run(_stuck_client(_server("skip", tally), "same", calls=5))
    lines = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 5 and len({line["run"] for line in lines}) == 1
    assert sum("run_info" in line for line in lines) == 1


def test_by_default_a_session_is_the_transports_session_id_else_the_process() -> None:
    from types import SimpleNamespace

    from fuzeguard.integrations.mcp import _default_session_key

    http = SimpleNamespace(request=SimpleNamespace(headers={"mcp-session-id": "abc"}))
    stdio = SimpleNamespace(request=None)
    assert _default_session_key(http) == ("mcp-session-id", "abc")
    assert _default_session_key(stdio) == ("process",)
