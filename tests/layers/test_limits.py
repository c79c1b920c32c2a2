"""Run limits: budgets that end a run whatever its shape (groq-code-cli's hard limits, Ralph's caps)."""

from __future__ import annotations

from typing import Any

import pytest
from freezegun import freeze_time

import fuzeguard
from fuzeguard import ConfigError, LoopDetected, add_cost, guard


def tool_named(name: str, fn: Any = None, **options: Any) -> Any:
    def tool(x: Any) -> Any:
        return fn(x) if fn else x

    tool.__name__ = name
    return guard(tool, **options)


def test_max_calls_kills_the_call_after_the_budget() -> None:
    """groq-code-cli: total session iterations limit, whatever the functions."""
    a, b = tool_named("a"), tool_named("b")
    with fuzeguard.run(max_calls=3) as r, pytest.raises(LoopDetected) as info:
        a(1), b(1), a(2)
        b(2)
    assert info.value.detection.kind == "limit"
    assert info.value.detection.pattern == "max_calls"
    assert info.value.detection.call_index == 4
    assert r.stats().calls == 3


def test_limits_kill_even_when_on_loop_is_warn() -> None:
    """Limits are budgets, not heuristics: they end the run whatever on_loop says."""
    a = tool_named("a", on_loop="warn")
    with fuzeguard.run(max_calls=1), pytest.raises(LoopDetected):
        a(1)
        a(2)


def test_max_duration_ends_the_run_in_frozen_time() -> None:
    """groq-code-cli: 30-minute session limit."""
    a = tool_named("a")
    with freeze_time("2026-01-01 00:00:00") as clock:
        with fuzeguard.run(max_duration="30m"):
            a(1)
            clock.tick(29 * 60)
            a(2)
            clock.tick(61)
            with pytest.raises(LoopDetected) as info:
                a(3)
    assert info.value.detection.pattern == "max_duration"
    assert "1800" in info.value.detection.message


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("1.5h", 5400), ("2 minutes", 120), (45, 45)],
)
def test_max_duration_accepts_seconds_and_duration_strings(text: Any, seconds: float) -> None:
    config = fuzeguard.Config.from_dict({"defaults": {"max_duration": text}})
    assert config.settings_for()["max_duration"] == seconds


def test_unreadable_duration_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="duration"):
        fuzeguard.Config.from_dict({"defaults": {"max_duration": "soon"}})


def failing(x: Any) -> Any:
    raise ValueError(f"bad {x}")


def call_ignoring_errors(tool: Any, args: list[Any]) -> int | None:
    for i, a in enumerate(args, start=1):
        try:
            tool(a)
        except ValueError:
            pass
        except LoopDetected:
            return i
    return None


def test_max_errors_ends_the_run_after_that_many_failures() -> None:
    """groq-code-cli: 5 errors per session."""
    # Only the limit under test: the same error with varied inputs is also a progress loop.
    t = tool_named("t", failing, layers=["limits"])
    with fuzeguard.run(max_errors=5):
        assert call_ignoring_errors(t, list(range(10))) == 6


def test_max_consecutive_errors_resets_on_success() -> None:
    """Ralph: consecutive failure limit (default 5 there)."""
    flaky = tool_named("flaky", lambda x: failing(x) if x % 3 else x)
    with fuzeguard.run(max_consecutive_errors=2) as r:
        # x=0 ok, 1 fail, 2 fail -> 3rd call after two failures in a row is refused
        assert call_ignoring_errors(flaky, [0, 1, 2, 3]) == 4
    assert r.stats().consecutive_errors == 2


def test_max_cost_ends_the_run_once_spent() -> None:
    """Ralph: cost limit ($10 there)."""
    t = tool_named("llm", cost=4.0)
    with fuzeguard.run(max_cost=10) as r, pytest.raises(LoopDetected) as info:
        for i in range(5):
            t(i)
    assert info.value.detection.pattern == "max_cost"
    assert r.stats().cost == 12.0


def test_cost_can_be_a_function_of_the_result() -> None:
    """Fuze layer 3 input: cost read from token usage in the result."""
    t = tool_named("llm", lambda x: {"usage": {"total_tokens": 1000 * x}},
                   cost=lambda result: result["usage"]["total_tokens"] * 0.000002)
    with fuzeguard.run() as r:
        t(1)
        t(2)
    assert r.stats().cost == pytest.approx(0.006)


def test_add_cost_inside_a_guarded_call_counts_for_that_call() -> None:
    def llm(x: Any) -> Any:
        add_cost(0.25)
        add_cost(0.25)
        return x

    t = tool_named("llm", llm)
    with fuzeguard.run() as r:
        t(1)
    assert r.stats().cost == 0.5
    assert r.history[-1].cost == 0.5


def test_add_cost_outside_a_guarded_call_counts_for_the_run() -> None:
    with fuzeguard.run() as r:
        add_cost(1.5)
    assert r.stats().cost == 1.5


def test_add_cost_in_an_async_tool_counts_for_that_call() -> None:
    import asyncio

    @guard
    async def llm(x: int) -> int:
        await asyncio.sleep(0)
        add_cost(2)
        return x

    async def main() -> float:
        async with fuzeguard.run() as r:
            await asyncio.gather(llm(1), llm(2))
            return r.stats().cost

    assert asyncio.run(main()) == 4


def test_add_cost_rejects_non_numbers() -> None:
    with pytest.raises(TypeError):
        add_cost("1")  # type: ignore[arg-type]


def test_limit_message_tells_the_model_to_stop() -> None:
    t = tool_named("t")
    with fuzeguard.run(max_calls=1), pytest.raises(LoopDetected) as info:
        t(1)
        t(2)
    assert "final answer" in info.value.detection.message
    assert "max_calls = 1" in info.value.detection.message
