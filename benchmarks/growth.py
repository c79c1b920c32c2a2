"""2. The cost of a call does not grow with the run, and neither does the run's memory.

Time: every call is timed on its own; the report compares the median per-call time of the calls
around call 100 with that of the calls around call 100,000 of the same run, over several runs.
Memory: the resident set size after a warm-up of 100,000 calls against the one after 1,000,000.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from _common import Row, median, queries, rss_bytes, us

import fuzeguard
from fuzeguard import Config, guard

TIME_TARGET = 1.2
MEMORY_TARGET_MB = 4.0
AROUND = 50  # calls timed on each side of the point of interest


def search(query: str, limit: int) -> str:
    return f"{limit * 7919:,} results"  # new for each call; digit groups: long digit runs read as ids


def _timed_run(
    tool: Callable[..., Any], qs: list[str], points: tuple[int, ...]
) -> dict[int, list[float]]:
    """Make len(qs) calls in one fresh run; return the per-call times around each point."""
    windows = {p: range(p - AROUND, p + AROUND) for p in points}
    wanted = {i for w in windows.values() for i in w}
    times: dict[int, float] = {}
    clock = time.perf_counter
    with fuzeguard.run("growth", config=Config()) as run:
        for i, q in enumerate(qs, start=1):
            if i in wanted:
                t0 = clock()
                tool(q, i)
                times[i] = clock() - t0
            else:
                tool(q, i)
        assert run.stats().calls == len(qs) and run.stats().detections == 0
    return {p: [times[i] for i in w] for p, w in windows.items()}


def measure(quick: bool) -> list[Row]:
    late = 10_000 if quick else 100_000
    runs = 2 if quick else 5
    million = 50_000 if quick else 1_000_000
    warm_up = million // 10
    tool = guard(search, max_iterations=10**9)
    qs = queries(late + AROUND, seed=2)

    early_times: list[float] = []
    late_times: list[float] = []
    for _ in range(runs):
        got = _timed_run(tool, qs, (100, late))
        early_times += got[100]
        late_times += got[late]
    early, later = median(early_times), median(late_times)
    ratio = later / early

    # Memory: arguments are made on the fly so that only the run's own state can grow.
    gc.collect()
    with fuzeguard.run("memory", config=Config()) as run:
        for i in range(warm_up):
            tool(f"memory probe {i}", i)
        gc.collect()
        before = rss_bytes()
        for i in range(warm_up, million):
            tool(f"memory probe {i}", i)
        gc.collect()
        after = rss_bytes()
        calls = run.stats().calls
    assert calls == million, calls
    grown_mb = (after - before) / 2**20
    return [
        Row("2. growth", "per-call time around call 100", us(early)),
        Row("2. growth", f"per-call time around call {late:,}", us(later)),
        Row("2. growth", f"call {late:,} / call 100", f"{ratio:.2f}x", f"≤ {TIME_TARGET:g}x",
            ratio <= TIME_TARGET),
        Row("2. growth", f"RSS growth from call {warm_up:,} to call {million:,} of one run",
            f"{grown_mb:.2f} MB", f"< {MEMORY_TARGET_MB:g} MB", grown_mb < MEMORY_TARGET_MB),
    ]
