"""Claude Agent SDK with ``LoopGuard`` hooks: scripted sessions that loop forever under each
action, requests served concurrently, a subagent's calls, a conversation keyed as one run (real
claude-agent-sdk package and SDK MCP tools; Claude Code's side of the protocol is scripted,
``claude_cli.ScriptedCLI``, since the CLI needs Anthropic's API)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ResultMessage,
    SdkMcpTool,
    create_sdk_mcp_server,
    query,
    tool,
)
from structlog.testing import capture_logs

from fuzeguard import LoopDetected
from fuzeguard.integrations._shared.runs import KeyedRuns
from fuzeguard.integrations.claude_agent_sdk import LoopGuard
from tests.helpers.claude_cli import ScriptedCLI, Step
from tests.helpers.served import ANSWER, CONCURRENT, LEGIT, LOOPING, check_served, next_call
from tests.helpers.stuck_agents import ACTIONS, VARIANTS, Tally, check_run, script, side_example, tools

MAX_TURNS = 25  # ClaudeAgentOptions(max_turns=...) for the stuck sessions (the SDK sets none)
_sessions = itertools.count(1)


def sdk_tools(tally: Tally) -> list[SdkMcpTool[Any]]:
    """The stuck agents' tools as SDK MCP tools (the same counting functions)."""

    def sdk(fn: Any) -> SdkMcpTool[Any]:
        @tool(fn.__name__, fn.__doc__.splitlines()[0], {"query": str})
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            return {"content": [{"type": "text", "text": fn(**args)}]}

        return handler

    return [sdk(fn) for fn in tools(tally)]


def _options(guard: LoopGuard, tally: Tally) -> ClaudeAgentOptions:
    server = create_sdk_mcp_server("shop", tools=sdk_tools(tally))
    return guard.protect(ClaudeAgentOptions(mcp_servers={"shop": server}, max_turns=MAX_TURNS))


async def _ask(guard: LoopGuard, tally: Tally, cli: ScriptedCLI, prompt: str) -> ResultMessage:
    result = None
    async for message in query(prompt=prompt, options=_options(guard, tally), transport=cli):
        if isinstance(message, ResultMessage):
            result = message
    assert result is not None
    return result


Stuck = tuple[Tally, LoopGuard, ScriptedCLI, ResultMessage, list[dict[str, Any]]]


def _stuck(action: str, variant: str, **cli_options: Any) -> Stuck:
    """A stuck session: the tally, the guard, the CLI, the query's result and what was logged."""
    tally = Tally()
    guard = LoopGuard(on_loop=ACTIONS[action], on_detect=tally.on_detect)
    turns = itertools.count()
    cli = ScriptedCLI(lambda prompt, read: script(variant, next(turns)), session_id="s-stuck",
                      max_turns=MAX_TURNS, **cli_options)
    with capture_logs() as logs:
        result = asyncio.run(_ask(guard, tally, cli, "find me a laptop"))
    return tally, guard, cli, result, logs


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_session_behaves_as_recorded(action: str, variant: str) -> None:
    tally, _, cli, result, _ = _stuck(action, variant)
    ended = ("session stopped by the guard (continue: false)" if cli.stopped_by_hook
             else f"{result.subtype} (max_turns {MAX_TURNS})")
    check_run("claude_agent_sdk", action, variant, tally, shown=cli.read, turns=cli.turns, ended=ended)


def test_a_kill_stops_the_session_with_a_final_answer_and_keeps_the_loop_detected() -> None:
    tally, guard, cli, _, _ = _stuck("kill", "same")
    assert cli.stopped_by_hook and tally.total == 4 and cli.turns == 5  # warned at the 3rd and 4th
    answer = guard.final_answer("s-stuck")
    assert answer is not None
    assert answer.startswith("Stopped: the agent was looping (dedup at tool call 5, `mcp__shop__search`)")
    error = guard.killed("s-stuck")
    assert isinstance(error, LoopDetected) and error.stats.calls == 4 and error.stats.killed
    # What Claude read for the refused call: the stop message, as the denial's reason.
    assert cli.read[-1].endswith("Stop calling tools and answer with what you have.")


def test_a_warning_reaches_the_model_as_additional_context() -> None:
    _, _, cli, _, _ = _stuck("warn", "same")
    # Each result, and after the 3rd and 4th the guard's note, which the model reads.
    assert cli.read[:3] == ["3 results for laptops"] * 3
    assert cli.read[3].startswith(
        "[fuzeguard warning] You called `mcp__shop__search` with the same arguments 3 times"
    )
    assert cli.read[4] == "3 results for laptops"
    assert cli.read[5].startswith(
        "[fuzeguard warning] You called `mcp__shop__search` with the same arguments 4 times"
    )


def test_a_skip_denies_the_call_with_the_message_and_the_tool_does_not_run() -> None:
    tally, _, cli, _, _ = _stuck("skip", "alternate")
    assert tally.total == 7
    assert cli.read[-1].startswith("You are going round in a cycle")


def test_a_subagents_calls_are_guarded_in_a_child_run_of_the_prompts_run() -> None:
    tally, _, cli, _, logs = _stuck("kill", "same", subagent="researcher")
    killed = [e["run_name"] for e in logs if e["event"] == "fuzeguard.run_killed"]
    assert killed == ["researcher"] and tally.total == 4 and cli.stopped_by_hook


def _searches(times: int) -> Any:
    """A model that searches for laptops ``times`` times in its prompt, then answers."""
    return lambda prompt, read: ("search", {"query": "laptops"}) if len(read) < times else ANSWER


@pytest.mark.parametrize("subagent", [None, "researcher"])
def test_a_later_prompt_of_a_killed_session_gets_its_own_answer(subagent: str | None) -> None:
    """After a kill (of the prompt, or of a subagent), ``final_answer`` / ``killed`` of the
    session were still the stop for every later prompt: the documented recipe showed "Stopped:
    ..." in place of the real answer. A new prompt clears them."""
    tally = Tally()
    guard = LoopGuard(on_loop="kill")
    first = ScriptedCLI(_searches(10), session_id="s-later", subagent=subagent)
    second = ScriptedCLI(lambda prompt, read: ANSWER, session_id="s-later")
    with capture_logs():
        asyncio.run(_ask(guard, tally, first, "find me a laptop"))
        assert first.stopped_by_hook and guard.final_answer("s-later") is not None
        result = asyncio.run(_ask(guard, tally, second, "thanks, and a mouse?"))
    assert guard.final_answer("s-later") is None and guard.killed("s-later") is None
    assert result.result == ANSWER


def test_a_background_subagent_of_an_earlier_prompt_that_loops_does_not_stop_the_prompt() -> None:
    """A subagent left running by the first prompt loops during the second: its calls are
    refused from then on, and the second prompt, which did not loop, goes on to its answer."""
    tally = Tally()
    guard = LoopGuard(on_loop="kill")
    first = ScriptedCLI(_searches(2), session_id="s-bg", subagent="researcher")
    later = ScriptedCLI(_searches(5), session_id="s-bg", subagent="researcher")
    with capture_logs() as logs:
        asyncio.run(_ask(guard, tally, first, "research laptops in the background"))
        result = asyncio.run(_ask(guard, tally, later, "and now?"))
    assert [e["run_name"] for e in logs if e["event"] == "fuzeguard.run_killed"] == ["researcher"]
    assert tally.total == 4 and not later.stopped_by_hook  # warned at the 3rd and 4th
    assert later.read[-1].endswith("Stop calling tools and answer with what you have.")
    assert result.result == ANSWER and guard.final_answer("s-bg") is None


def _served(prompt: str, read: list[str]) -> Step:
    step = next_call(prompt, len(read))
    return ANSWER if step is None else step


def test_concurrent_requests_with_only_the_hooks_added_are_runs_of_their_own() -> None:
    tally = Tally()
    guard = LoopGuard()

    async def ask(prompt: str) -> str | None:
        session = f"s{next(_sessions)}"
        cli = ScriptedCLI(_served, session_id=session)
        result = await _ask(guard, tally, cli, prompt)
        return result.result if not cli.stopped_by_hook else guard.final_answer(session)

    async def server() -> tuple[list[str | None], str | None]:
        with capture_logs():
            served = await asyncio.gather(*(ask(LEGIT) for _ in range(CONCURRENT)), ask(LOOPING))
            later = await ask(LEGIT)
        assert served[-1] is not None and served[-1].startswith("Stopped: the agent was looping")
        return list(served[:-1]), later

    answers, later = asyncio.run(server())
    check_served(answers, later, tally.total)


def test_a_conversation_keyed_as_one_run_carries_its_history_across_prompts() -> None:
    tally = Tally()
    guard = LoopGuard()
    conversations = KeyedRuns("chat")

    async def chat() -> list[str | None]:
        answers = []
        for _ in range(5):
            cli = ScriptedCLI(_served, session_id=f"s{next(_sessions)}")
            with conversations.run_for("thread-1"):
                result = await _ask(guard, tally, cli, LEGIT)
            answers.append(result.result if not cli.stopped_by_hook else "stopped")
        return answers

    with capture_logs():
        answers = asyncio.run(chat())
    assert answers == [ANSWER] * 4 + ["stopped"]  # the 3rd and 4th prompts' searches were warned


def test_the_docs_example_runs_and_prints_what_the_page_shows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The page's example, unchanged, with Claude Code's side scripted in place of the CLI: the
    model asks for the same search every turn."""
    import claude_agent_sdk._internal.client as sdk_client

    code, shown = side_example(
        "# with Claude Code (run by tests/integrations/test_integration_claude_agent_sdk.py,"
        " the CLI's side scripted)"
    )
    def stuck(prompt: str, read: list[str]) -> Step:
        return "search", {"query": "laptops"}

    monkeypatch.setattr(sdk_client, "SubprocessCLITransport",
                        lambda prompt, options: ScriptedCLI(stuck, session_id="s-docs"))
    with capture_logs():
        exec(compile(code, "docs/frameworks/claude-agent-sdk.md", "exec"), {"__name__": "docs_claude"})
    assert capsys.readouterr().out.rstrip() == shown.rstrip()
