"""Common mistakes get a clear error naming what is wrong and how to fix it (before, each was
accepted or failed without a hint), and human output shows no internals."""

from __future__ import annotations

import io
import re

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import ConfigError, guard
from fuzeguard._private.cli.demo import main as demo_main


def lookup(q: str) -> str:
    return q


def test_guard_of_none_is_refused_instead_of_returning_a_decorator() -> None:
    with pytest.raises(TypeError, match=r"guard\(\) takes a function, got None"):
        guard(None)


def test_guard_without_a_function_still_returns_a_decorator() -> None:
    assert guard()(lookup)("a") == "a"
    assert guard(on_loop="warn")(lookup)("b") == "b"


@pytest.mark.parametrize("ladder", [["kill", "warn"], ["warn", "kill", "skip"]])
def test_a_ladder_with_steps_after_kill_is_refused_in_code_and_in_the_file(ladder: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"steps after it .* are never reached; put \"kill\" last"):
        guard(lookup, on_loop=ladder)
    with pytest.raises(ConfigError, match="never reached"):
        fuzeguard.Config.from_dict({"defaults": {"on_loop": ladder}})


@pytest.mark.parametrize("amount", [-1, -0.5])
def test_add_cost_refuses_a_negative_cost(amount: float) -> None:
    with fuzeguard.run(), pytest.raises(ValueError, match="finite cost of 0 or more"):
        fuzeguard.add_cost(amount)


def test_add_cost_leaves_an_endless_cost_out_and_says_so() -> None:
    """An infinite cost cannot be added up: it is not counted and is logged (the agent goes on,
    as a cost reported by a tool must never take it down)."""
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        fuzeguard.add_cost(float("inf"))
    assert run.stats().cost == 0
    assert [e["event"] for e in logs if e["event"] == "fuzeguard.cost_rejected"]


def test_a_run_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match=r"takes a name that is a string \(or None\), got 42"):
        fuzeguard.run(name=42)  # type: ignore[arg-type]


def test_guarding_a_function_twice_is_refused() -> None:
    once = guard(lookup)
    with pytest.raises(TypeError, match="is already guarded: each call would count twice"):
        guard(once, on_loop="warn")


def test_guard_above_a_framework_decorator_says_to_put_it_underneath() -> None:
    from langchain_core.tools import tool

    @tool
    def search(query: str) -> str:
        """Search."""
        return query

    with pytest.raises(TypeError, match=r"a framework's tool object, not a function: put @guard "
                                        r"under LangChain's @tool"):
        guard(search)


def test_guard_under_a_framework_decorator_works() -> None:
    from langchain_core.tools import tool

    @tool
    @guard
    def search(query: str) -> str:
        """Search."""
        return query

    assert search.invoke({"query": "q"}) == "q"


def test_guard_above_pydantic_ais_registering_decorator_is_refused_with_the_order() -> None:
    """Pydantic AI's ``@agent.tool_plain`` registers the function and returns it unchanged: above
    it, @guard wrapped a function the agent never calls (newcomer review: 5 runs, 0 seen)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel())
    with pytest.raises(TypeError, match=r"'search' was registered by a pydantic_ai decorator "
                                        r"before @guard wrapped it.*put @guard under Pydantic AI"):

        @guard
        @agent.tool_plain
        def search(query: str) -> str:
            """Search."""
            return query


def test_guard_above_an_mcp_servers_tool_decorator_is_refused_with_the_order() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("tools")
    with pytest.raises(TypeError, match=r"registered by a mcp decorator.*put @guard under the "
                                        r"MCP server's @tool"):

        @guard(on_loop="warn")
        @server.tool()
        def search(query: str) -> str:
            """Search."""
            return query


def test_guard_above_a_decorator_that_registers_nothing_is_accepted() -> None:
    """A marker decorator returns the function itself too (``typing_extensions.override``); no
    framework holds it, so @guard above it guards the calls."""
    import pydantic_ai  # noqa: F401 - a registering framework is imported: the check runs
    from typing_extensions import override

    @guard
    @override
    def search(query: str) -> str:
        return query

    with fuzeguard.run() as run:
        search("q")
    assert run.stats().calls == 1


def test_guard_under_pydantic_ais_decorator_is_accepted() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel(call_tools=["search"]))

    @agent.tool_plain
    @guard
    def search(query: str) -> str:
        """Search."""
        return query

    with fuzeguard.run() as run:
        agent.run_sync("find")
    assert run.stats().calls == 1


def test_run_stats_print_as_a_few_readable_lines() -> None:
    tool = guard(lookup)
    with fuzeguard.run("job-1", max_calls=10) as run:
        tool("a")
        tool("b")
    text = str(run.stats())
    assert text.splitlines()[0].startswith("run 'job-1' (")
    assert "calls 2 (lookup 2), answered by the guard 0" in text
    assert "max_calls 2/10" in text and "RunStats(" not in text
    assert repr(run.stats()).startswith("RunStats(")  # every field, for debugging


def test_the_demo_explains_its_counts_and_prints_no_python_reprs() -> None:
    out = io.StringIO()
    assert demo_main(["--no-color"], out=out) == 0
    text = out.getvalue()
    assert "In (4/3) after a layer's name, 4 is what the layer counted" in text
    assert "{'" not in text and "README.md" not in text and "docs/" not in text
    assert "run killed: yes" in text


def test_a_detection_prints_without_its_raw_fingerprint() -> None:
    tool = guard(lookup, on_loop="kill")
    with fuzeguard.run(), pytest.raises(fuzeguard.LoopDetected) as caught:
        for _ in range(5):
            tool("same")
    shown = repr(caught.value.detection)
    # No bytes literal (b'...'); a run id that ends in "b" is not one.
    assert "pattern=" not in shown and re.search(r"(?<!\w)b'", shown) is None
    assert "layer='dedup'" in shown and "count=" in shown


def test_a_cost_velocity_detection_counts_no_calls_against_a_money_threshold() -> None:
    """Before, its row in replay read `4/3`: four calls over a limit of 3 (money)."""
    found = []

    @guard(cost=1.0, on_detect=found.append, on_loop="warn")
    def ask(q: str) -> str:
        return "I am not sure what you mean."

    with fuzeguard.run(cost_velocity_threshold=3):
        for n in range(6):
            ask(f"question {n}")
    velocity = [d for d in found if d.layer == "cost_velocity"]
    assert velocity and all(d.count is None and d.threshold == 3 for d in velocity)
