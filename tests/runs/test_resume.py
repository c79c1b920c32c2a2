"""``run.resume()``: a killed run goes on with more budget and its history, so the loop that
stopped it is caught again at once while new work proceeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from freezegun import freeze_time

import fuzeguard
from fuzeguard import FuzeguardError, LoopDetected, guard
from fuzeguard.events import RunResumed


@guard
def web_search(query: str) -> str:
    return "3 results for " + query


def _stuck(run: fuzeguard.Run) -> LoopDetected:
    with pytest.raises(LoopDetected) as caught:
        for _ in range(10):
            web_search("best laptop 2026")
    assert run.killed is not None
    return caught.value


def test_resume_catches_the_same_loop_at_its_first_repeat_and_lets_a_new_call_through() -> None:
    with fuzeguard.run("task") as run:
        first = _stuck(run)
        assert first.detection.call_index == 5  # the 5th identical call in a row
        run.resume(note="Stop searching for laptops; answer with what you found.")
        assert run.killed is None
        assert web_search("best phone 2026") == "3 results for best phone 2026"
        with pytest.raises(LoopDetected) as again:
            web_search("best laptop 2026")
        assert again.value.detection.layer == "dedup"
        assert again.value.detection.call_index == 7  # the first repeat after the resume
        assert run.stats().calls == 5  # 4 before the kill, the new call after the resume


def test_resume_keeps_the_history_and_hands_the_note_to_the_model_once() -> None:
    resumed: list[RunResumed] = []
    with fuzeguard.run("task") as run:
        run.subscribe(resumed.append, RunResumed)
        _stuck(run)
        history = len(run.history)
        run.resume(note="You were stopped for repeating a search: try something else.")
        assert len(run.history) == history
        assert run.notes() == ["You were stopped for repeating a search: try something else."]
        assert run.notes() == []
    assert len(resumed) == 1 and resumed[0].detection.layer == "dedup"
    assert resumed[0].budgets == {}


def test_resume_with_extra_calls_raises_the_call_budget_that_stopped_the_run() -> None:
    @guard
    def step(n: int) -> int:
        return n

    with fuzeguard.run(max_calls=3) as run:
        with pytest.raises(LoopDetected) as stopped:
            for n in range(10):
                step(n)
        assert stopped.value.detection.layer == "limits"
        run.resume(extra_calls=2)
        assert run.stats().limits["max_calls"].limit == 5
        assert step(10) == 10 and step(11) == 11
        with pytest.raises(LoopDetected) as again:
            step(12)
        assert again.value.detection.pattern == "max_calls"


def test_resume_without_more_budget_is_stopped_again_by_the_same_budget() -> None:
    @guard
    def step(n: int) -> int:
        return n

    with fuzeguard.run(max_calls=2) as run:
        with pytest.raises(LoopDetected):
            for n in range(5):
                step(n)
        run.resume(note="go on")
        with pytest.raises(LoopDetected):
            step(99)


def test_resume_with_extra_cost_and_extra_time_raises_those_budgets() -> None:
    @guard(cost=1.0)
    def ask(prompt: str) -> str:
        return "an answer to " + prompt

    with freeze_time("2026-01-01") as clock, fuzeguard.run(max_cost=2, max_duration=60) as run:
        ask("a")
        ask("b")
        with pytest.raises(LoopDetected):
            ask("c")
        run.resume(extra_cost=1.5, extra_time=30)
        limits = run.stats().limits
        assert limits["max_cost"].limit == 3.5 and limits["max_duration"].limit == 90
        assert ask("c") == "an answer to c"
        clock.tick(95)
        with pytest.raises(LoopDetected) as late:
            ask("d")
        assert late.value.detection.pattern == "max_duration"


def test_extra_calls_without_a_call_budget_allows_that_many_more_calls() -> None:
    with fuzeguard.run() as run:
        _stuck(run)
        run.resume(extra_calls=1)
        assert run.stats().limits["max_calls"].limit == 5  # the 4 calls made, and 1 more
        web_search("a new query")
        with pytest.raises(LoopDetected) as caught:
            web_search("another new query")
        assert caught.value.detection.pattern == "max_calls"


def test_resume_of_a_run_that_was_not_killed_says_what_resume_is_for() -> None:
    with fuzeguard.run("alive") as run, pytest.raises(FuzeguardError, match="was not killed"):
        run.resume(extra_calls=5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"extra_calls": -1}, "extra_calls"), ({"extra_calls": 1.5}, "whole number"),
     ({"extra_cost": float("nan")}, "extra_cost"), ({"extra_time": True}, "extra_time"),
     ({"note": 3}, "note")],
)
def test_resume_refuses_bad_budgets_naming_the_argument(
    kwargs: dict[str, object], message: str
) -> None:
    with fuzeguard.run() as run:
        _stuck(run)
        with pytest.raises(TypeError, match=message):
            run.resume(**kwargs)  # type: ignore[arg-type]
        assert run.killed is not None


def test_a_resumed_run_replays_from_its_trace_as_it_ran_live(tmp_path: Path) -> None:
    from fuzeguard._private.reports.replay import replay

    trace = tmp_path / "run.jsonl"
    kills: list[int] = []

    @guard
    def step(n: int) -> int:
        return n

    with fuzeguard.run("task", trace=str(trace), max_calls=3) as run:
        with pytest.raises(LoopDetected) as first:
            for n in range(5):
                step(n)
        kills.append(first.value.detection.call_index)
        run.resume(extra_calls=2)
        step(10)
        step(11)
        with pytest.raises(LoopDetected) as second:
            step(12)
        kills.append(second.value.detection.call_index)
    lines = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert [line.get("resumed") for line in lines if "resumed" in line] == [{"max_calls": 5}]
    [summary] = replay([str(trace)], fuzeguard.Config())
    assert [k.call for k in summary.kills] == kills == [4, 7]
    assert summary.not_evaluated == 0


@pytest.mark.parametrize("value", ['"soon"', '{"max_calls": "many"}', '{"trace": "/tmp/x"}'])
def test_a_hostile_resumed_marker_is_reported_and_the_rest_replays(
    value: str, tmp_path: Path
) -> None:
    from fuzeguard._private.reports.replay import Replayer

    lines = [f'{{"fn":"f","args":{{"n":{n}}},"result":{n},"ts":{n}}}' for n in range(3)]
    lines.append(f'{{"fn":"f","args":{{"n":9}},"result":9,"ts":4,"resumed":{value}}}')
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems: list[str] = []
    summary = Replayer(fuzeguard.Config(), on_problem=lambda p: problems.append(str(p))
                       ).replay_file(str(trace))
    assert summary.calls == 4 and summary.problem_count == 1
    assert '"resumed"' in problems[0]
