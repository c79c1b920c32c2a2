"""Strands Agents with ``LoopGuard`` hooks: scripted models that loop forever under each action,
requests served concurrently, an agent called as a tool, a conversation keyed as one run (real
strands-agents package in its own environment, ``strands_python``, running ``strands_stuck.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from side_env import measured_by, run_in

from tests.helpers.served import ANSWER, check_served
from tests.helpers.stuck_agents import (
    ACTIONS,
    VARIANTS,
    WRAP_UP,
    Tally,
    check_batch_ended,
    check_legit_answered,
    check_model_calls_replayed,
    check_run,
    side_example,
)


@pytest.fixture(scope="module")
def measured(strands_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return measured_by(strands_python, "strands_stuck.py", tmp_path_factory)


def _tally(found: dict[str, Any]) -> Tally:
    tally = Tally()
    tally.runs["all"] = found["total"]
    tally.at_first_detection = None if found["after"] is None else found["total"] - found["after"]
    return tally


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(measured: dict[str, Any], action: str, variant: str) -> None:
    found = measured["stuck"][f"{action}/{variant}"]
    check_run("strands", action, variant, _tally(found), shown=found["shown"], turns=found["turns"],
              ended=found["ended"])


def test_a_kill_ends_the_invocation_with_a_final_answer_and_keeps_the_loop_detected(
    measured: dict[str, Any],
) -> None:
    found = measured["stuck"]["kill/same"]
    assert found["text"].startswith("Stopped: the agent was looping (dedup at tool call 5")
    # Asked once more, with no tool, for a final answer: this model calls a tool again, so the
    # invocation ends with the canned answer, and no tool runs.
    assert found["total"] == 4 and found["turns"] == 6  # warned at the 3rd and 4th call
    assert found["error"] == {"type": "LoopDetected", "layer": "dedup", "calls": 4, "killed": True}


def test_after_a_kill_the_final_answer_is_the_models_own_written_without_tools(
    measured: dict[str, Any],
) -> None:
    found = measured["wrap up"]
    assert found["text"] == WRAP_UP and found["total"] == 4 and found["turns"] == 6
    assert found["asked"].startswith("[fuzeguard] Your tool calls were stopped: You called `search`")
    canned = measured["canned"]
    assert canned["text"].startswith("Stopped: the agent was looping") and canned["turns"] == 5


def test_a_warning_reaches_the_model_with_the_tools_result(measured: dict[str, Any]) -> None:
    shown = measured["stuck"]["warn/same"]["shown"]
    assert shown[:2] == ["3 results for laptops"] * 2
    assert shown[2].startswith(
        "3 results for laptops [fuzeguard warning] You called `search` with the same arguments "
        "3 times"
    )


def test_a_skip_answers_with_the_message_as_a_result(measured: dict[str, Any]) -> None:
    found = measured["stuck"]["skip/same"]
    assert found["shown"][4].startswith("You called `search` with the same arguments 5 times")
    assert found["total"] == 4  # warned at the 3rd and 4th call


def test_concurrent_requests_with_only_the_hooks_added_are_runs_of_their_own(
    measured: dict[str, Any],
) -> None:
    found = measured["served"]
    check_served(found["answers"], found["later"], found["tool_runs"])
    assert found["looping"].startswith("Stopped: the agent was looping")


def test_an_agent_called_in_a_tool_is_guarded_in_a_run_of_its_own(measured: dict[str, Any]) -> None:
    found = measured["nested"]
    assert found["tool_runs"] == 4 and found["killed"] == ["researcher"]
    assert found["text"].startswith("Stopped: the agent was looping (dedup")


def test_an_agent_called_as_a_tool_without_its_own_guard_is_guarded_by_the_callers(
    measured: dict[str, Any],
) -> None:
    """Only the outer agent has the hooks: the inner agent (``as_tool()``) is still ended in a
    child run after 4 tool runs, and the outer agent answers with what it got back. Invoked on
    its own afterwards, the inner agent is not guarded (its model gives up after 25 turns)."""
    found = measured["nested unguarded"]
    assert found["tool_runs"] == 4 and found["killed"] == ["researcher"]
    assert found["text"].startswith("Stopped: the agent was looping (dedup")
    assert found["alone"] == found["give_up"] == 25 and found["alone_logged"] == 0


def test_a_conversation_keyed_as_one_run_carries_its_history_across_requests(
    measured: dict[str, Any],
) -> None:
    texts = measured["conversation"]
    assert texts[:4] == [ANSWER] * 4  # the 3rd and 4th requests' searches were warned
    assert texts[4].startswith("Stopped: the agent was looping")


def test_parallel_calls_of_one_model_turn_take_one_step_of_the_ladder(
    measured: dict[str, Any],
) -> None:
    found = measured["parallel"]
    # turn 1's third call (all three in flight: certain) takes the first step; turn 2's first
    # call is an early warning (a streak shorter than five), its others the next step (skip)
    assert found["actions"] == ["warn", "warn", "skip", "skip", "kill"]
    assert found["tool_runs"] == 4 and found["turns"] == 4  # the 4th: asked for a final answer
    assert found["text"].startswith("Stopped: the agent was looping")


def test_the_docs_example_runs_and_prints_what_the_page_shows(strands_python: str, tmp_path: Path) -> None:
    code, shown = side_example(
        "# with strands (run by tests/integrations/test_integration_strands.py in its own environment)"
    )
    printed = run_in(strands_python, ["-c", code], tmp_path)
    assert printed.rstrip().splitlines()[-2:] == shown.rstrip().splitlines()


@pytest.mark.parametrize("kind", ["unknown", "invalid"])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(
    measured: dict[str, Any], kind: str,
) -> None:
    """Strands answers an unknown tool ("Unknown tool") or arguments a ``@tool`` function does
    not take ("Validation failed") without running it: the model calls are judged, in the model
    calls' run, and the invocation ends within 8 model calls with the model's final answer."""
    found = measured["model loop"][kind]
    assert found["text"] == WRAP_UP and found["turns"] <= 8 and found["tool_runs"] == {}
    assert found["killed"] == [["shopper/model", "model.rejected"]]
    # The model calls' tokens are their run's cost: the two rejected before the kill (an unknown
    # tool), or the three calls made (arguments rejected when their tools were called).
    assert found["error"] == ["model.rejected", {"unknown": 200.0, "invalid": 300.0}[kind]]


def test_the_same_batch_of_two_calls_every_turn_is_ended_within_six_model_calls(
    measured: dict[str, Any],
) -> None:
    found = measured["model loop"]["batch"]
    check_batch_ended(found["text"], found["turns"], found["tool_runs"])


def test_a_legitimate_twelve_turn_run_with_distinct_calls_is_answered_normally(
    measured: dict[str, Any],
) -> None:
    found = measured["model loop"]["legit"]
    check_legit_answered(found["text"], found["turns"], found["detected"])


def test_max_model_calls_ends_the_invocation_at_the_model_call_after_the_limit(
    measured: dict[str, Any],
) -> None:
    found = measured["max model calls"]
    assert found["text"] == WRAP_UP and found["turns"] == 6  # 5, then the final answer's
    assert found["limits"] == [["shopper/model", 6]]


def test_max_model_calls_is_checked() -> None:
    from fuzeguard.integrations._shared.model_calls import ModelCalls

    # The hook provider takes it to ModelCalls, which checks it (strands is not importable here).
    with pytest.raises(ValueError, match="max_model_calls takes a whole number of 1 or more"):
        ModelCalls(max_model_calls=True)


def test_model_calls_are_traced_and_fuze_replay_judges_them_alike(measured: dict[str, Any]) -> None:
    check_model_calls_replayed(Path(measured["traced"]))
