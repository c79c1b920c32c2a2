"""CrewAI with ``LoopGuard`` hooks: a crew whose scripted LLM loops forever, under each action
(real crewai package in its own environment, ``crewai_python``, running ``crewai_stuck.py``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.stuck_agents import ACTIONS, ROOT, VARIANTS, Behaviour, check, short, side_example

WRAP_UP = "what I found before I was stopped, for"  # crewai_stuck.WRAP_UP (CrewAI is not here)
HELPERS = Path(__file__).resolve().parents[1] / "helpers"


@pytest.fixture(scope="module")
def measured(crewai_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("crewai") / "measured.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([crewai_python, str(HELPERS / "crewai_stuck.py"), str(out)],
                          cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_crew_behaves_as_recorded(measured: dict[str, Any], action: str, variant: str) -> None:
    found = measured[f"{action}/{variant}"]
    check("crewai", action, variant, Behaviour(
        tool_runs=found["total"],
        after_first_detection=found["after"],
        model_turns=found["turns"],
        ended=found["ended"],
        model_shown=short(found["shown"][0]) if found["shown"] else None,
    ))


def test_calls_answered_from_crewais_cache_are_seen_and_killed(measured: dict[str, Any]) -> None:
    """The tool body ran once; the cache answered call 2; the 3rd was killed."""
    found = measured["kill/same"]
    assert found["total"] == 1 and found["after"] == 0
    assert found["ended"] == "kickoff returned the final answer"


def test_a_kill_ends_kickoff_with_a_final_answer_after_one_more_llm_call(
    measured: dict[str, Any],
) -> None:
    """A stuck model asks for a tool even when asked for a final answer: the canned answer."""
    found = measured["kill/alternate"]
    assert found["total"] == 7 and found["after"] == 0
    assert found["turns"] == 9  # 8 turns, the 8th call killed; then the one call for an answer
    assert found["ended"] == "kickoff returned the final answer"


def test_plain_kickoff_with_only_the_hooks_ends_with_the_models_own_final_answer(
    measured: dict[str, Any],
) -> None:
    """CrewAI review: a plain ``crew.kickoff()`` raised ``LLMCallBlockedError`` (no answer, no
    ``LoopDetected``). Now the model is asked once, without tools, with the detection's message
    as the reason, and its reply is the crew's output; no tool runs after the kill."""
    found = measured["plain kickoff"]
    assert found["ended"] == f"returned {WRAP_UP} loop"
    assert found["total"] == 1  # the tool ran once; CrewAI's cache answered call 2, call 3 killed
    assert "[fuzeguard] Your tool calls were stopped: You called `search`" in found["last asked"]
    assert found["last asked"].endswith("say what you could not finish.")


def test_plain_kickoff_without_wrap_up_ends_with_the_canned_answer(measured: dict[str, Any]) -> None:
    assert measured["plain kickoff canned"]["ended"].startswith(
        "returned Stopped: the agent was looping (dedup at tool call")
    assert measured["plain kickoff canned"]["llm calls"] == measured["plain kickoff"]["llm calls"]


def test_plain_kickoff_with_exit_behavior_error_raises_loop_detected(
    measured: dict[str, Any],
) -> None:
    found = measured["plain kickoff error"]
    assert found["ended"].endswith("(a LoopDetected)")
    assert found["llm calls"] == measured["plain kickoff"]["llm calls"] - 1  # none after the kill


def test_a_skip_shows_the_model_the_message_and_the_tool_never_runs_again(
    measured: dict[str, Any],
) -> None:
    found = measured["skip/alternate"]
    assert found["total"] == 7
    assert any(text.startswith("You are going round in a cycle") for text in found["shown"])


def test_a_server_that_only_adds_the_hooks_keeps_concurrent_kickoffs_apart(
    measured: dict[str, Any],
) -> None:
    found = measured["server"]
    assert found["answers"][:6] == [f"answer to r{i}" for i in range(6)]
    assert found["answers"][6] == f"{WRAP_UP} loop"  # the looping crew: its wrap-up answer
    assert found["later"] == "answer to later"
    assert found["total"] - 7 <= 5  # the looping crew's tool runs (the cache answers repeats)


def test_guard_kickoff_ends_a_killed_crew_with_the_final_answer(measured: dict[str, Any]) -> None:
    assert measured["kickoff"]["ended"] == f"returned {WRAP_UP} loop"
    assert measured["kickoff error"]["ended"] == "raised LoopDetected"


def test_a_skip_only_crew_that_keeps_searching_is_ended_by_escalation(
    measured: dict[str, Any],
) -> None:
    found = measured["skip"]
    assert found["ended"] == f"returned {WRAP_UP} loop"
    assert found["total"] <= 10


def test_a_warning_reaches_the_model_as_a_note_on_the_tool_result(measured: dict[str, Any]) -> None:
    assert any("[fuzeguard warning] You called `search` with the same arguments 3 times"
               in text
               for text in measured["warn"]["shown"])


def test_two_registered_guards_judge_each_call_once(measured: dict[str, Any]) -> None:
    """And the crew still ends with the model's final answer: the second guard's LLM-call hook
    does not block the call the first one asked for it in."""
    assert measured["two guards"]["calls"] == measured["kill/same"]["calls"]
    assert measured["two guards"]["ended"] == f"returned {WRAP_UP} loop"


def test_the_ladder_ends_an_alternation_at_its_tenth_call(measured: dict[str, Any]) -> None:
    found = measured["ladder/alternate"]
    assert found["total"] == 8
    assert found["ended"] == "kickoff returned the final answer"


def test_the_docs_example_runs_and_prints_what_the_page_shows(crewai_python: str, tmp_path: Path) -> None:
    code, shown = side_example(
        "# with crewai (run by tests/integrations/test_integration_crewai.py in its own environment)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([crewai_python, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == shown.rstrip()
