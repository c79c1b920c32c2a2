"""The cost_velocity layer: spending fast while producing nothing new (Fuze layer 3)."""

from __future__ import annotations

from typing import Any

from freezegun import freeze_time
from scripted import Step, play, words

import fuzeguard
from fuzeguard import guard
from fuzeguard.testing import capture_detections

SAME = "The quarterly revenue grew by four percent, driven mostly by the services business."


def llm_calls(answers: list[str], cost: float) -> list[Step]:
    return [Step("ask_llm", {"prompt": f"Summarise the report, version {i}"}, answer, cost=cost)
            for i, answer in enumerate(answers)]


def test_worked_example_spend_above_threshold_with_one_new_answer_is_a_loop() -> None:
    """Fuze layer 3 (docs/layers.md worked example): five calls at 0.12 (0.60 > 0.5), four times
    the same answer and one new one: the sixth call to ask_llm is a loop. Its first detection
    warns; the seventh, still spending on the same answer, is killed."""
    answers = [SAME, SAME, words(1), SAME, SAME, SAME, SAME]
    played = play(llm_calls(answers, 0.12), layers=["cost_velocity"], cost_velocity_threshold=0.5)
    assert played.at("cost_velocity") == [6, 7]  # an early warning, then the loop
    assert [d.action for d in played.detections] == ["warn", "kill"]
    assert played.killed_at == 7


def test_five_different_answers_are_worth_their_cost() -> None:
    answers = [words(i) for i in range(8)]
    played = play(llm_calls(answers, 0.5), layers=["cost_velocity"], cost_velocity_threshold=0.5)
    assert played.detections == []


def test_two_new_answers_in_the_window_are_not_burning_money() -> None:
    answers = [SAME, words(1), SAME, words(2), SAME, SAME]
    played = play(llm_calls(answers, 0.2), layers=["cost_velocity"], cost_velocity_threshold=0.5)
    assert played.detections == []


def test_spend_under_the_threshold_is_fine_however_repetitive() -> None:
    played = play(llm_calls([SAME] * 8, 0.08), layers=["cost_velocity"],
                  cost_velocity_threshold=0.5)
    assert played.detections == []


def test_without_a_threshold_the_layer_is_inert() -> None:
    """Costs are in the user's unit, so there is no default threshold."""
    played = play(llm_calls([SAME] * 8, 100.0), layers=["cost_velocity"])
    assert played.detections == []


def test_cost_from_add_cost_and_from_the_cost_option_both_count() -> None:
    """Fuze layer 3: cost comes from cost= on the guard or fuzeguard.add_cost() in the call."""
    steps = [Step("ask_llm", {"prompt": f"v{i}"}, SAME) for i in range(7)]
    per_call = play(steps, layers=["cost_velocity"], cost_velocity_threshold=0.5, cost=0.2)
    assert per_call.first("cost_velocity") == 6  # warned, then killed at the next call
    assert per_call.killed_at == 7
    added = play(llm_calls([SAME] * 7, 0.2), layers=["cost_velocity"],
                 cost_velocity_threshold=0.5)
    assert added.first("cost_velocity") == 6
    assert added.killed_at == 7


def test_spend_per_minute_is_measured_over_the_window_span() -> None:
    """Five calls ten seconds apart costing 1 each: 5 over 40 s is 7.5 per minute."""
    def poll_llm(threshold: float) -> list[int]:
        @guard(layers=["cost_velocity"], cost_velocity_per_minute=threshold, on_loop="warn")
        def ask_llm(prompt: str) -> str:
            fuzeguard.add_cost(1.0)
            return SAME

        with freeze_time("2026-01-01") as clock, capture_detections() as found, fuzeguard.run():
            for i in range(6):
                ask_llm(f"version {i}")
                clock.tick(10)
        return [d.call_index for d in found]

    assert poll_llm(5.0) == [6]
    assert poll_llm(10.0) == []


def test_detection_names_the_spend_and_the_threshold() -> None:
    played = play(llm_calls([SAME] * 6, 0.2), layers=["cost_velocity"],
                  cost_velocity_threshold=0.5)
    detection: Any = played.detections[0]
    assert detection.layer == "cost_velocity"
    assert detection.threshold == 0.5
    assert "spent 1 over the last 5 calls" in detection.message


def test_short_answers_that_say_nothing_new_are_spending_without_progress() -> None:
    """Issue: with cost_velocity_threshold = 5, twenty calls at cost 2 that all answer "Still
    working on it." fired nothing, because a short answer counted as something new."""
    steps = [Step("ask_agent", {"prompt": f"Are you done yet? ({i})"}, "Still working on it.",
                  cost=2.0) for i in range(20)]
    played = play(steps, layers=["cost_velocity"], cost_velocity_threshold=5)
    assert played.first("cost_velocity") == 6  # warned, then killed at the next call
    assert played.killed_at == 7


def test_writes_acknowledged_alike_are_worth_their_cost() -> None:
    """A short acknowledgement is progress for a write with new arguments."""
    steps = [Step("write_file", {"path": f"out/{i}.txt"}, "OK", cost=2.0) for i in range(20)]
    played = play(steps, layers=["cost_velocity"], cost_velocity_threshold=5)
    assert played.detections == []
