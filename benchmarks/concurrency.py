"""4. Concurrency: many threads sharing one run, and many asyncio runs side by side.

Threads: 16 threads make distinct calls into one run; the run must count every call exactly, and
with ``max_calls`` set, exactly that many calls may run however the threads interleave.
asyncio: 1,000 tasks each open their own run and make 100 calls, all with the same arguments
sequence, yielding to the loop inside every call. A run that saw another run's calls would see
repeats (dedup) or too many calls (iterations), so zero detections means zero cross-talk.
"""

from __future__ import annotations

import asyncio
import threading
import time

from _common import Row, queries

import fuzeguard
from fuzeguard import Config, LoopDetected, guard

THREADS = 16


def search(query: str, limit: int) -> str:
    return query[::-1]  # new for each call (an echo of the query would be no news)


async def fetch(url: str, page: int) -> str:
    await asyncio.sleep(0)
    return url[::-1]  # new for each call (an echo of the url would be no news)


def _threads(per_thread: int, max_calls: int | None) -> tuple[int, int, float]:
    """(calls the run counted, calls that ran, seconds) for 16 threads sharing one run."""
    tool = guard(search, max_iterations=10**9)
    qs = queries(THREADS * per_thread, seed=4)
    ran = [0] * THREADS
    start = threading.Barrier(THREADS + 1)
    settings = {} if max_calls is None else {"max_calls": max_calls}
    with fuzeguard.run("threads", config=Config(), **settings) as run:

        def work(t: int) -> None:
            start.wait()
            for i in range(t * per_thread, (t + 1) * per_thread):
                try:
                    tool(qs[i], i)
                except LoopDetected:
                    return
                ran[t] += 1

        threads = [threading.Thread(target=run.bind(work), args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        start.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - t0
        counted = run.stats().calls
    return counted, sum(ran), elapsed


async def _asyncio_runs(runs: int, calls: int) -> tuple[int, int, int]:
    """(runs that counted exactly ``calls``, detections in all runs, total calls)."""
    tool = guard(fetch, max_iterations=calls)
    urls = [f"https://example.com/{q.replace(' ', '/')}" for q in queries(calls, seed=6)]
    config = Config()

    async def one(r: int) -> tuple[int, int]:
        async with fuzeguard.run(f"task {r}", config=config) as run:
            for i, url in enumerate(urls):
                await tool(url, i)
            stats = run.stats()
        return stats.calls, stats.detections

    results = await asyncio.gather(*(one(r) for r in range(runs)))
    exact = sum(1 for counted, _ in results if counted == calls)
    return exact, sum(d for _, d in results), sum(c for c, _ in results)


def measure(quick: bool) -> list[Row]:
    per_thread = 500 if quick else 5_000
    counted, ran, elapsed = _threads(per_thread, None)
    expected = THREADS * per_thread
    limit = expected // 3
    limited_counted, limited_ran, _ = _threads(per_thread, limit)

    runs, calls = (100, 20) if quick else (1_000, 100)
    t0 = time.perf_counter()
    exact, detections, total = asyncio.run(_asyncio_runs(runs, calls))
    async_elapsed = time.perf_counter() - t0
    return [
        Row("4. concurrency", f"{THREADS} threads, one run: throughput",
            f"{expected / elapsed:,.0f} calls/s"),
        Row("4. concurrency", f"{THREADS} threads, one run: calls counted / made",
            f"{counted:,} / {ran:,} (expected {expected:,})", "exact",
            counted == ran == expected),
        Row("4. concurrency", f"{THREADS} threads, max_calls = {limit:,}: calls that ran",
            f"{limited_ran:,} (run counted {limited_counted:,})", "exact",
            limited_ran == limited_counted == limit),
        Row("4. concurrency", f"{runs:,} asyncio runs x {calls} calls: throughput",
            f"{total / async_elapsed:,.0f} calls/s"),
        Row("4. concurrency", f"{runs:,} asyncio runs: runs with exact counts, detections",
            f"{exact:,} of {runs:,}, {detections} detections", "all, 0",
            exact == runs and detections == 0),
    ]
