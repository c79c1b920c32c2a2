#!/usr/bin/env python3
"""Score the AgentDojo function-calling runs in traces/ (replayed with `python -m fuzeguard` of this
checkout) by their outcomes, in one line: a kill that stops a write sent again (writes.json names the
write tools) is counted apart from the resolved runs killed. ../outcomes.py and README.md say what
each figure means; exit 0 only when every figure is perfect, 2 when the corpus or the replay is
broken.

    python benchmarks/corpora/agentdojo/score.py [--detail] [--config my.toml]
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import outcomes

if __name__ == "__main__":
    sys.exit(outcomes.main(pathlib.Path(__file__).resolve().parent, sys.argv[1:]))
