"""1. What a guarded call costs, as a ratio to agentguard's guards on the same calls.

    python benchmarks/peer_ratios.py            # three runs, each in a fresh process; the medians
    python benchmarks/peer_ratios.py --quick    # small counts, one run

A ratio to a floor operation moves with the machine: blake3 of the arguments' JSON costs twice as
much on one CPU as on another, and fuzeguard's overhead does not move with it. A ratio to another
guard library doing its own work on the same calls, measured in the same process, holds far
better. The peer is agentguard (``agentguard47`` on PyPI, no dependencies), its three tool-call
guards stacked on each tool (``peers.agentguard_stacked``: ``LoopGuard``, ``FuzzyLoopGuard``,
``RetryGuard``). It reads no result.

The three workloads of the overhead section (``overhead.py``: one tool returning an int, one tool
of an acknowledging kind returning a short text, a rotation of three read/search tools whose texts
change), each made bare, through fuzeguard's default layers and through agentguard's guards, the
nine batches interleaved and repeated; the overhead is the median guarded time minus the median
bare time, in CPU time of the process. Each run is a fresh process, and each figure is the median
over the runs of that run's ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import overhead
import peers
from _common import Row, median, per_call, queries, show, text, us

from fuzeguard import guard

SECTION = "1. overhead against agentguard"
# The issue's targets: fuzeguard's overhead / agentguard's three guards' overhead, per workload.
TARGETS = {"int": 1.25, "text": 1.5, "rotation": 2.5}
WORKLOADS = {"int": (overhead.count,), "text": (overhead.convert,), "rotation": overhead.ROTATION}
WHAT = {
    "int": "one tool, int result",
    "text": "one tool of an acknowledging kind, short text result",
    "rotation": "rotation of three read/search tools, changing text results",
}
# FuzzyLoopGuard counts one name in a window of 10: above that, one tool called thousands of times
# in a row is let through, as fuzeguard's rows set their iteration cap above the batch.
ABOVE_WINDOW = 11
RUNS = 3


def once(calls: int, repeats: int) -> dict[str, float]:
    """One run in this process: per workload, fuzeguard's and agentguard's overhead (seconds)."""
    qs = queries(calls, seed=1)
    overhead.ANSWERS[:] = [text(80, seed=10_000 + i) for i in range(calls)]
    variants = {}
    for name, tools in WORKLOADS.items():
        variants[f"bare {name}"] = overhead._bare(tools, qs)
        variants[f"fuzeguard {name}"] = overhead._batch(
            tuple(guard(f, **overhead.HIGH_CAP) for f in tools), qs)
        variants[f"agentguard {name}"] = overhead._bare(
            tuple(peers.agentguard_stacked(f, max_tool_repeats=ABOVE_WINDOW) for f in tools), qs)
    rotation = WORKLOADS["rotation"]
    # What the rotation costs before the layers' judgement, and with the one layer that reads
    # every text for meaning (progress: the content units of each answer, against the window's).
    variants["fuzeguard rotation, no layer"] = overhead._batch(
        tuple(guard(f, layers=[]) for f in rotation), qs)
    variants["fuzeguard rotation, progress alone"] = overhead._batch(
        tuple(guard(f, layers=["progress"], **overhead.HIGH_CAP) for f in rotation), qs)
    for fn in variants.values():  # warm-up: plans resolved, caches filled
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):  # interleaved, so that drifts in machine load hit every variant alike
        for name, fn in variants.items():
            samples[name].append(per_call(fn, calls))
    t = {name: median(values) for name, values in samples.items()}
    # Each variant's overhead over the bare calls of its workload (the name's second word).
    return {name: value - t["bare " + name.split()[1].rstrip(",")]
            for name, value in t.items() if not name.startswith("bare ")}


def measure(quick: bool, facts: dict[str, float] | None = None) -> list[Row]:
    """The section's rows; ``facts`` (if given) gets the rotation's three ratios by name."""
    calls, repeats, runs = (1_000, 3, 1) if quick else (10_000, 9, RUNS)
    results = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, __file__, "--once", str(calls), str(repeats)],
            capture_output=True, text=True, check=False, timeout=1800,
        )
        if done.returncode != 0:
            raise RuntimeError(f"peer_ratios.py --once failed: {done.stderr[-2000:]}")
        results.append(json.loads(done.stdout))
    rows = []
    found: dict[str, float] = {}
    for name in WORKLOADS:
        ratio = statistics.median(r[f"fuzeguard {name}"] / r[f"agentguard {name}"] for r in results)
        found[name] = ratio
        ours = statistics.median(r[f"fuzeguard {name}"] for r in results)
        theirs = statistics.median(r[f"agentguard {name}"] for r in results)
        rows.append(Row(
            SECTION, f"fuzeguard's overhead / agentguard's three guards', {WHAT[name]}",
            f"{ratio:.2f}x  ({us(ours)} / {us(theirs)})", f"≤ {TARGETS[name]:g}x",
            ratio <= TARGETS[name],
        ))
    theirs = statistics.median(r["agentguard rotation"] for r in results)
    for part, what in (("no layer", "no layer: binding, fingerprints, records and each text "
                        "judged (skeleton, error reading)"),
                       ("progress alone", "the progress layer alone (each text's content units "
                        "against the window's)")):
        ratio = statistics.median(r[f"fuzeguard rotation, {part}"] / r["agentguard rotation"]
                                  for r in results)
        found[f"rotation, {part}"] = ratio
        ours = statistics.median(r[f"fuzeguard rotation, {part}"] for r in results)
        rows.append(Row(SECTION, f"the rotation with {what} / agentguard's three guards'",
                        f"{ratio:.2f}x  ({us(ours)} / {us(theirs)})"))
    rows.append(Row(SECTION, "runs (fresh processes) the medians are taken over; calls per "
                    "batch, interleaved repeats per run", f"{runs}; {calls:,}, {repeats}"))
    if facts is not None:
        facts.update(found)
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--once"]:
        print(json.dumps(once(int(argv[1]), int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one run")
    show(measure(parser.parse_args(argv).quick))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
