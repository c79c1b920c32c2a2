"""7. Shared runs: guarded-call throughput with the Redis store, and round trips per call.

One local redis-server (started here, as the tests start theirs: ``tests/redis_server.py``), one
shared run, and 1, 4 and 16 worker processes released together at a barrier, each making distinct
calls ``search(query, i)`` into the run with the default layers. Throughput is all workers' calls
divided by the time from the release to the last worker's end; every run checks that the shared
run counted every call exactly and that no layer fired. Round trips are the scripts Redis ran
(``INFO commandstats``: a shared run talks to Redis only through its scripts; each worker's final
``stats()`` is subtracted) per guarded call: a call is decided in one round trip and its
completion written in a second one; more are needed when other workers commit first (the
decision is made again).

    python benchmarks/shared_store.py            # prints the rows
    python benchmarks/shared_store.py --quick
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Row, queries

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the tests' redis-server starter

WORKERS = (1, 4, 16)
SECTION = "7. shared run (Redis)"


def _worker(url: str, name: str, calls: int, seed: int) -> None:
    import redis
    import structlog

    import fuzeguard
    from fuzeguard import Config, guard

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))

    def search(query: str, limit: int) -> str:
        return query[::-1]  # new for each call (an echo of the query would be no news)

    tool = guard(search, max_iterations=10**9)
    # One word no other call has, so that every answer is news to the progress layer whichever
    # workers' calls share its window.
    qs = [f"{q} w{seed}x{i}" for i, q in enumerate(queries(calls + 1, seed=seed))]
    run = fuzeguard.run(name, store=url, config=Config(), store_timeout=10)
    with run:
        tool(qs[-1], -1)  # connects and loads the run before the clock starts
        redis.Redis.from_url(url).blpop([f"go:{name}"], timeout=60)
        for i, q in enumerate(qs[:-1]):
            tool(q, i)
        stats = run.stats()
    print(json.dumps({"detections": stats.detections, "local": stats.locally_judged}))


def _scripts_run(client: Any) -> int:
    """Scripts Redis ran: a shared run talks to Redis only through them, one per round trip
    (the commands a script runs inside Redis are counted apart, and are not round trips)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("eval", "evalsha", "eval_ro", "evalsha_ro"))


def _measure(server: Any, workers: int, per_worker: int) -> tuple[float, float, int]:
    """(calls per second, round trips per call, calls) for ``workers`` processes on one run."""
    import fuzeguard
    from fuzeguard import Config

    name = f"bench-{workers}"
    client = server.client()
    with fuzeguard.run(name, store=server.url, config=Config(), store_timeout=10) as run:
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", server.url, name, str(per_worker), str(i)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )
            for i in range(workers)
        ]
        # Every worker has made its warm-up call when the run holds `workers` calls.
        deadline = time.monotonic() + 120
        while run.stats().calls < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                for proc in procs:
                    proc.kill()
                errors = [proc.communicate()[1][-2000:] for proc in procs]
                raise RuntimeError(f"the workers did not start: {errors}")
            time.sleep(0.01)
        before = _scripts_run(client)
        started = time.perf_counter()
        client.rpush(f"go:{name}", *(["go"] * workers))
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(err[-2000:])
            got = json.loads(out)
            assert (got["detections"], got["local"]) == (0, 0), got
        seconds = time.perf_counter() - started
        after = _scripts_run(client)
        calls = workers * per_worker
        counted = run.stats().calls - workers
        assert counted == calls, (counted, calls)
    # Not the workers' calls: each worker's final stats() loads the run once.
    trips = after - before - workers
    return calls / seconds, trips / calls, calls


def measure(quick: bool) -> list[Row]:
    from redis_server import RedisServer

    total = 400 if quick else 4000
    rows: list[Row] = []
    single = 0.0
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory))
        server.start()
        try:
            for workers in WORKERS:
                per_worker = max(total // workers, 25)
                rate, trips, calls = _measure(server, workers, per_worker)
                if workers == 1:
                    single = trips
                rows.append(Row(
                    SECTION,
                    f"{workers} worker process{'es' if workers > 1 else ''}, one run, "
                    f"{calls:,} calls: throughput, round trips per call",
                    f"{rate:,.0f} calls/s, {trips:.2f}",
                ))
        finally:
            server.stop()
    rows.append(Row(
        SECTION, "round trips per guarded call, one worker (one for the decision, one for the "
        "completion, a snapshot every 64 events)", f"{single:.2f}", "1", single <= 1.0,
    ))
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        url, name, calls, seed = argv[1:5]
        _worker(url, name, int(calls), int(seed))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args(argv)
    for row in measure(options.quick):
        print(f"{row.name}: {row.value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
