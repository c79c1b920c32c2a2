"""Write the timeline picture shown in docs/stopped.md: the stop report of the example trace
``ping_pong.jsonl`` replayed under ``live.toml``, as ``fuze report --html`` draws it.

Run from anywhere: ``python scripts/gen_report_docs.py``. ``tests/reports/test_report.py`` checks the
committed picture is what this script writes.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PICTURE = ROOT / "docs" / "images" / "stop-timeline.svg"


def picture() -> str:
    from fuzeguard import Config
    from fuzeguard._private.reports.report_html import picture as draw
    from fuzeguard._private.reports.trace_reports import trace_reports

    here = os.getcwd()
    os.chdir(ROOT)  # the trace is named as the docs name it
    try:
        config = Config.load("examples/traces/live.toml")
        [report] = trace_reports(["examples/traces/ping_pong.jsonl"], config)
    finally:
        os.chdir(here)
    return draw(report) + "\n"


def main() -> None:
    PICTURE.parent.mkdir(parents=True, exist_ok=True)
    PICTURE.write_text(picture(), encoding="utf-8")
    print(f"{PICTURE.relative_to(ROOT)} written")


if __name__ == "__main__":
    main()
