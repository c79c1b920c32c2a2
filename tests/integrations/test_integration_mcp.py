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
from tests.helpers.stuck_agents import ACTIONS, VARIANTS, Tally, check_run, script, tools

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


def test_a_skip_is_a_normal_result_carrying_the_message_and_escalates_to_a_kill() -> None:
    tally = Tally()
    with capture_logs():
        seen = asyncio.run(_stuck_client(_server("skip", tally), "same"))
    assert tally.total == 4  # warned at the 3rd and 4th call, skipped at the 5th
    assert seen[4] == (False, seen[4][1])
    assert seen[4][1].startswith("You called `search` with the same arguments 5 times")
    assert not any(error for error, _ in seen[:6])  # skipped at the 5th and 6th
    assert seen[6:] and all(error and "Tool calls in this session are stopped" in text
                            for error, text in seen[6:])


def test_a_warning_reaches_the_client_as_a_note_on_the_result() -> None:
    tally = Tally()

    async def client() -> list[list[str]]:
        async with Client(_server("warn", tally)) as session:
            return [[c.text for c in (await session.call_tool("search", {"query": "laptops"})).content]
                    for _ in range(4)]

    with capture_logs():
        seen = asyncio.run(client())
    assert seen[0] == ["3 results for laptops"]
    assert seen[3][0] == "3 results for laptops"
    assert seen[3][1].startswith(
        "[fuzeguard warning] You called `search` with the same arguments 4 times"
    )


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
    assert not first[3][0] and not second[3][0]
    assert first[4][0] and second[4][0]  # each session is killed at its own 5th call
    assert tally.total == 8


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


def test_by_default_a_session_is_a_header_the_sse_session_the_connection_else_the_process() -> None:
    from types import SimpleNamespace

    from fuzeguard.integrations.mcp import default_session_key

    def http(**request: Any) -> Any:
        return SimpleNamespace(method="tools/call", request=SimpleNamespace(**request))

    assert default_session_key(http(headers={"mcp-session-id": "abc"})) == ("mcp-session-id", "abc")
    assert default_session_key(http(headers={"x-conversation-id": "c1"})) == ("x-conversation-id", "c1")
    assert default_session_key(http(headers={}, query_params={"session_id": "s"})) == ("sse-session", "s")
    client = SimpleNamespace(host="10.0.0.2", port=50123)
    with capture_logs() as logs:
        assert default_session_key(http(headers={}, client=client)) == ("connection", "10.0.0.2", 50123)
        assert default_session_key(http(headers={}, client=client)) == ("connection", "10.0.0.2", 50123)
        assert default_session_key(http(headers={})) == ("process",)
        assert default_session_key(SimpleNamespace(method="tools/call", request=None)) == ("process",)
    events = [log["event"] for log in logs]
    assert events.count("fuzeguard.mcp_session_by_connection") <= 1
    assert events.count("fuzeguard.mcp_session_per_process") <= 1


def test_two_clients_over_streamable_http_with_the_default_client_keep_apart() -> None:
    """mcp 2.x's default client negotiates a protocol without sessions: one client loops, the
    other polls a job legitimately, and the poller still finishes."""
    import socket

    import uvicorn

    tally = Tally()
    polls = {"n": 0}
    server = _server("kill", tally)

    @server.tool()
    def get_job_status(job_id: str) -> str:
        """Get the status of an export job."""
        polls["n"] += 1
        return f"Job {job_id}: done" if polls["n"] >= 12 else f"Job {job_id}: running"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    http = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port,
                                         log_level="error"))

    async def looping() -> list[bool]:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            return [bool((await client.call_tool("search", {"query": "laptops"})).is_error)
                    for _ in range(6)]

    async def polling() -> str:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            for _ in range(20):
                text = (await client.call_tool("get_job_status", {"job_id": "job-7"})).content[0].text
                if "done" in text:
                    return text
        return "gave up"

    async def both() -> tuple[list[bool], str]:
        serving = asyncio.create_task(http.serve())
        while not http.started:  # the server runs in this event loop: give it turns until it listens
            await asyncio.sleep(0)
        try:
            return await asyncio.gather(looping(), polling())
        finally:
            http.should_exit = True
            await serving

    with capture_logs():
        loop_errors, polled = asyncio.run(both())
    assert loop_errors == [False] * 4 + [True] * 2 and tally.total == 4
    assert polled == "Job job-7: done"


def test_clients_a_proxy_sends_over_one_connection_never_lock_each_other_out() -> None:
    """Third review e08: behind a reverse proxy that pools its upstream connections, clients
    without a session header were keyed by the proxy's connection: one client's loop killed that
    run, and the next client's first call was refused with its stop message."""
    tally = Tally()

    def pooled(ctx: Any) -> Any:  # what default_session_key gives every client behind the proxy
        return ("connection", "10.0.0.9", 41000)

    server = _server("kill", tally, session_key=pooled)

    async def two_clients() -> tuple[list[bool], bool, bool]:
        async with Client(server) as a:
            looped = [bool((await a.call_tool("search", {"query": "laptops"})).is_error)
                      for _ in range(6)]
        async with Client(server) as b:
            first = await b.call_tool("search", {"query": "weather in Paris"})
            again = await b.call_tool("search", {"query": "laptops"})
        return looped, bool(first.is_error), bool(again.is_error)

    with capture_logs():
        looped, first_failed, loop_refused = asyncio.run(two_clients())
    assert looped == [False] * 4 + [True] * 2  # the looping client is stopped
    assert not first_failed  # the next client's call runs
    assert loop_refused  # what looped stays refused on that connection


def test_calls_to_tools_the_server_does_not_have_are_not_booked() -> None:
    """Third review e12: every call to a made-up tool name was booked in the session's run before
    the SDK answered "Unknown tool": 20,000 names, 20,000 entries kept while the session lived."""
    middleware = LoopGuardMiddleware(on_loop="kill")
    server = MCPServer("shop", middleware=[middleware])

    @server.tool()
    def search(query: str) -> str:
        """Search."""
        return f"3 results for {query}"

    async def client() -> tuple[list[str], int, list[bool]]:
        async with Client(server) as session:
            unknown = [(await session.call_tool(f"made_up_{i}", {})).content[0].text
                       for i in range(50)]
            booked = sum(len(r.stats().calls_by_fn) for r in middleware._runs._runs.values())
            real = [bool((await session.call_tool("search", {"query": "x"})).is_error)
                    for _ in range(6)]
            return unknown, booked, real

    with capture_logs():
        unknown, booked, real = asyncio.run(client())
    assert unknown[0] == "Unknown tool: made_up_0" and len(set(unknown)) == 50
    assert booked == 0
    assert real == [False] * 4 + [True] * 2  # the server's own tools are still guarded


def test_a_server_whose_tools_cannot_be_listed_is_guarded_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A middleware chain whose ``tools/list`` the guard cannot read: logged once, and every
    call judged whatever its name, as before."""
    from fuzeguard.integrations import mcp as integration

    async def refused(*args: Any) -> Any:
        raise RuntimeError("listing refused")

    monkeypatch.setattr(integration, "_listed_tools", refused)
    tally = Tally()

    async def client() -> list[bool]:
        async with Client(_server("kill", tally)) as session:
            return [bool((await session.call_tool("search", {"query": "x"})).is_error)
                    for _ in range(6)]

    with capture_logs() as logs:
        errors = asyncio.run(client())
    assert errors == [False] * 4 + [True] * 2
    assert [e["event"] for e in logs].count("fuzeguard.mcp_tools_unlisted") == 1
