"""Per-call overhead of this checkout against another revision of it, optionally patched.

    python benchmarks/against.py REV                      # this checkout and REV
    python benchmarks/against.py REV --patch FILE.diff    # ... and REV with FILE.diff applied
    python benchmarks/against.py REV --quick              # small counts, one round

Each code tree (``REV`` as ``git archive`` gives it, the same with the patch applied by
``git apply``, and this checkout) runs the overhead section's three workloads (``overhead.py``:
one tool returning an int, one tool of an acknowledging kind returning a short text, a rotation of
three read/search tools; default layers, the iteration count checked only) in a fresh process of
its own, which measures the floor and agentguard's three guards on the same calls too
(``peer_ratios.py``), so that each ratio is taken in one process. The trees take turns, round
after round; each figure printed is the median over the rounds of the guarded overhead / floor,
with the median floor in microseconds, and of the guarded overhead / agentguard's. Nothing is
written anywhere but a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS = ("int", "text", "rotation")

# Runs in the code tree named first on its command line: one round of the three workloads.
_DRIVER = r"""
import json, sys
tree, here, calls, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path[:0] = [tree, here]
import overhead, peer_ratios, peers
from _common import floor_batch, median, per_call, queries, text
from fuzeguard import guard

qs = queries(calls, seed=1)
overhead.ANSWERS[:] = [text(80, seed=10_000 + i) for i in range(calls)]
variants = {"floor": floor_batch([{"query": q, "limit": i} for i, q in enumerate(qs)])}
for name, tools in (("int", (overhead.count,)), ("text", (overhead.convert,)),
                    ("rotation", overhead.ROTATION)):
    variants[name] = overhead._batch(tuple(guard(f, **overhead.HIGH_CAP) for f in tools), qs)
    variants["bare " + name] = overhead._bare(tools, qs)
    variants["agentguard " + name] = overhead._bare(tuple(
        peers.agentguard_stacked(f, max_tool_repeats=peer_ratios.ABOVE_WINDOW) for f in tools), qs)
for fn in variants.values():
    fn()
samples = {name: [] for name in variants}
for _ in range(repeats):
    for name, fn in variants.items():
        samples[name].append(per_call(fn, calls))
t = {name: median(values) for name, values in samples.items()}
out = {name: (t[name] - t["bare " + name]) / t["floor"] for name in ("int", "text", "rotation")}
out.update({"agentguard " + name: (t[name] - t["bare " + name])
            / (t["agentguard " + name] - t["bare " + name]) for name in ("int", "text", "rotation")})
out["floor"] = t["floor"]
print(json.dumps(out))
"""


def _tree(rev: str, patch: Path | None, into: Path) -> Path:
    """``rev``'s package unpacked into ``into`` (and ``patch`` applied): the tree to import."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "fuzeguard"],
                             capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    if patch is not None:
        subprocess.run(["git", "apply", "--include=fuzeguard/*", str(patch.resolve())],
                       cwd=into, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("rev", help="a commit of this repository")
    parser.add_argument("--patch", type=Path, help="a diff to apply to REV as well")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    calls, repeats, rounds = (500, 3, 1) if args.quick else (10_000, 7, args.rounds)
    with tempfile.TemporaryDirectory(prefix="fuze-against-") as workdir:
        trees = {args.rev: _tree(args.rev, None, Path(workdir) / "rev")}
        if args.patch is not None:
            trees[f"{args.rev} + {args.patch.name}"] = _tree(args.rev, args.patch,
                                                             Path(workdir) / "patched")
        trees["this checkout"] = ROOT
        results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for i in range(rounds):
            order = list(trees.items())
            for name, tree in order[i % len(order):] + order[:i % len(order)]:
                done = subprocess.run(
                    [sys.executable, "-c", _DRIVER, str(tree), str(HERE), str(calls), str(repeats)],
                    cwd=workdir, capture_output=True, text=True, check=True,
                    env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
                )
                results[name].append(json.loads(done.stdout))
    for name, rows in results.items():
        floor = statistics.median(row["floor"] for row in rows) * 1e6
        ratios = ", ".join(f"{w} {statistics.median(row[w] for row in rows):.2f}x"
                           for w in WORKLOADS)
        peer = ", ".join(f"{w} {statistics.median(row['agentguard ' + w] for row in rows):.2f}x"
                         for w in WORKLOADS)
        print(f"{name}: {ratios} (guarded overhead / floor, median of {rounds} rounds; "
              f"floor {floor:.2f} µs); {peer} (guarded overhead / agentguard's three guards')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
