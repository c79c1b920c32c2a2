"""Every code example in the docs runs, and prints what the page says it prints.

Rules the pages follow, so that this test can read them:

- each ```python block is executed, in page order, in one namespace per page (as a reader would
  run them one after the other), in an empty working directory;
- a ```text block right after a python block is the output that block prints, compared exactly;
- a ```toml block preceded by ``<!-- write: NAME -->`` is written to the file NAME first;
- a block that imports an agent framework that is not installed is skipped, with the rest of
  its page still run (install the ``frameworks`` extra to run them all).

Log events are captured (``structlog.testing.capture_logs``) so that they do not mix with the
printed output.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from structlog.testing import capture_logs

DOCS = Path(__file__).resolve().parents[2] / "docs"
# The pages written by hand whose examples this test runs (configuration.md is generated and
# checked by test_config_docs.py; pages owned by other topics carry their own tests).
PAGES = ["index.md", "getting-started.md", "concepts.md", "custom-layers.md", "stopped.md",
         "recipes.md", "troubleshooting.md", "why-not-max-turns.md", "defaults.md",
         "reference/exceptions.md", "reference/environment.md", "security.md",
         *sorted(f"frameworks/{p.name}" for p in (DOCS / "frameworks").glob("*.md"))]
FRAMEWORKS = {"langchain_core", "langgraph", "agents", "pydantic_ai", "mcp", "smolagents", "crewai",
              "google", "agent_framework", "strands", "claude_agent_sdk"}

_FENCE = re.compile(
    r"(?:<!-- write: (?P<target>[^ ]+) -->\n)?```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)\n```",
    re.S,
)


@dataclass
class Block:
    lang: str
    body: str
    line: int
    target: str | None
    output: str | None = None


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a page; a text block right after a python block becomes its output."""
    text = (DOCS / page).read_text(encoding="utf-8")
    found: list[Block] = []
    last_end = -1
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        between = text[last_end : m.start()] if last_end >= 0 else "x"
        if m["lang"] == "text" and found and found[-1].lang == "python" and not between.strip():
            found[-1].output = m["body"]
        else:
            found.append(Block(m["lang"], m["body"], line, m["target"]))
        last_end = m.end()
    return found


def run_page(page: str) -> list[str]:
    """Run a page's examples; return the ones skipped for a missing framework."""
    # A real module, registered while the page runs: dataclasses and pickling look classes up
    # through sys.modules.
    module = types.ModuleType(f"docs_{page.replace('-', '_').replace('/', '_')[:-3]}")
    namespace = module.__dict__
    sys.modules[module.__name__] = module
    try:
        return _run_blocks(page, namespace)
    finally:
        del sys.modules[module.__name__]


def _run_blocks(page: str, namespace: dict[str, object]) -> list[str]:
    skipped = []
    for block in blocks(page):
        if block.target is not None:
            Path(block.target).write_text(block.body + "\n", encoding="utf-8")
            continue
        if block.lang != "python":
            continue
        out = io.StringIO()
        filename = f"{page}:{block.line}"
        # Source for inspect.getsource(), which some frameworks call on tools (smolagents).
        linecache.cache[filename] = (len(block.body), None, block.body.splitlines(True), filename)
        try:
            with capture_logs(), contextlib.redirect_stdout(out):
                exec(compile(block.body, filename, "exec"), namespace)
        except ImportError as exc:  # also ModuleNotFoundError
            if (exc.name or "").split(".")[0] in FRAMEWORKS:
                skipped.append(f"{page}:{block.line} needs {exc.name}")
                continue
            raise
        if block.output is not None:
            assert out.getvalue().rstrip() == block.output.rstrip(), (
                f"{page}:{block.line} printed something else"
            )
    return skipped


def test_every_page_written_by_hand_is_checked() -> None:
    assert all((DOCS / page).is_file() for page in PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_docs_examples_run_and_print_what_the_page_shows(
    page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The OpenAI Agents SDK would try to export traces of the scripted run (no network here).
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    skipped = run_page(page)
    if skipped:
        pytest.skip("; ".join(skipped))


def test_the_block_reader_pairs_outputs_and_files() -> None:
    """The reader itself: outputs attach to the python block before them, files are marked."""
    page = DOCS / "getting-started.md"
    found = blocks(page.name)
    python = [b for b in found if b.lang == "python"]
    assert any(b.output for b in python)
    assert any(b.target == "fuze.toml" for b in found)
