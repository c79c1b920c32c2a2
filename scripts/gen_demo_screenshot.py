"""Render ``fuze demo`` as the documentation shows it: ``docs/images/fuze-demo.svg``, a picture of
the terminal (its colours included), drawn with rich's SVG export from the demo's real output.

``tests/docs/test_docs_site.py`` fails when the committed picture differs from what this writes::

    python scripts/gen_demo_screenshot.py            # rewrite the picture
    python scripts/gen_demo_screenshot.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PICTURE = ROOT / "docs" / "images" / "fuze-demo.svg"


class _Terminal(io.StringIO):
    """The demo's output stream, taken for a terminal so that it prints its colours."""

    def isatty(self) -> bool:
        return True


def render() -> str:
    from rich.console import Console
    from rich.text import Text

    from fuzeguard._private.cli.demo import main as demo

    out = _Terminal()
    demo([], out=out)
    console = Console(record=True, width=112, file=io.StringIO(), color_system="truecolor")
    console.print(Text.from_ansi("$ fuze demo\n" + out.getvalue()))
    return console.export_svg(title="fuze demo", unique_id="fuze-demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render docs/images/fuze-demo.svg")
    parser.add_argument("--check", action="store_true", help="exit 1 if the picture is out of date")
    args = parser.parse_args(argv)
    text = render()
    if PICTURE.exists() and PICTURE.read_text(encoding="utf-8") == text:
        return 0
    if args.check:
        sys.stderr.write(f"{PICTURE.relative_to(ROOT)} is out of date\n")
        return 1
    PICTURE.write_text(text, encoding="utf-8")
    sys.stderr.write(f"{PICTURE.relative_to(ROOT)} written\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
