"""Detection quality on runs shaped like real coding agents' (see ``agent_shapes``): long
legitimate runs are never killed and rarely warned; stuck runs are stopped within two calls of
their third identical repeat. The default configuration throughout."""

from __future__ import annotations

import pytest
from agent_shapes import STUCK, bash_success, commands_success, empty_searches
from scripted import play

SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_one_tool_bash_agent_running_150_calls_is_never_stopped(seed: int) -> None:
    """Issue: 'kills 26 of 391 successful runs'; most from the iteration cap on one-tool agents,
    the rest from routine non-zero exits, re-runs between edits and empty greps."""
    steps = bash_success(seed)
    played = play(steps)
    assert played.killed_at is None, [(d.call_index, d.layer, d.message) for d in played.detections]
    assert played.calls == len(steps) >= 150


@pytest.mark.parametrize("seed", SEEDS)
def test_a_one_tool_bash_agent_is_rarely_warned(seed: int) -> None:
    played = play(bash_success(seed))
    assert len(played.detections) <= 1, [(d.call_index, d.layer, d.message) for d in played.detections]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_commands_as_tools_agent_that_succeeds_is_not_flagged(seed: int) -> None:
    """Empty searches before one that finds something, reads, edits between re-runs that fail the
    same way until the fix lands: all work."""
    played = play(commands_success(seed))
    assert played.detections == [], [(d.call_index, d.layer, d.message) for d in played.detections]


@pytest.mark.parametrize("shape", sorted(STUCK))
@pytest.mark.parametrize("seed", range(4))
def test_stuck_runs_are_stopped_within_two_calls_of_the_third_identical_repeat(
    shape: str, seed: int
) -> None:
    make, third = STUCK[shape]
    played = play(make(seed))
    assert played.killed_at is not None, shape
    assert played.killed_at <= third + 2, (shape, [(d.call_index, d.layer) for d in played.detections])


def test_a_search_that_keeps_finding_nothing_is_stopped() -> None:
    """Different inputs, same output: warned at the 6th search, stopped at the 10th."""
    played = play(empty_searches(0))
    assert played.first() == 6
    assert played.killed_at == 10
