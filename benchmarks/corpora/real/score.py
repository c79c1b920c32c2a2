#!/usr/bin/env python3
"""Replay the recorded real-agent runs in traces/ through `fuze replay` with the default configuration
and print one summary line (see README.md):
  harmful kills   resolved, loop-free runs killed before their last call          (goal 0)
  warned          resolved, loop-free runs that got any warning                   (noise)
  loops flagged   first warn/skip/kill at or before loop_at
  loops stopped   kill at or before loop_at + 2
  saved           calls not made on cost-limit runs, from the first kill on
Exit 0 only when there is no harmful kill and every loop is flagged and stopped in time.

    python benchmarks/corpora/real/score.py            # one summary line
    python benchmarks/corpora/real/score.py --detail   # each harmful kill and each loop not stopped in time

Replays with `python -m fuzeguard` of this checkout (the fuzeguard package two levels up, whatever
`fuze` is on PATH), from an empty working directory with no FUZE_* variables."""
import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CHECKOUT = HERE.parents[2]


def score(trace_dir: pathlib.Path, truth: dict, detail: bool) -> int:
    names = sorted(truth)  # truth.json names each run's trace without the .gz of its file
    missing = [n for n in names if not (trace_dir / f"{n}.gz").is_file()]
    if missing:
        print(f"{len(missing)} labelled traces missing from {trace_dir}, such as {missing[0]}.gz")
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUZE_")}
    env["PYTHONPATH"] = str(CHECKOUT)
    dets = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as wd:  # an empty directory: no fuze.toml of the project applies
        for i in range(0, len(names), 200):
            p = subprocess.run([sys.executable, "-m", "fuzeguard", "replay", "--format", "json",
                                *[str(trace_dir / f"{n}.gz") for n in names[i:i + 200]]],
                               cwd=wd, env=env, capture_output=True, text=True, timeout=900)
            if p.returncode not in (0, 1):
                print(f"fuze replay failed ({p.returncode}): {p.stderr[-300:]}")
                return 2
            for line in p.stdout.splitlines():
                if line.strip():
                    d = json.loads(line)
                    dets[pathlib.Path(d["trace"]).name.removesuffix(".gz")].append(d)

    def first(n, acts):
        c = [d["call"] for d in dets.get(n, []) if d["action"] in acts]
        return min(c) if c else None

    clean = [n for n in names if truth[n]["loop_at"] is None and truth[n]["outcome"] == "resolved"]
    harm = [n for n in clean if (k := first(n, ("kill",))) is not None and k < truth[n]["n_calls"]]
    warned = [n for n in clean if first(n, ("warn", "skip", "kill")) is not None]
    loops = [n for n in names if truth[n]["loop_at"] is not None]
    flagged = [n for n in loops
               if (f := first(n, ("warn", "skip", "kill"))) is not None and f <= truth[n]["loop_at"]]
    stopped = [n for n in loops if (k := first(n, ("kill",))) is not None and k <= truth[n]["loop_at"] + 2]
    never = [n for n in loops if first(n, ("kill",)) is None]
    lim = [n for n in names if truth[n]["limit_exhausted"]]
    saved = [truth[n]["n_calls"] - k + 1 for n in lim if (k := first(n, ("kill",))) is not None]
    if detail:
        for n in harm:
            kills = [d for d in dets[n] if d["action"] == "kill"]
            print("harmful kill", n, "at call", first(n, ("kill",)), "of", truth[n]["n_calls"], "by",
                  kills[0].get("layer"))
        for n in loops:
            if n not in stopped:
                print("loop not stopped in time", n, "loop_at", truth[n]["loop_at"], "first kill",
                      first(n, ("kill",)), "|", truth[n]["why"][:100])
    print(f"harmful kills {len(harm)}/{len(clean)}; warned {len(warned)}/{len(clean)}; loops flagged by "
          f"loop_at {len(flagged)}/{len(loops)}, stopped by loop_at+2 {len(stopped)}/{len(loops)} "
          f"(never stopped {len(never)}); cost-limit runs stopped {len(saved)}/{len(lim)}, "
          f"calls saved {sum(saved)}")
    return 0 if not harm and len(flagged) == len(loops) and len(stopped) == len(loops) else 1


if __name__ == "__main__":
    sys.exit(score(HERE / "traces", json.loads((HERE / "truth.json").read_text()), "--detail" in sys.argv))
