"""Nothing on standard output, ever (SPEC §7): it is the JSON-RPC channel of MCP stdio servers and
the data channel of command-line tools. With structlog unconfigured, events go to standard error;
an application that configured structlog gets them through its own pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import structlog

from fuzeguard._private.cli import main

LOOP = textwrap.dedent(
    """
    import fuzeguard
    from fuzeguard import guard

    @guard
    def tool(x):
        return "same"

    print('{"jsonrpc": "2.0", "id": 1}')
    try:
        for _ in range(6):
            tool(1)
    except fuzeguard.LoopDetected:
        pass
    """
)


def _python(code: str, python: str | Path = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)


def test_events_go_to_stderr_and_stdout_keeps_only_the_programs_output() -> None:
    """r02: with structlog unconfigured, the implicit-run notice, both detections and the kill
    used to be printed between the program's own protocol lines. With no logging configured,
    Python's last resort prints the warnings on stderr; the notice is at info level."""
    done = _python(LOOP)
    assert done.stdout == '{"jsonrpc": "2.0", "id": 1}\n'
    for event in ("fuzeguard.loop_detected", "fuzeguard.run_killed"):
        assert event in done.stderr
    done = _python("import logging; logging.basicConfig(level=logging.INFO)\n" + LOOP)
    assert done.stdout == '{"jsonrpc": "2.0", "id": 1}\n'
    for event in ("fuzeguard.implicit_run", "fuzeguard.loop_detected", "fuzeguard.run_killed"):
        assert event in done.stderr


def test_an_application_that_configures_structlog_later_gets_the_later_events() -> None:
    """The choice is made per event: configuring structlog after fuzeguard's first event counts."""
    code = LOOP + textwrap.dedent(
        """
        import structlog
        seen = []
        def grab(logger, name, event):
            seen.append(event["event"])
            raise structlog.DropEvent
        structlog.configure(processors=[grab])
        with fuzeguard.run():
            try:
                for _ in range(6):
                    tool(1)
            except fuzeguard.LoopDetected:
                pass
        import sys
        print(seen, file=sys.stderr)
        """
    )
    done = _python(code)
    assert done.stdout == '{"jsonrpc": "2.0", "id": 1}\n'
    # Warned at the 3rd and 4th identical calls, killed at the 5th.
    assert f"{['fuzeguard.loop_detected'] * 3 + ['fuzeguard.run_killed']}" in done.stderr


def test_fuze_replay_format_json_prints_only_json_while_events_are_logged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """r21 (b): events logged while replaying (here: an embedding function that fails on every
    text) must not land between the JSON objects of ``fuze replay --format json``."""
    structlog.reset_defaults()  # as in a fresh ``fuze`` process: structlog unconfigured
    (tmp_path / "failing_embed.py").write_text(
        "def embed(text):\n    raise RuntimeError('embedding service down')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "fuze.toml"
    config.write_text(
        # About what reaches stdout, not the grading: on_loop at the first detection.
        '[defaults]\nlayers = ["dedup", "semantic"]\non_loop = ["warn", "kill"]\nearly_warnings = 0\n\n'
        '[loop_detection]\nembed = "failing_embed:embed"\n'
    )
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"fn": "search", "args": {"q": "the same long query, again"},
                            "result": "the same long answer, once more, word for word"}) + "\n"
                for _ in range(5))
    )
    code = main(["replay", "--format", "json", "--config", str(config), str(trace)])
    out = capsys.readouterr().out
    assert code == 0
    objects = [json.loads(line) for line in out.splitlines()]
    assert [(o["layer"], o["action"]) for o in objects] == [("dedup", "warn"), ("dedup", "kill")]
    # logged through the standard library logger (pytest's handler holds it here)
    assert "embedding service down" in caplog.text


SERVER = textwrap.dedent(
    '''
    from mcp.server.fastmcp import FastMCP

    from fuzeguard import guard

    server = FastMCP("probe")


    @server.tool()
    @guard(on_loop="skip", early_warnings=0)  # about the answers, not the grading
    def search(query: str) -> str:
        """Search the web for a query."""
        return f"3 results for {query}"


    if __name__ == "__main__":
        server.run()  # stdio, no fuzeguard.run(): the implicit run, structlog unconfigured
    '''
)


def test_an_mcp1_fastmcp_stdio_server_writes_only_json_rpc_on_stdout(
    mcp1_python: str, tmp_path: Path
) -> None:
    """mcp 1.x FastMCP over stdio: 4 of 10 stdout lines were log events, not JSON-RPC."""
    server = tmp_path / "server.py"
    server.write_text(SERVER)
    messages = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *({"jsonrpc": "2.0", "id": i, "method": "tools/call",
           "params": {"name": "search", "arguments": {"query": "laptops"}}} for i in range(1, 6)),
    ]
    errlog = tmp_path / "err.txt"
    with open(errlog, "w") as err:
        server_process = subprocess.Popen(
            [str(mcp1_python), str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=err, text=True, cwd=tmp_path,
        )
        watchdog = threading.Timer(120, server_process.kill)
        watchdog.start()
        try:
            assert server_process.stdin is not None and server_process.stdout is not None
            server_process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
            server_process.stdin.flush()
            lines: list[str] = []
            answered: set[int] = set()
            while answered != {0, 1, 2, 3, 4, 5}:
                line = server_process.stdout.readline()
                if not line:
                    break
                lines.append(line)
                try:
                    answered.add(json.loads(line)["id"])
                except (ValueError, KeyError, TypeError):
                    pass
            server_process.stdin.close()
            lines.extend(server_process.stdout.read().splitlines(keepends=True))
            server_process.wait(60)
        finally:
            watchdog.cancel()
            server_process.kill()
    answers = [json.loads(line) for line in lines]  # every line is JSON
    assert all(a.get("jsonrpc") == "2.0" for a in answers)
    assert sorted(a["id"] for a in answers if "id" in a) == [0, 1, 2, 3, 4, 5]
    assert "fuzeguard.loop_detected" in errlog.read_text()


CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def main():
        params = StdioServerParameters(command=sys.executable, args=[sys.argv[1]])
        with open(sys.argv[2], "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    answers = []
                    for _ in range(5):
                        result = await session.call_tool("search", {"query": "laptops"})
                        answers.append([result.isError, result.content[0].text])
        print(json.dumps(answers))

    asyncio.run(main())
    """
)


def test_an_mcp1_client_session_gets_every_answer_and_the_events_reach_the_servers_stderr(
    mcp1_python: str, tmp_path: Path
) -> None:
    """A real mcp 1.x ClientSession drives the server: two searches run, the third and fourth are
    skipped with the detection's message, the fifth (two skips did not help) is killed, answered
    as a tool error, and the events are in the server's stderr."""
    server, client, errlog = tmp_path / "server.py", tmp_path / "client.py", tmp_path / "err.txt"
    server.write_text(SERVER)
    client.write_text(CLIENT)
    done = subprocess.run(
        [str(mcp1_python), str(client), str(server), str(errlog)], capture_output=True,
        text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=True,
    )
    answers = json.loads(done.stdout)
    assert [text for _, text in answers[:2]] == ["3 results for laptops"] * 2
    for (is_error, text), n in zip(answers[2:4], (3, 4), strict=True):
        assert not is_error and f"`search` with the same arguments {n} times" in text
    assert answers[4][0] and "You called `search` with the same arguments 5 times" in answers[4][1]
    logged = errlog.read_text()
    assert "fuzeguard.loop_detected" in logged and "fuzeguard.implicit_run" in logged


def test_events_stay_off_stdout_after_structlog_testing_capture_logs() -> None:
    """``capture_logs()`` (which the docs use) leaves structlog "configured" with its default
    logger, which prints to standard output: the events after it went there."""
    code = textwrap.dedent(
        """
        import structlog.testing
        with structlog.testing.capture_logs() as captured:
            pass
        """
    ) + LOOP
    done = _python(code)
    assert done.stdout == '{"jsonrpc": "2.0", "id": 1}\n'
    assert "fuzeguard.loop_detected" in done.stderr and "fuzeguard.run_killed" in done.stderr


@pytest.mark.parametrize("factory", [
    "structlog.PrintLoggerFactory()",
    "structlog.PrintLoggerFactory(sys.stdout)",
    "structlog.WriteLoggerFactory()",
    "structlog.BytesLoggerFactory()",
])
def test_a_structlog_configured_to_print_to_stdout_sends_fuzeguard_events_to_stderr(
    factory: str,
) -> None:
    """Whatever structlog's state, the library's events never reach standard output; the
    application's processors still see them."""
    code = textwrap.dedent(
        f"""
        import sys
        import structlog
        seen = []
        def grab(logger, name, event):
            seen.append(event["event"])
            return event
        structlog.configure(processors=[grab, structlog.processors.KeyValueRenderer()],
                            logger_factory={factory})
        """
    ) + LOOP + "\nprint(len(seen), file=sys.stderr)\n"
    done = _python(code)
    assert done.stdout == '{"jsonrpc": "2.0", "id": 1}\n'
    assert "event='fuzeguard.run_killed'" in done.stderr
    seen = int(done.stderr.rstrip().rsplit("\n", 1)[-1])
    assert seen >= 3  # the implicit run's notice, the detection(s) and the kill


def test_events_inside_capture_logs_are_captured() -> None:
    import fuzeguard
    from fuzeguard import guard

    @guard(on_loop="kill")
    def tool(x: int) -> str:
        return "same"

    with structlog.testing.capture_logs() as captured, fuzeguard.run():
        with pytest.raises(fuzeguard.LoopDetected):
            for _ in range(6):
                tool(1)
    assert "fuzeguard.run_killed" in [e["event"] for e in captured]
