"""docs/quality.md is generated from measurements: it must match what the generator computes now.

The trade-off table's rows other than the defaults' take minutes to measure, so the check does not
measure them: it reads them from benchmarks/corpora/tradeoff.json, and finds the page out of date
when they were measured on another state of the package, the scorers or the corpora (the
generator then measures them again)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_detection_quality_page_is_up_to_date() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_quality_docs.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        "docs/quality.md is out of date: run `python scripts/gen_quality_docs.py` and commit it\n"
        + done.stderr[-2000:]
    )
