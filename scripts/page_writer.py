"""The command line of a generated page: write it, or with ``--check`` exit 1 when the committed
page differs from what its generator writes (the tests run the check)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(page: Path, render: Callable[[], str], script: str,
                   argv: Sequence[str] | None = None) -> int:
    """``render()`` the page's text and write it to ``page``, or only compare (``--check``)."""
    parser = argparse.ArgumentParser(description=f"write {page.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    text = render()
    name = page.relative_to(ROOT)
    if page.read_text(encoding="utf-8") == text:
        return 0
    if args.check:
        print(f"{name} is out of date: run python scripts/{script}", file=sys.stderr)
        return 1
    page.write_text(text, encoding="utf-8")
    print(f"{name} written", file=sys.stderr)
    return 0
