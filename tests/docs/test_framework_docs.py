"""The framework pages (docs/frameworks/): the tables of measured behaviour are the ones the
framework tests recorded (``tests/helpers/framework_behaviour.json``), rendered by
``scripts/gen_framework_docs.py``; each page opens with its install line, a few lines with the
reader's own model, then its table; the index links every page."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "frameworks"
# The model names the opening lines use: a model the reader would write for that framework.
MODEL = re.compile(r'"(openai:)?gpt-4o-mini"|"gemini-[\w.-]+"|"(global\.anthropic\.)?claude-[\w.-]+"')
_OPENING = re.compile(
    r"\A# [^\n]+\n\n```bash\npip install \"(?P<extra>fuzeguard(\[[\w-]+\])?)\"\n```\n\n"
    r"(?P<intro>(?:(?!```).)+?)```py\n(?P<code>.*?)\n```\n", re.S,
)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_framework_docs", ROOT / "scripts" / "gen_framework_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _framework_pages() -> list[Path]:
    return [p for p in sorted(PAGES.glob("*.md")) if p.name != "index.md"]


def test_the_framework_pages_show_the_recorded_behaviour() -> None:
    gen = _generator()
    record = json.loads(gen.RECORD.read_text(encoding="utf-8"))
    assert sorted(PAGES.glob("*.md")) == gen.PAGES
    for path in gen.PAGES:
        page = path.read_text(encoding="utf-8")
        assert gen.render(page, record) == page, (
            f"docs/frameworks/{path.name} is out of date: run python scripts/gen_framework_docs.py"
        )


def test_every_recorded_framework_has_its_table_on_one_page() -> None:
    gen = _generator()
    shown = Counter(m["name"] for path in gen.PAGES
                    for m in gen._BLOCK.finditer(path.read_text(encoding="utf-8")))
    assert set(shown) == set(json.loads(gen.RECORD.read_text(encoding="utf-8")))
    assert set(shown.values()) == {1}


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


def test_the_index_links_every_framework_page_and_the_nav_lists_them() -> None:
    index = (PAGES / "index.md").read_text(encoding="utf-8")
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for path in _framework_pages():
        assert f"]({path.name})" in index, f"docs/frameworks/index.md does not link {path.name}"
        assert f"frameworks/{path.name}" in nav, f"mkdocs.yml does not list {path.name}"


@pytest.mark.parametrize("page", [p.name for p in _framework_pages()])
def test_a_framework_page_opens_with_install_own_model_lines_then_its_table(page: str) -> None:
    """Install line, then a few lines with the reader's own model (valid Python, a real model
    name for the pages that have one), then the measured table before the rest of the page."""
    text = (PAGES / page).read_text(encoding="utf-8")
    opening = _OPENING.match(text)
    assert opening, f"{page} must open with its install line and a ```py block"
    code = opening["code"]
    ast.parse(code)  # valid Python, as written
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    if "## Measured" in text:
        assert MODEL.search(code) or "mcp" in page, f"{page}'s opening lines name no model"
        measured = text.index("## Measured")
        assert text.index("<!-- behaviour:") > measured
        assert text.index("## How it works") > text.rindex("<!-- end behaviour -->")


# Frameworks installed only in an environment of their own (their pins clash with the others'):
# the fixture giving that environment's interpreter.
_SIDE_ENVS = {"crewai.md": "crewai_python", "strands.md": "strands_python"}


@pytest.mark.parametrize("page", [p.name for p in _framework_pages()])
def test_the_opening_lines_import_what_the_installed_framework_has(
    page: str, request: pytest.FixtureRequest
) -> None:
    """Each import of the opening lines resolves against the installed framework (in its own
    environment for a framework installed only there)."""
    code = _OPENING.match((PAGES / page).read_text(encoding="utf-8"))["code"]  # type: ignore[index]
    imports = [n for n in ast.parse(code).body if isinstance(n, ast.ImportFrom | ast.Import)]
    if page in _SIDE_ENVS:
        python = request.getfixturevalue(_SIDE_ENVS[page])
        lines = "\n".join(ast.unparse(node) for node in imports)
        done = subprocess.run([python, "-c", lines], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return
    checked = 0
    for node in imports:
        modules = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        if any(importlib.util.find_spec(str(m).split(".")[0]) is None for m in modules):
            continue
        try:
            exec(compile(ast.Module([node], []), page, "exec"), {})
        except ModuleNotFoundError as exc:
            # a client the framework loads from a package of its own (agent-framework-openai)
            missing = exc.name or getattr(exc.__cause__, "name", None)
            assert missing and importlib.util.find_spec(missing.split(".")[0]) is None, exc
            continue
        checked += 1
    assert checked, f"{page}'s opening lines import nothing from an installed framework"
