"""``docs/logging.md``: each recipe, run in a fresh Python process with nothing configured but
what it configures, prints what the page shows (standard error included). A newcomer's review:
``logging.getLogger("fuzeguard").setLevel(...)`` changed nothing, and there was no recipe."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs_examples import blocks

PAGE = "logging.md"
# A run's id, and the argument fingerprints keyed with its secret, are new in every run: the
# page shows one, the check reads any.
_RUN_ID = re.compile(r'((?:run_id|args_fp)=|"(?:run_id|args_fp)": ")[0-9a-f]{12,32}')


def _recipes() -> list[tuple[str, str, int]]:
    found = [(b.body, b.output, b.line) for b in blocks(PAGE) if b.lang == "python"]
    assert all(output is not None for _, output, _ in found), "each recipe shows its output"
    return found  # type: ignore[return-value]


@pytest.mark.parametrize(("code", "shown", "line"), _recipes(),
                         ids=[f"{PAGE}:{line}" for *_, line in _recipes()])
def test_each_logging_recipe_prints_what_the_page_shows(
    code: str, shown: str, line: int, tmp_path: Path
) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    printed = _RUN_ID.sub(r"\g<1>…", done.stderr + done.stdout).rstrip()
    assert printed == _RUN_ID.sub(r"\g<1>…", shown).rstrip(), f"{PAGE}:{line} printed:\n{printed}"


def test_the_logger_level_governs_events_when_structlog_is_not_configured() -> None:
    """The ``fuzeguard`` logger at CRITICAL: no event line reaches standard error, even with the
    root logger's handler at ERROR (the review's reproduction)."""
    code = (
        "import logging\n"
        "logging.basicConfig(level=logging.ERROR)\n"
        "logging.getLogger('fuzeguard').setLevel(logging.CRITICAL)\n"
        "import fuzeguard\n"
        "t = fuzeguard.guard(lambda q: 'r', name='search', on_loop='warn')\n"
        "with fuzeguard.run('quiet'):\n"
        "    [t('same') for _ in range(4)]\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stderr == ""
