"""Run with mcp 1.x (see ``mcp1_env.py``): FastMCP servers whose tools use ``session_guard``, each
called by a real client session that loops; writes what it measured to the JSON file named by
``sys.argv[1]``. Not a test module: ``test_integration_mcp1.py`` runs it."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

from fuzeguard.integrations.mcp import session_guard
from tests.helpers.served import ANSWER, CONCURRENT, LEGIT, LOOPING, next_call
from tests.helpers.stuck_agents import ACTIONS, VARIANTS, Tally, script, tools

CALLS = 12


def server(action: str, tally: Tally) -> FastMCP:
    app = FastMCP("shop")
    for fn in tools(tally):
        app.tool()(session_guard(fn, on_loop=ACTIONS[action], on_detect=tally.on_detect))
    return app


async def session(app: FastMCP, variant: str, calls: int = CALLS) -> list[list[Any]]:
    seen: list[list[Any]] = []
    async with create_connected_server_and_client_session(app._mcp_server) as client:
        for i in range(calls):
            name, args = script(variant, i)
            result = await client.call_tool(name, args)
            seen.append([bool(result.isError), result.content[0].text])
    return seen


async def main() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for action in ACTIONS:
        for variant in VARIANTS:
            tally = Tally()
            seen = await session(server(action, tally), variant)
            out[f"{action}/{variant}"] = {
                "seen": seen, "total": tally.total, "after": tally.after_detection,
            }
    # Two client sessions of one server, one after the other: each has its own run.
    tally = Tally()
    app = server("kill", tally)
    first = await session(app, "same", 5)
    second = await session(app, "same", 5)
    out["two sessions"] = {"seen": [first, second], "total": tally.total}
    out["stateless http"] = await stateless_http()
    out["budget note"] = await budget_note()
    out["served"] = await served()
    return out


async def served() -> dict[str, Any]:
    """The serving scenario (``served.py``) with only ``session_guard`` added, default options:
    seven client sessions of one server at once, six legitimate (one search, then an answer)
    and one that searches until it is stopped; then a later one."""
    tally = Tally()
    app = FastMCP("shop")
    for fn in tools(tally):
        app.tool()(session_guard(fn))

    async def request(prompt: str) -> str:
        async with create_connected_server_and_client_session(app._mcp_server) as client:
            for results in range(CALLS):
                step = next_call(prompt, results)
                if step is None:
                    return ANSWER
                result = await client.call_tool(*step)
                if result.isError:
                    return f"stopped: {result.content[0].text}"
        return f"gave up after {CALLS} calls"

    answers = await asyncio.gather(*(request(LEGIT) for _ in range(CONCURRENT)), request(LOOPING))
    later = await request(LEGIT)
    return {"answers": list(answers), "later": later, "total": tally.total}


async def budget_note() -> list[list[Any]]:
    """A session whose run has ``max_calls = 4`` and ``warn_at = [0.5]`` (its fuze.toml) looks up
    k1 to k5: what the client read of each call (the scenario of ``notes_scenario.py``, without
    the resume, which a session's run does not offer)."""
    import os
    import tempfile

    from tests.helpers.notes_scenario import lookup

    app = FastMCP("keys")
    app.tool()(session_guard(lookup))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fuze.toml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("[defaults]\nmax_calls = 4\nwarn_at = [0.5]\n")
        os.environ["FUZE_CONFIG"] = path
        try:
            seen: list[list[Any]] = []
            async with create_connected_server_and_client_session(app._mcp_server) as client:
                for n in range(1, 6):
                    result = await client.call_tool("lookup", {"key": f"k{n}"})
                    seen.append([bool(result.isError), " ".join(c.text for c in result.content)])
        finally:
            del os.environ["FUZE_CONFIG"]
    return seen


async def stateless_http() -> dict[str, Any]:
    """FastMCP with stateless_http=True (a session per request, and mcp 1.x's client opens a
    connection per request) over streamable HTTP: one client loops, another polls a job
    legitimately; a ``session_key`` naming each client's conversation (a header it sends) keeps
    them apart."""
    import socket

    import uvicorn
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    tally = Tally()
    polls = {"n": 0}
    app = FastMCP("shop", stateless_http=True)

    def user(ctx: Any) -> Any:
        return ("user", ctx.request.headers.get("x-user"))

    for fn in tools(tally):
        app.tool()(session_guard(fn, on_loop="kill", session_key=user))

    @app.tool()
    @session_guard(on_loop="kill", session_key=user)
    def get_job_status(job_id: str) -> str:
        """Get the status of an export job."""
        polls["n"] += 1
        return f"Job {job_id}: done" if polls["n"] >= 12 else f"Job {job_id}: running"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    http = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), host="127.0.0.1", port=port,
                                         log_level="error"))

    async def client(name: str, args: dict[str, Any], calls: int) -> list[list[Any]]:
        seen: list[list[Any]] = []
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamablehttp_client(url, headers={"x-user": name}) as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            for _ in range(calls):
                result = await session.call_tool(name, args)
                seen.append([bool(result.isError), result.content[0].text])
                if "done" in result.content[0].text:
                    break
        return seen

    serving = asyncio.create_task(http.serve())
    while not http.started:  # the server runs in this event loop: give it turns until it listens
        await asyncio.sleep(0)
    try:
        looping, polling = await asyncio.gather(
            client("search", {"query": "laptops"}, 6),
            client("get_job_status", {"job_id": "job-7"}, 20),
        )
    finally:
        http.should_exit = True
        await serving
    return {"looping": looping, "polling": polling, "total": tally.total}


if __name__ == "__main__":
    result = asyncio.run(main())
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f)
