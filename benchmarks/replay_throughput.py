"""Replay throughput: a 1,000,000-call trace replayed, against the in-process guard's per-call cost.

    python benchmarks/replay_throughput.py            # 1,000,000 calls
    python benchmarks/replay_throughput.py --quick    # 60,000 calls (a smoke run)

All in one process run: the same guarded agent-like workload (three tools, distinct arguments,
results that differ with them, so that no layer fires) is

1. run in-process with ``trace=`` set, recording the trace (and the recording cost per call);
2. replayed with ``Replayer`` (what ``fuze replay`` runs) under the same config, in one pass over
   the whole file, reading and parsing included; and, interleaved with it, after every 10% of the
   trace, a batch of the same number of calls made in-process without a trace: the live guard's
   own per-call cost (the tools cost next to nothing). Interleaving puts each replay slice next to
   a live batch measured under the same machine load; the ratio reported is the median of the
   slice-by-slice ratios, and both totals are printed too.

Every phase checks that all calls were counted and nothing fired, and the replay checks it saw
exactly the live detections (none). One result per stdout line.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import structlog

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.replay import Replayer

CONFIG = Config.from_dict({"defaults": {"max_iterations": 10**9}})


def _tools() -> list[Callable[..., Any]]:
    @guard
    def web_search(query: str, limit: int = 10) -> str:
        return f"results for {query[::-1]}"

    @guard
    def read_file(path: str) -> str:
        return f"contents of {path[::-1]}"

    @guard
    def run_tests(target: str, verbose: bool = False) -> dict[str, Any]:
        return {"target": target, "passed": 12, "failed": 0}

    return [web_search, read_file, run_tests]


def _agent(calls: int, trace: str | None) -> float:
    """Seconds per guarded call for ``calls`` calls in one run (with a trace when given)."""
    search, read, test = _tools()
    settings: dict[str, Any] = {"trace": trace} if trace else {}
    t0 = time.perf_counter()
    with fuzeguard.run("bench", config=CONFIG, **settings) as run:
        for i in range(0, calls, 3):
            search(f"query number {i}", limit=i % 7)
            read(f"src/module_{i}.py")
            test(f"tests/test_{i}.py")
        stats = run.stats()
    seconds = time.perf_counter() - t0
    assert stats.calls == calls, stats
    assert stats.detections == 0, run.detections[:3]
    return seconds / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60,000 calls instead of 1,000,000")
    args = parser.parse_args(argv)
    calls = 60_000 if args.quick else 1_000_002  # a multiple of the three tools
    slice_size = -(-calls // 30) * 3  # a tenth of the calls, rounded up to whole rounds of tools
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))

    folder = tempfile.mkdtemp(prefix="fuze-replay-bench-")
    trace = os.path.join(folder, "trace.jsonl")
    live: list[float] = []
    replayed: list[float] = []
    try:
        _agent(min(calls, 30_000), None)  # warm-up: plans resolved, caches filled
        recording = _agent(calls, trace)
        size = os.path.getsize(trace)

        clock = [0.0, 0.0]  # start of the current replay slice, time spent outside replay

        def pause(lines_in_slice: int) -> None:
            now = time.perf_counter()
            replayed.append((now - clock[0]) / lines_in_slice)
            live.append(_agent(slice_size, None))
            clock[0] = time.perf_counter()
            clock[1] += clock[0] - now

        def interleaved(lines: Any) -> Any:
            """The trace's lines; after each slice, time that slice and a live batch."""
            for i, line in enumerate(lines):
                if i and i % slice_size == 0:
                    pause(slice_size)
                yield line

        found: list[Any] = []
        replayer = Replayer(CONFIG, on_detection=found.append)
        with open(trace, encoding="utf-8") as f:
            clock[0] = t0 = time.perf_counter()
            summary = replayer.replay_lines(interleaved(f), trace)
            if calls > slice_size * len(replayed):
                pause(calls - slice_size * len(replayed))
            total = time.perf_counter() - t0 - clock[1]
        assert summary.calls == calls and summary.problems == [] and found == [], summary
    finally:
        if os.path.exists(trace):
            os.remove(trace)
        os.rmdir(folder)

    live_mean = statistics.mean(live)
    replay_mean = total / calls
    ratio = statistics.median(r / lv for r, lv in zip(replayed, live, strict=True))
    print(f"calls: {calls:,} (trace file {size / 1e6:.0f} MB, {size / calls:.0f} bytes per line)")
    print(f"live guard, in-process, no trace: {live_mean * 1e6:.2f} µs per call "
          f"({len(live)} batches of {slice_size:,} calls)")
    print(f"live guard, recording the trace: {recording * 1e6:.2f} µs per call")
    print(f"replay of the trace (read + parse + layers): {replay_mean * 1e6:.2f} µs per call, "
          f"{1 / replay_mean:,.0f} calls/s, {total:.1f} s for the whole trace")
    print(f"replay / live per-call cost: {ratio:.2f}x (median of {len(live)} interleaved slices)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
