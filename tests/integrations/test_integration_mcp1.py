"""mcp 1.x ``FastMCP`` tools with ``session_guard``: real servers and client sessions, in a Python
with mcp 1.x (``mcp1_python``), running ``mcp1_stuck.py``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.served import check_served
from tests.helpers.stuck_agents import ACTIONS, ROOT, VARIANTS, Behaviour, check, short, side_example

STOP = "Tool calls in this session are stopped"
HELPERS = Path(__file__).resolve().parents[1] / "helpers"


@pytest.fixture(scope="module")
def measured(mcp1_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("mcp1") / "measured.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([mcp1_python, str(HELPERS / "mcp1_stuck.py"), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def _ended(seen: list[list[Any]]) -> str:
    stopped = sum(1 for error, text in seen if error and STOP in text)
    if stopped:
        return f"session stopped: the last {stopped} of {len(seen)} calls answered with the stop message"
    return f"client gave up after {len(seen)} calls"


def _first_guard_text(seen: list[list[Any]]) -> str | None:
    for _, text in seen:
        if text not in ("3 results for laptops", "nothing new"):
            return short(text)
    return None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_client_behaves_as_recorded(measured: dict[str, Any], action: str, variant: str) -> None:
    found = measured[f"{action}/{variant}"]
    check("mcp1", action, variant, Behaviour(
        tool_runs=found["total"],
        after_first_detection=found["after"],
        model_turns=len(found["seen"]),
        ended=_ended(found["seen"]),
        model_shown=_first_guard_text(found["seen"]),
    ))


def test_a_skip_is_a_normal_result_carrying_the_message(measured: dict[str, Any]) -> None:
    found = measured["skip/same"]
    assert found["total"] == 4  # warned at the 3rd and 4th call, skipped at the 5th
    assert found["seen"][4] == [False, found["seen"][4][1]]
    assert not found["seen"][5][0]  # skipped again
    assert found["seen"][6][0] and STOP in found["seen"][6][1]  # two skips did not help: killed
    assert found["seen"][4][1].startswith("You called `search` with the same arguments 5 times")


def test_a_kill_answers_every_later_call_of_the_session_with_the_stop_message(
    measured: dict[str, Any],
) -> None:
    found = measured["kill/alternate"]
    assert found["total"] == 7
    assert all(error and STOP in text for error, text in found["seen"][7:])
    assert found["seen"][7][1].startswith("Error executing tool tool_b: You are going round")


def test_each_client_session_has_its_own_run(measured: dict[str, Any]) -> None:
    first, second = measured["two sessions"]["seen"]
    assert [error for error, _ in first] == [False, False, False, False, True]
    assert [error for error, _ in second] == [False, False, False, False, True]
    assert measured["two sessions"]["total"] == 8


def test_a_warning_reaches_the_client_as_a_note_on_the_result(measured: dict[str, Any]) -> None:
    seen = measured["warn/same"]["seen"]
    assert seen[1] == [False, "3 results for laptops"]
    assert seen[3][1].startswith("3 results for laptops\n\n[fuzeguard warning] You called `search`")


def test_stateless_http_keeps_a_looping_client_and_a_polling_client_apart(
    measured: dict[str, Any],
) -> None:
    found = measured["stateless http"]
    assert [error for error, _ in found["looping"]] == [False] * 4 + [True] * 2
    assert found["total"] == 4
    assert found["polling"][-1] == [False, "Job job-7: done"]


def test_the_docs_example_runs_and_prints_what_the_page_shows(mcp1_python: str, tmp_path: Path) -> None:
    code, shown = side_example(
        "# with mcp 1.x (run by tests/integrations/test_integration_mcp1.py in its own environment)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([mcp1_python, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == shown.rstrip()


def test_a_budget_warning_reaches_the_client_once_with_the_next_result(
    measured: dict[str, Any],
) -> None:
    """The run's notes for the model (here a ``warn_at`` warning) go with the next text result,
    once (``test_notes_to_model.py`` for the other integrations)."""
    seen = measured["budget note"]
    warning = "50% of the call budget used (2 of 4 calls): wrap up"
    assert [text.count(warning) for _, text in seen[:4]] == [0, 1, 0, 0]
    assert seen[1] == [False, seen[1][1]] and seen[1][1].startswith("value of k2")
    assert seen[4][0] and "Tool calls in this session are stopped" in seen[4][1]


def test_a_server_with_only_session_guard_serves_concurrent_sessions_and_ends_the_looping_one(
    measured: dict[str, Any],
) -> None:
    """The serving scenario of every framework (``served.py``), with mcp 1.x: six legitimate
    sessions answered, the looping one stopped, a later one answered."""
    found = measured["served"]
    answers, looping = found["answers"][:-1], found["answers"][-1]
    assert looping.startswith("stopped: ") and STOP in looping
    check_served(answers, found["later"], found["total"])
