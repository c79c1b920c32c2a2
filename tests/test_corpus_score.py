"""The labelled corpus of other loop guards' own test scenarios (``../shared/corpus``, beside the
checkout): with the default configuration, every loop is flagged by its deadline and no legitimate
trace is flagged. ``python ../shared/corpus/score.py --detail`` shows each wrong trace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCORER = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "score.py"


def test_the_labelled_corpus_scores_perfectly_with_the_default_configuration() -> None:
    assert SCORER.is_file(), f"the labelled corpus is expected at {SCORER} (shared/ beside the checkout)"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, str(SCORER), "--detail"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loops caught on time 30/30" in done.stdout and "false positives 0/35" in done.stdout
