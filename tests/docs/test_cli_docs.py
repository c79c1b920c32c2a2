"""The ``fuze`` sessions shown in ``examples/traces/README.md`` and ``docs/stopped.md`` print what
the pages say.

Each ```console block holds ``$ fuze ...`` commands, each followed by its output. A line ``...``
in the shown output stands for lines left out: the shown parts must appear, in order, in the
real output.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fuzeguard._private.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "examples" / "traces" / "README.md", ROOT / "docs" / "stopped.md"]
_CONSOLE = re.compile(r"```console\n(.*?)\n```", re.S)


def _sessions() -> list[tuple[str, str]]:
    found = []
    blocks = [b for page in PAGES for b in _CONSOLE.findall(page.read_text(encoding="utf-8"))]
    for block in blocks:
        command: str | None = None
        output: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    found.append((command, "\n".join(output)))
                command, output = line[2:], []
            else:
                output.append(line)
        if command is not None:
            found.append((command, "\n".join(output)))
    return found


def test_the_page_shows_fuze_sessions() -> None:
    assert len(_sessions()) >= 3


@pytest.mark.parametrize(("command", "shown"), _sessions(), ids=[c for c, _ in _sessions()])
def test_each_session_prints_what_the_page_shows(
    command: str, shown: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)
    argv = shlex.split(command)
    assert argv[0] == "fuze"
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    position = 0
    for part in shown.split("\n...\n"):
        part = part.strip("\n").removeprefix("...\n").removesuffix("\n...")
        if not part or part == "...":
            continue
        at = out.find(part, position)
        assert at >= 0, f"not in the output of `{command}`:\n{part}\n--- output ---\n{out}"
        position = at + len(part)
