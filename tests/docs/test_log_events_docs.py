"""The table of log events in ``docs/concepts.md`` is generated from the package's ``emit()``
calls (``scripts/gen_log_events_docs.py``). A newcomer's review: the hand-kept table missed 10
emitted events, three of them documented nowhere, and listed one twice."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    path = ROOT / "scripts" / "gen_log_events_docs.py"
    spec = importlib.util.spec_from_file_location("gen_log_events_docs", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # its dataclass looks its module up
    spec.loader.exec_module(script)
    return script


def _rows() -> list[str]:
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `(fuzeguard\.[a-z_]+)` \|", page, re.M)


def test_the_log_events_table_is_what_the_script_writes() -> None:
    script = _script()
    assert script.PAGE.read_text(encoding="utf-8") == script.page(), (
        "docs/concepts.md's log events table is stale: run python scripts/gen_log_events_docs.py"
    )


def test_every_event_written_in_an_emit_call_has_one_row() -> None:
    """Read independently of the script: every event name an ``emit()`` call names literally,
    and every ``fuzeguard.*`` name handed to the helpers that emit it."""
    written: set[str] = set()
    for path in (ROOT / "fuzeguard").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        written |= set(re.findall(r'emit\(\s*"[a-z]+",\s*"(fuzeguard\.[a-z_]+)"', text))
        written |= set(re.findall(r'_warn_once\(\s*"(fuzeguard\.[a-z_]+)"', text))
        for pair in re.findall(r'name = "(fuzeguard\.[a-z_]+)" if .+ else "(fuzeguard\.[a-z_]+)"',
                               text):
            written |= set(pair)
    rows = _rows()
    assert len(rows) == len(set(rows)), "a row is listed twice"
    assert written == set(rows)


def test_the_keys_and_levels_are_read_through_helpers_and_dicts() -> None:
    events = _script().emitted()
    assert events["fuzeguard.loop_detected"].levels == ["warning"]
    assert {"layer", "args_fp", "message", "args"} <= set(events["fuzeguard.loop_detected"].keys)
    assert events["fuzeguard.ask_unanswered"].keys[-1] == "error"  # through _log(**fields)
    assert events["fuzeguard.mcp_session_per_process"].keys == ["message"]
