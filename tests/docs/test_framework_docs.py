"""The tables of measured behaviour in docs/frameworks.md are the ones the framework tests
recorded (``tests/helpers/framework_behaviour.json``), rendered by ``scripts/gen_framework_docs.py``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_framework_docs", ROOT / "scripts" / "gen_framework_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_frameworks_page_shows_the_recorded_behaviour() -> None:
    gen = _generator()
    page = gen.PAGE.read_text(encoding="utf-8")
    assert gen.render(page, json.loads(gen.RECORD.read_text(encoding="utf-8"))) == page, (
        "docs/frameworks.md is out of date: run python scripts/gen_framework_docs.py"
    )


def test_every_recorded_framework_has_its_table_on_the_page() -> None:
    gen = _generator()
    page = gen.PAGE.read_text(encoding="utf-8")
    shown = {m["name"] for m in gen._BLOCK.finditer(page)}
    assert shown == set(json.loads(gen.RECORD.read_text(encoding="utf-8")))


def test_every_framework_records_each_action_on_each_loop_shape() -> None:
    gen = _generator()
    record = json.loads(gen.RECORD.read_text(encoding="utf-8"))
    expected = {f"{a}/{v}" for a in gen.ACTIONS for v in gen.VARIANTS}
    assert {name: set(rows) for name, rows in record.items()} == dict.fromkeys(record, expected)


def test_a_table_is_rendered_from_the_recorded_rows() -> None:
    gen = _generator()
    rows = {"kill/same": {"tool_runs": 3, "after_first_detection": 0, "model_turns": 4,
                          "ended": "LoopDetected raised", "model_shown": None}}
    lines = gen.table(rows).splitlines()
    assert lines[2] == "| `kill` | identical calls | 3 (0) | 4 | LoopDetected raised | (only real results) |"
