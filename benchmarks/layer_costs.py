"""Per-layer cost per call: ``layer.check(run, call)`` against a run filled to the layer's window,
and what each call leaves behind (``Plan.features``: ``observe_*`` methods and shared features),
on small results and on 100 KB results. Medians of repeated batches, in microseconds, one run.

    python benchmarks/layer_costs.py            # full
    python benchmarks/layer_costs.py --quick    # a few seconds
    python benchmarks/layer_costs.py --write    # full, and the table of docs/layers.md rewritten

The history holds distinct results (the common case: nothing fires, no early exit from a
detection), so this is the price every call pays.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

import fuzeguard
from fuzeguard import guard
from fuzeguard._private.meaning.records import Call, CallRecord
from fuzeguard.layers import BUILTIN_LAYERS

LAYERS_MD = Path(__file__).resolve().parent.parent / "docs" / "layers.md"
BEGIN = "<!-- layer costs: written by python benchmarks/layer_costs.py --write -->"
END = "<!-- end of layer costs -->"
# Layers that are inert (left out of plans) until given something to check.
OPTIONS: dict[str, dict[str, Any]] = {"cost_velocity": {"cost_velocity_threshold": 1.0}}
RUN_OPTIONS: dict[str, dict[str, Any]] = {
    "limits": {"max_calls": 10**9, "max_errors": 10**9, "max_cost": 10.0**9, "max_duration": "1d"},
}


# Random bytes read as text: a space for one byte value in seven, else a lowercase letter (words
# of six letters on average). Bytes made and translated in C: a 100 KB text in well under 1 ms.
_AS_TEXT = bytes(32 if b % 7 == 0 else 97 + b % 26 for b in range(256))


def text(rng: random.Random, size: int) -> str:
    return rng.randbytes(size).translate(_AS_TEXT).decode("ascii")


def measure(name: str, size: int, repeats: int, batch: int) -> tuple[float, float]:
    """(check µs, features µs) for one layer with results of ``size`` characters."""
    rng = random.Random(size)

    def tool(query: str) -> str:
        return query

    guarded = guard(tool, layers=[name], **OPTIONS.get(name, {}))
    with fuzeguard.run(**RUN_OPTIONS.get(name, {})) as run:
        plan = guarded.guard.plan(run.config)
        layer = plan.layers[0]
        needed = max(plan.history_needed, 1)
        run._grow(max(needed, run._capacity))
        results = [text(rng, size) for _ in range(needed + 1)]
        for i in range(needed):
            arguments = {"query": f"question number {i} about the report"}
            record = CallRecord(
                fn="tool", index=i + 1, args_fp=plan.fingerprint_args(arguments),
                result_fp=i.to_bytes(16, "big"), cost=0.1, start=float(i), duration=0.5,
                features=plan.features(arguments, results[i], None),
            )
            with run._lock:
                run._book(record)
        arguments = {"query": "a new question about the report"}
        call = Call("tool", needed + 1, plan.fingerprint_args(arguments), arguments)
        check_times = []
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            for _ in range(batch):
                layer.check(run, call)
            check_times.append((time.perf_counter_ns() - t0) / batch / 1000)
        feature_times = []
        last = results[-1]
        for _ in range(max(3, repeats // (10 if size > 10_000 else 1))):
            t0 = time.perf_counter_ns()
            n = 1 if size > 10_000 else batch
            for _ in range(n):
                plan.features(arguments, last, None)
            feature_times.append((time.perf_counter_ns() - t0) / n / 1000)
    return statistics.median(check_times), statistics.median(feature_times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (seconds)")
    parser.add_argument("--write", action="store_true",
                        help="rewrite the table in docs/layers.md with this run's figures")
    args = parser.parse_args(argv)
    repeats, batch = (5, 20) if args.quick else (25, 200)
    print(f"{'layer':<15}{'check small':>13}{'check 100KB':>13}{'keep small':>12}{'keep 100KB':>12}"
          "   (µs per call, median)")
    rows = []
    for name in BUILTIN_LAYERS:
        small = measure(name, 60, repeats, batch)
        big = measure(name, 100_000, repeats, max(1, batch // 10))
        print(f"{name:<15}{small[0]:>13.2f}{big[0]:>13.2f}{small[1]:>12.2f}{big[1]:>12.1f}")
        label = f"`{name}`" + (f" ({', '.join(OPTIONS[name])} set)" if name in OPTIONS else "")
        rows.append(f"| {label} | {small[0]:.2f} | {big[0]:.2f} | {small[1]:.2f} | {big[1]:.1f} |")
    if args.write:
        write_table(rows)
    return 0


def write_table(rows: list[str]) -> None:
    """Put the table between the markers of docs/layers.md."""
    text = LAYERS_MD.read_text(encoding="utf-8")
    head, found, rest = text.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise SystemExit(f"{LAYERS_MD}: the markers {BEGIN!r} and {END!r} are missing")
    table = "\n".join([
        "| layer | check, small | check, 100 KB | keep, small | keep, 100 KB |",
        "|---|---|---|---|---|",
        *rows,
    ])
    LAYERS_MD.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
