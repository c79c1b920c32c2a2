"""``warn_at``: each run budget warns once at each fraction, with a note for the model."""

from __future__ import annotations

import pytest
from freezegun import freeze_time

import fuzeguard
from fuzeguard import Config, ConfigError, LoopDetected, guard
from fuzeguard.events import BudgetWarning


@guard
def step(n: int) -> int:
    return n


def _warnings(run: fuzeguard.Run) -> list[BudgetWarning]:
    found: list[BudgetWarning] = []
    run.subscribe(found.append, BudgetWarning)
    return found


def test_call_budget_warns_at_80_and_95_percent_exactly_once_each() -> None:
    with fuzeguard.run(max_calls=20, warn_at=[0.8, 0.95]) as run:
        found = _warnings(run)
        seen_at: list[int] = []
        for n in range(20):
            before = len(found)
            step(n)
            if len(found) > before:
                seen_at.append(n + 1)
    assert [(w.limit, w.fraction) for w in found] == [("max_calls", 0.8), ("max_calls", 0.95)]
    assert seen_at == [16, 19]
    assert found[0].message.startswith("80% of the call budget used (16 of 20 calls): wrap up")
    assert run.notes() == [w.message for w in found]
    assert run.notes() == []


def test_no_warning_without_warn_at_or_without_a_budget() -> None:
    with fuzeguard.run(max_calls=10) as run:
        found = _warnings(run)
        for n in range(10):
            step(n)
    with fuzeguard.run(warn_at=[0.5]) as other:
        found_other = _warnings(other)
        for n in range(10):
            step(n)
    assert found == [] and found_other == [] and run.notes() == []


def test_cost_budget_warns_when_the_spend_crosses_each_fraction() -> None:
    @guard(cost=1.0, layers=["limits"])
    def ask(prompt: str) -> str:
        return "answer to " + prompt

    with fuzeguard.run(max_cost=10, warn_at=[0.8, 0.95]) as run:
        found = _warnings(run)
        for i in range(10):
            ask(str(i))
    assert [(w.limit, w.used) for w in found] == [("max_cost", 8.0), ("max_cost", 10.0)]
    assert found[1].message.startswith("95% of the cost budget used (10 of 10)")


def test_cost_added_outside_a_call_counts_toward_the_cost_warning() -> None:
    with fuzeguard.run(max_cost=1.0, warn_at=[0.5]) as run:
        found = _warnings(run)
        fuzeguard.add_cost(0.6)
    assert [w.limit for w in found] == ["max_cost"]


def test_time_budget_warns_on_the_first_call_past_each_fraction() -> None:
    with freeze_time("2026-01-01") as clock, fuzeguard.run(max_duration="100s",
                                                           warn_at=[0.8, 0.95]) as run:
        found = _warnings(run)
        step(1)
        clock.tick(79)
        step(2)
        assert found == []
        clock.tick(2)
        step(3)
        step(4)
        clock.tick(15)
        step(5)
    assert [w.fraction for w in found] == [0.8, 0.95]
    assert found[0].message.startswith("80% of the time budget used (81s of 100s)")


def test_turn_budget_warns_once_per_turn() -> None:
    with fuzeguard.run(max_calls_per_turn=5, warn_at=[0.8]) as run:
        found = _warnings(run)
        for turn in range(3):
            for n in range(5):
                step(turn * 10 + n)
            run.end_turn()
    assert [w.limit for w in found] == ["max_calls_per_turn"] * 3
    assert found[0].message.startswith("80% of this turn's call budget used (4 of 5 calls)")


def test_a_reset_arms_the_warnings_again() -> None:
    with fuzeguard.run(max_calls=5, warn_at=[0.8]) as run:
        found = _warnings(run)
        for n in range(4):
            step(n)
        run.reset()
        for n in range(4):
            step(n + 100)
    assert len(found) == 2


def test_a_resumed_budget_warns_only_at_fractions_still_ahead() -> None:
    with fuzeguard.run(max_calls=10, warn_at=[0.8, 0.95]) as run:
        found = _warnings(run)
        with pytest.raises(LoopDetected):
            for n in range(20):
                step(n)
        assert len(found) == 2
        run.resume(extra_calls=10)  # now 20: 80% is 16, still ahead; 95% is 19
        for n in range(10):
            step(100 + n)
    assert [(w.fraction, w.budget) for w in found[2:]] == [(0.8, 20.0), (0.95, 20.0)]


def test_warn_at_is_a_config_key_checked_like_the_others(tmp_path: object) -> None:
    config = Config.from_dict({"defaults": {"warn_at": [0.95, 0.8, 0.8]}})
    assert config.settings_for(None)["warn_at"] == (0.8, 0.95)
    with pytest.raises(ConfigError, match="fraction above 0 and below 1"):
        Config.from_dict({"defaults": {"warn_at": [80]}})
    with pytest.raises(ConfigError, match="list of fractions"):
        Config.from_dict({"defaults": {"warn_at": 0.8}})
