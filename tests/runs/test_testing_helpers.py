"""fuzeguard.testing: capture detections, switch guarding off or to observe mode (SPEC §7)."""

from __future__ import annotations

import pytest

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard.testing import capture_detections, disabled, observe, set_mode


def looping_tool() -> tuple[object, list[int]]:
    ran: list[int] = []
    return guard(lambda q: ran.append(1), name="t", repeat_warn_threshold=0), ran


def test_capture_detections_collects_and_stops_collecting() -> None:
    tool, _ = looping_tool()
    with fuzeguard.run(on_loop="warn"), capture_detections() as found:
        for _ in range(3):
            tool("q")  # type: ignore[operator]
    assert [d.layer for d in found] == ["dedup"]
    with fuzeguard.run(on_loop="warn"):
        for _ in range(3):
            tool("q")  # type: ignore[operator]
    assert len(found) == 1


def test_disabled_switches_guarding_off_within_the_block() -> None:
    tool, ran = looping_tool()
    with fuzeguard.run() as r, disabled():
        for _ in range(10):
            tool("q")  # type: ignore[operator]
    assert len(ran) == 10
    assert r.stats().calls == 0


def test_observe_logs_but_never_acts_within_the_block() -> None:
    tool, ran = looping_tool()
    with fuzeguard.run() as r, observe(), capture_detections() as found:
        for _ in range(6):
            tool("q")  # type: ignore[operator]
    assert len(ran) == 6
    assert len(found) == 4
    assert not r.stats().killed


def test_guarding_comes_back_after_the_block() -> None:
    tool, _ = looping_tool()
    with disabled():
        pass
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(5):  # a tight identical loop is certain at its 5th call
            tool("q")  # type: ignore[operator]


def test_set_mode_returns_a_restoring_context_manager() -> None:
    """stamina.set_testing(): set for a session, or restore on exit."""
    tool, ran = looping_tool()
    with set_mode("off"):
        with fuzeguard.run():
            for _ in range(5):
                tool("q")  # type: ignore[operator]
    assert len(ran) == 5
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(5):
            tool("q")  # type: ignore[operator]


def test_set_mode_rejects_unknown_modes() -> None:
    with pytest.raises(ValueError, match="observe"):
        set_mode("quiet")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_call_made_with_guarding_off_opens_no_run(kind: str) -> None:
    """Off means untouched: a tool called outside any run, plain or coroutine, does not start the
    implicit process-wide run."""
    import asyncio

    from fuzeguard._private.runs import implicit as runs

    def plain(q: str) -> str:
        return q

    async def coroutine(q: str) -> str:
        return q

    tool = guard(plain if kind == "sync" else coroutine)
    assert runs._implicit is None
    with disabled():
        result = tool("q") if kind == "sync" else asyncio.run(tool("q"))  # type: ignore[arg-type]
    assert result == "q"
    assert runs._implicit is None
    tool("q") if kind == "sync" else asyncio.run(tool("q"))  # type: ignore[arg-type]
    assert runs._implicit is not None  # guarding on: the call went to the implicit run
