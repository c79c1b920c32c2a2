"""Actions: kill, warn, skip, escalation ladders, observe mode, fail-open, hooks (SPEC §5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import Detection, FuzeguardError, LoopDetected, guard
from fuzeguard.testing import capture_detections


def repeat(tool: Any, n: int, arg: Any = "same") -> list[Any]:
    out = []
    for _ in range(n):
        try:
            out.append(tool(arg))
        except LoopDetected as exc:
            out.append(exc)
    return out


def counted(**options: Any) -> tuple[Any, list[Any]]:
    ran: list[Any] = []

    def search(q: Any) -> str:
        ran.append(q)
        return "results"

    # The actions themselves are tested here: the 3rd identical call is a loop acted on at once
    # (graded evidence is tested in test_evidence_grades.py).
    return guard(search, repeat_warn_threshold=0, **ACT_AT_ONCE, **options), ran


ACT_AT_ONCE: dict[str, Any] = {"early_warnings": 0, "streak_threshold": 3}


def test_kill_is_the_default_action() -> None:
    """Fuze: kill_on_loop = true by default."""
    tool, ran = counted()
    with fuzeguard.run():
        out = repeat(tool, 3)
    assert isinstance(out[2], LoopDetected)
    assert len(ran) == 2


def test_warn_lets_the_call_run() -> None:
    """Fuze warn: log a warning but allow the call to proceed."""
    tool, ran = counted(on_loop="warn")
    with capture_detections() as found, fuzeguard.run():
        out = repeat(tool, 6)
    assert out == ["results"] * 6
    assert len(ran) == 6
    assert [d.action for d in found] == ["warn", "warn", "warn", "warn"]


def test_skip_returns_the_message_instead_of_calling() -> None:
    """Fuze skip: skip the current step; every tool call still gets an answer for the model."""
    tool, ran = counted(on_loop="skip")
    with fuzeguard.run() as r:
        out = repeat(tool, 5)
    assert len(ran) == 2
    assert out[2].startswith("You called `search` with the same arguments 3 times")
    assert r.stats().skipped == 2  # skipping twice did not help: the 5th call ends the run
    assert r.stats().calls == 2 and r.stats().killed


def test_skip_value_replaces_the_message() -> None:
    tool, _ = counted(on_loop="skip", skip_value={"error": "loop"})
    with fuzeguard.run():
        assert repeat(tool, 3)[2] == {"error": "loop"}


def test_skip_value_can_be_a_function_of_the_detection() -> None:
    tool, _ = counted(on_loop="skip", skip_value=lambda d: f"[{d.layer}:{d.count}]")
    with fuzeguard.run():
        assert repeat(tool, 3)[2] == "[dedup:3]"


def test_skip_works_for_coroutine_functions() -> None:
    @guard(on_loop="skip", repeat_warn_threshold=0, **ACT_AT_ONCE)
    async def fetch(url: str) -> str:
        return "page"

    async def main() -> list[str]:
        async with fuzeguard.run():
            return [await fetch("u") for _ in range(3)]

    assert asyncio.run(main())[2].startswith("You called `fetch`")


def test_escalation_ladder_steps_per_repeated_detection_of_the_same_pattern() -> None:
    """OpenFang/Hermes: warning phase, then block, then stop."""
    tool, ran = counted(on_loop=["warn", "skip", "kill"])
    with capture_detections() as found, fuzeguard.run():
        out = repeat(tool, 7)
    assert [d.action for d in found] == ["warn", "skip", "kill"]
    assert out[:3] == ["results"] * 3
    assert out[3].startswith("You called")
    assert isinstance(out[4], LoopDetected)
    assert len(ran) == 3


def test_ladder_steps_separately_for_different_patterns() -> None:
    tool, _ = counted(on_loop=["warn", "kill"])
    with capture_detections() as found, fuzeguard.run():
        repeat(tool, 3, "a")
        repeat(tool, 3, "b")
    assert [(d.action) for d in found] == ["warn", "warn"]


def test_early_warnings_do_not_step_the_ladder() -> None:
    # An early warning at the 3rd identical call, the loop at the 4th.
    tool = guard(
        lambda q: "r", name="t", on_loop=["warn", "kill"], repeat_threshold=3,
        repeat_warn_threshold=3, early_warnings=0, streak_threshold=4,
    )
    with capture_detections() as found, fuzeguard.run():
        repeat(tool, 5)
    assert [(d.kind, d.action) for d in found] == [("warning", "warn"), ("loop", "warn"), ("loop", "kill")]


def test_kill_on_loop_false_means_warn() -> None:
    """Fuze: kill_on_loop = false."""
    tool, ran = counted(kill_on_loop=False)
    with fuzeguard.run():
        repeat(tool, 5)
    assert len(ran) == 5


def test_kill_on_loop_and_on_loop_together_are_refused() -> None:
    with pytest.raises(TypeError, match="not both"):
        guard(lambda x: x, kill_on_loop=True, on_loop="warn")


def test_observe_mode_logs_what_would_fire_without_acting() -> None:
    tool, ran = counted(enabled="observe")
    with capture_detections() as found, structlog.testing.capture_logs() as logs, fuzeguard.run() as r:
        repeat(tool, 6)
    assert len(ran) == 6
    assert [d.action for d in found] == ["kill", "kill", "kill", "kill"]
    assert all(e["observe"] is True for e in logs if e["event"] == "fuzeguard.loop_detected")
    assert not r.stats().killed


def test_observe_mode_from_config() -> None:
    tool, ran = counted()
    with fuzeguard.run(config={"defaults": {"enabled": "observe"}}):
        repeat(tool, 6)
    assert len(ran) == 6


def test_enabled_false_switches_guarding_off() -> None:
    tool, ran = counted(enabled=False)
    with fuzeguard.run() as r:
        repeat(tool, 10)
    assert len(ran) == 10
    assert r.stats().calls == 0


def test_fail_open_runs_the_call_when_the_guard_itself_fails() -> None:
    """SPEC §5: if fuzeguard fails, the call still runs and the failure is logged."""

    class Broken:
        name = "broken"

        def check(self, run: Any, call: Any) -> None:
            raise ZeroDivisionError("bug in a layer")

    tool = guard(lambda q: "r", name="t", layers=[Broken()])
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        assert tool("q") == "r"
    assert logs[0]["event"] == "fuzeguard.layer_failed"
    assert "bug in a layer" in logs[0]["error"]
    assert run.stats().layer_errors == {"broken": 1}


def test_fail_closed_refuses_the_call_when_the_guard_itself_fails() -> None:
    class Broken:
        name = "broken"

        def check(self, run: Any, call: Any) -> None:
            raise ZeroDivisionError("bug")

    ran = []
    tool = guard(lambda q: ran.append(q), name="t", layers=[Broken()], fail_closed=True)
    with fuzeguard.run(), pytest.raises(FuzeguardError, match="fail_closed"):
        tool("q")
    assert ran == []


def test_a_failing_cost_function_never_breaks_the_call() -> None:
    tool = guard(lambda q: "r", name="t", cost=lambda result: 1 / 0)
    with structlog.testing.capture_logs() as logs, fuzeguard.run():
        assert tool("q") == "r"
    assert any(e["event"] == "fuzeguard.cost_failed" for e in logs)


def test_on_detect_hooks_receive_each_detection() -> None:
    got: list[Detection] = []
    tool, _ = counted(on_loop="warn", on_detect=got.append)
    with fuzeguard.run():
        repeat(tool, 5)
    assert [d.count for d in got] == [3, 4, 5]


def test_run_level_hooks_receive_detections_of_every_guard() -> None:
    got: list[Detection] = []
    tool, _ = counted(on_loop="warn")
    with fuzeguard.run(on_detect=[got.append]):
        repeat(tool, 3)
    assert len(got) == 1


def test_a_failing_hook_is_logged_and_does_not_break_the_call() -> None:
    def bad_hook(d: Detection) -> None:
        raise RuntimeError("hook down")

    tool, _ = counted(on_loop="warn", on_detect=bad_hook)
    with structlog.testing.capture_logs() as logs, fuzeguard.run():
        assert repeat(tool, 3)[2] == "results"
    failed = [e for e in logs if e["event"] == "fuzeguard.hook_failed"]
    assert len(failed) == 1 and "hook down" in failed[0]["error"]


def test_detection_carries_everything_the_spec_lists() -> None:
    """SPEC §4: layer, function, run id, call index, count and threshold, action, message."""
    got: list[Detection] = []
    tool, _ = counted(on_loop="warn", on_detect=got.append)
    with fuzeguard.run() as r:
        repeat(tool, 3)
    d = got[0]
    assert (d.layer, d.fn, d.run_id, d.call_index, d.count, d.threshold, d.action) == (
        "dedup", "search", r.id, 3, 3, 2, "warn"
    )
    assert "`search`" in d.message and "try different arguments" in d.message
    assert "Detection(layer='dedup'" in repr(d)


def test_once_turns_are_marked_the_ladder_steps_once_per_turn_for_a_pattern() -> None:
    tool, ran = counted(on_loop=["warn", "skip", "kill"])
    with capture_detections() as found, fuzeguard.run() as run:
        run.end_turn()
        first = repeat(tool, 6)  # one model turn asking for six identical calls
        run.end_turn()
        second = repeat(tool, 1)
        run.end_turn()
        third = repeat(tool, 1)
    assert [d.action for d in found] == ["warn", "warn", "warn", "warn", "skip", "kill"]
    assert first == ["results"] * 6 and len(ran) == 6
    assert str(second[0]).startswith("You called") and isinstance(third[0], LoopDetected)


def test_without_marked_turns_the_ladder_steps_at_every_repeat() -> None:
    tool, _ = counted(on_loop=["warn", "skip", "kill"])
    with capture_detections() as found, fuzeguard.run():
        repeat(tool, 6)
    assert [d.action for d in found] == ["warn", "skip", "kill"]
