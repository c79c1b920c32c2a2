"""The labelled corpus of other loop guards' own test scenarios (``benchmarks/corpora/peers``, in
the repository): with the default configuration, every loop is flagged by its deadline and no
legitimate trace is flagged. ``python benchmarks/corpora/peers/score.py --detail`` shows each wrong
trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCORER = Path(__file__).resolve().parents[2] / "benchmarks" / "corpora" / "peers" / "score.py"


def test_the_labelled_corpus_scores_perfectly_with_the_default_configuration() -> None:
    done = subprocess.run([sys.executable, str(SCORER), "--detail"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loops caught on time 30/30" in done.stdout and "false positives 0/35" in done.stdout
