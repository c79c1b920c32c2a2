"""Structured logs: event names, flat keys, no raw values unless asked (SPEC §7)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import structlog
import structlog.testing

import fuzeguard
from fuzeguard import LoopDetected, guard


def loop_until_killed(**options: Any) -> list[dict[str, Any]]:
    tool = guard(lambda query: "r", name="web_search", **options)
    with structlog.testing.capture_logs() as logs, fuzeguard.run("t"):
        with pytest.raises(LoopDetected):
            for _ in range(5):
                tool("secret query text")
    return logs


def test_detections_and_kills_are_logged_with_event_names() -> None:
    logs = loop_until_killed()
    # Warned at the 3rd and 4th identical call, killed at the 5th (a streak of five is certain).
    assert [e["event"] for e in logs] == ["fuzeguard.loop_detected"] * 3 + ["fuzeguard.run_killed"]
    assert [e["action"] for e in logs[:3]] == ["warn", "warn", "kill"]


def test_detection_events_have_flat_keys() -> None:
    event = loop_until_killed()[0]
    expected = {"layer", "fn", "run_id", "run_name", "call_index", "kind", "action", "count",
                "threshold", "args_fp", "message", "observe"}
    assert expected <= set(event)
    assert all(not isinstance(v, (dict, list)) for v in event.values())
    assert event["log_level"] == "warning"


def test_raw_arguments_are_not_logged_by_default() -> None:
    logs = loop_until_killed()
    assert "secret query text" not in repr(logs)
    assert all(len(e["args_fp"]) == 32 for e in logs if "args_fp" in e)


def test_raw_arguments_are_logged_when_opted_in() -> None:
    logs = loop_until_killed(log_values=True)
    assert "secret query text" in logs[0]["args"]


def test_limits_are_logged_as_limit_reached() -> None:
    tool = guard(lambda x: x, name="t")
    with structlog.testing.capture_logs() as logs, fuzeguard.run(max_calls=1):
        tool(1)
        with pytest.raises(LoopDetected):
            tool(2)
    assert [e["event"] for e in logs] == ["fuzeguard.limit_reached", "fuzeguard.run_killed"]


def test_the_library_never_configures_structlog() -> None:
    """It works with whatever the application configured."""
    code = (
        "import structlog, fuzeguard\n"
        "from fuzeguard import guard\n"
        "calls = []\n"
        "structlog.configure = lambda *a, **k: calls.append(1)\n"
        "t = guard(lambda x: 'r', name='t', on_loop='warn')\n"
        "with fuzeguard.run():\n"
        "    [t(1) for _ in range(6)]\n"
        "assert calls == [], calls\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("ok")


def test_application_processors_see_fuzeguard_events() -> None:
    seen: list[str] = []

    def grab(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        seen.append(event["event"])
        raise structlog.DropEvent

    structlog.configure(processors=[grab])
    tool = guard(lambda query: "r", name="web_search")
    try:
        with fuzeguard.run("t"), pytest.raises(LoopDetected):
            for _ in range(5):
                tool("q")
    finally:
        structlog.reset_defaults()
    assert "fuzeguard.run_killed" in seen


def test_import_is_cheap() -> None:
    """No heavy imports at import time: structlog and rapidfuzz load on first use; the package's
    version, a process pool, asyncio and the ``ask`` machinery's futures only when needed (the
    ``fuze`` command's start-up is part of every command it runs)."""
    code = (
        "import sys, fuzeguard, fuzeguard._private.cli\n"
        "heavy = [m for m in ('structlog', 'rapidfuzz', 'numpy', 'pydantic', 'asyncio',\n"
        "    'concurrent.futures', 'multiprocessing', 'importlib.metadata') if m in sys.modules]\n"
        "print(heavy)\n"
        "tool = fuzeguard.guard(lambda query: query, name='search')\n"
        "with fuzeguard.run('plain', config=fuzeguard.Config()):\n"
        "    tool('a'); tool('b')\n"
        "print('rapidfuzz' in sys.modules)\n"  # the default layers compare no texts here
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "False"]


FIRST_DETECTION = (
    "import sys, time, fuzeguard\n"
    "tool = fuzeguard.guard(lambda query: '3 results', name='search', on_loop='warn')\n"
    "costs, imported = [], []\n"
    "with fuzeguard.run('t', config=fuzeguard.Config()):\n"
    "    for _ in range(5):\n"
    "        before = len(sys.modules)\n"
    "        start = time.thread_time()\n"
    "        tool('same')\n"
    "        costs.append(time.thread_time() - start)\n"
    "        imported.append(len(sys.modules) - before)\n"
    "print(*costs, file=sys.stderr)\n"
    "print(*imported, file=sys.stderr)\n"
)


@pytest.mark.parametrize("setup", ["", "import logging; logging.basicConfig()\n"],
                         ids=["nothing configured", "a stdlib handler"])
def test_the_first_detection_imports_nothing_and_costs_no_more_than_5_ms_over_the_next(
    setup: str
) -> None:
    """A newcomer's review: the first detection imported the logging stack inside the guarded
    call (0.1-0.3 s, blocking an asyncio agent's loop). Calls 3 and 4 both warn (dedup); the
    time is the calling thread's CPU time, which other processes on the machine do not add to."""
    done = subprocess.run([sys.executable, "-c", setup + FIRST_DETECTION], capture_output=True,
                          text=True, check=True, timeout=120)
    *events, costs, imported = done.stderr.splitlines()
    assert len(events) == 3 and all("fuzeguard.loop_detected" in e for e in events)
    first, second = (float(x) for x in costs.split()[2:4])
    assert imported.split()[2:] == ["0", "0", "0"]
    assert first - second <= 0.005, f"first detection {first * 1000:.2f} ms, next {second * 1000:.2f} ms"
