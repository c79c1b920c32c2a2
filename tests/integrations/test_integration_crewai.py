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


MODEL_LOOP_ANSWER = f"returned {WRAP_UP} model loop"


@pytest.mark.parametrize("kind", ["unknown", "invalid"])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(
    measured: dict[str, Any], kind: str,
) -> None:
    """CrewAI answers an unknown tool with "... it doesn't exist" (no tool hook sees it: the LLM
    call is judged as rejected) and arguments the tool does not take with an error (judged as
    the tool's call). Either way ``crew.kickoff()`` ends within 8 LLM calls with the model's
    answer, no tool having run."""
    found = measured[f"model loop {kind}"]
    assert found["ended"] == MODEL_LOOP_ANSWER and found["llm calls"] <= 8 and found["runs"] == {}
    assert found["killed"] == ([["crewai-kickoff/model", "model.rejected"]] if kind == "unknown"
                               else [["crewai-kickoff", "search"]])


def test_the_same_two_calls_in_turn_are_ended_at_their_third_round(measured: dict[str, Any]) -> None:
    """A ReAct agent asks for one action per LLM call: the batch of two is two LLM calls. The 3rd
    round is warned and ended at its 2nd call (6 actions), then the final answer's call."""
    found = measured["model loop batch"]
    assert found["ended"] == MODEL_LOOP_ANSWER and found["llm calls"] == 7
    assert found["runs"] == {"tool_a": 3, "tool_b": 2}


def test_a_legitimate_twelve_turn_run_with_distinct_calls_is_answered_normally(
    measured: dict[str, Any],
) -> None:
    found = measured["model loop legit"]
    assert found["ended"] == "returned 12 laptops compared" and found["llm calls"] == 13
    assert not found["looped"]


def test_max_model_calls_ends_the_agent_at_the_llm_call_after_the_limit(
    measured: dict[str, Any],
) -> None:
    found = measured["model loop limit"]
    assert found["ended"] == MODEL_LOOP_ANSWER and found["llm calls"] == 6  # the 6th: the answer's
    assert found["limits"] == [["crewai-kickoff/model", 6]]
    assert measured["max_model_calls=0"].startswith("max_model_calls takes a whole number of 1 or more")


def test_a_model_loop_with_exit_behavior_error_raises_loop_detected(measured: dict[str, Any]) -> None:
    found = measured["model loop error"]
    assert found["ended"] == "raised _Killed (a LoopDetected)" and found["llm calls"] == 3


def test_model_calls_are_traced_and_fuze_replay_judges_them_alike(measured: dict[str, Any]) -> None:
    assert measured["model loop traced"] == {"ended": MODEL_LOOP_ANSWER, "replayed": "the same kill"}
