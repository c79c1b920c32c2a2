"""Generate the tables of measured behaviour in ``docs/frameworks/*.md`` from the framework tests.

Each framework test (``tests/integrations/test_integration_*.py``) runs a scripted model that loops forever
under each action, with the real framework, and checks what it measured against
``tests/helpers/framework_behaviour.json`` (``FUZE_RECORD_BEHAVIOUR=1`` rewrites that file from the
measurements). This script renders that file into each framework's page, between the markers
``<!-- behaviour: NAME -->`` and ``<!-- end behaviour -->``; ``tests/docs/test_framework_docs.py``
fails when a page differs from what it writes::

    python scripts/gen_framework_docs.py            # rewrite the tables
    python scripts/gen_framework_docs.py --check    # exit 1 if they are out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs" / "frameworks").glob("*.md"))
RECORD = ROOT / "tests" / "helpers" / "framework_behaviour.json"
ACTIONS = {"kill": "`kill`", "warn": "`warn`", "skip": "`skip`", "ladder": '`["warn", "skip", "kill"]`'}
VARIANTS = {"same": "identical calls", "alternate": "A/B alternation"}
_BLOCK = re.compile(r"(<!-- behaviour: (?P<name>\w+) -->\n)(?P<body>.*?)(<!-- end behaviour -->)", re.S)


def table(rows: dict[str, dict[str, Any]]) -> str:
    """One framework's measurements as a Markdown table (actions, then loop shapes, in order)."""
    lines = [
        "| action | loop | tool runs (after the first detection) | model turns | how the run ended "
        "| what the model was shown first instead of a result |",
        "|---|---|---|---|---|---|",
    ]
    for action, action_text in ACTIONS.items():
        for variant, variant_text in VARIANTS.items():
            row = rows.get(f"{action}/{variant}")
            if row is None:
                continue
            after = row["after_first_detection"]
            shown = row["model_shown"]
            lines.append(
                f"| {action_text} | {variant_text} | {row['tool_runs']} "
                f"({'no detection' if after is None else after}) | {row['model_turns']} "
                f"| {_cell(row['ended'])} | {_cell(shown) if shown else '(only real results)'} |"
            )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def render(page: str, record: dict[str, dict[str, dict[str, Any]]]) -> str:
    def block(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in record:
            raise SystemExit(f"a page shows a table for {name!r}, which no test recorded")
        return m.group(1) + table(record[name]) + m.group(4)

    return _BLOCK.sub(block, page)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only report whether it is stale")
    args = parser.parse_args(argv)
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    stale = 0
    for path in PAGES:
        page = path.read_text(encoding="utf-8")
        text = render(page, record)
        if text == page:
            continue
        if args.check:
            print(f"{path.relative_to(ROOT)} is out of date: run python scripts/gen_framework_docs.py")
            stale = 1
            continue
        path.write_text(text, encoding="utf-8")
        print(f"{path.relative_to(ROOT)} written")
    return stale


if __name__ == "__main__":
    sys.exit(main())
