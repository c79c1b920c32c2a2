#!/usr/bin/env python3
"""Replay the recorded coding-agent runs in traces/ with `python -m fuzeguard` of this checkout and
print one summary line; each figure is explained in ../outcomes.py and README.md.

    python benchmarks/corpora/real/score.py                    # default configuration
    python benchmarks/corpora/real/score.py --detail           # also each run that is not right
    python benchmarks/corpora/real/score.py --config my.toml   # under another configuration

Exit 0 only when no resolved run is killed, every loop is flagged and every stuck loop is stopped in
time; 2 when the corpus or the replay is broken."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import outcomes

if __name__ == "__main__":
    sys.exit(outcomes.main(pathlib.Path(__file__).resolve().parent, sys.argv[1:]))
