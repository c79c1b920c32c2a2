#!/usr/bin/env python3
"""Score `fuze replay` against the labelled corpus beside this file.

    python benchmarks/corpora/peers/score.py                 # default configuration, summary line
    python benchmarks/corpora/peers/score.py --detail        # every trace that is not right, and why
    python benchmarks/corpora/peers/score.py --config my.toml

Runs `python -m fuzeguard replay --format json` of this checkout (the fuzeguard package two levels
up, whatever `fuze` is on PATH) over traces/*.jsonl.gz from an empty working directory with no FUZE_*
variables, takes each trace's FIRST detection (warn, skip or kill), and compares it with truth.json:
  loop       caught when the first detection comes at or before `deadline`; late after it; missed if none
  legit      any detection is a false positive
  ambiguous  reported, not scored
Exit status 0 only when every loop is caught on time and no legitimate trace is flagged.
"""
from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHECKOUT = HERE.parents[2]


def label(trace: str) -> str:
    """The truth.json key of a trace file: its name without the compression suffix."""
    name = pathlib.Path(trace).name
    return name[:-3] if name.endswith(".gz") else name


def main(argv: list[str]) -> int:
    truth = json.loads((HERE / "truth.json").read_text())
    traces = sorted(p for p in (HERE / "traces").glob("*.jsonl.gz") if label(p.name) in truth)
    if len(traces) != len(truth):
        print(f"{len(truth)} traces labelled, {len(traces)} found in {HERE / 'traces'}")
        return 2
    cmd = [sys.executable, "-m", "fuzeguard", "replay", "--format", "json"]
    if "--config" in argv:
        cmd += ["--config", str(pathlib.Path(argv[argv.index("--config") + 1]).resolve())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUZE_")}
    env["PYTHONPATH"] = str(CHECKOUT)
    with tempfile.TemporaryDirectory() as cwd:
        r = subprocess.run([*cmd, *map(str, traces)], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=600)
    if r.returncode != 0:
        print(f"fuze replay exited {r.returncode}: {r.stderr.strip()[-500:]}")
        return 2
    first: dict[str, dict] = {}
    for line in r.stdout.splitlines():
        if line.strip():
            d = json.loads(line)
            name = label(d["trace"])
            if name not in first or d["call"] < first[name]["call"]:
                first[name] = d
    score: collections.Counter[str] = collections.Counter()
    wrong = []
    for p in traces:
        name = label(p.name)
        t, d = truth[name], first.get(name)
        call = d["call"] if d else None
        if t["truth"] == "loop":
            verdict = "missed" if d is None else ("caught" if call <= t["deadline"] else "late")
        elif t["truth"] == "legit":
            verdict = "false_positive" if d else "quiet"
        else:
            verdict = "ambiguous_flagged" if d else "ambiguous_quiet"
        score[verdict] += 1
        if verdict in ("missed", "late", "false_positive"):
            wrong.append((name, verdict, t, d))
    if "--detail" in argv:
        for name, verdict, t, d in wrong:
            got = (f"first detection at call {d['call']} ({d['layer']}, {d['action']})" if d
                   else "no detection")
            print(f"{name}: {verdict}; deadline {t['deadline']}; {got}\n    {t['why']}")
    loops = score["caught"] + score["late"] + score["missed"]
    legit = score["false_positive"] + score["quiet"]
    print(f"loops caught on time {score['caught']}/{loops} (late {score['late']}, missed {score['missed']}); "
          f"false positives {score['false_positive']}/{legit}; ambiguous flagged "
          f"{score['ambiguous_flagged']}/{score['ambiguous_flagged'] + score['ambiguous_quiet']}")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
