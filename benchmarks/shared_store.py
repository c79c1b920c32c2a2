"""7. Shared runs: guarded-call throughput with the Redis store, and round trips per call.

One local redis-server (started here, as the tests start theirs: ``tests/helpers/redis_server.py``), and
1, 4 and 16 worker processes released together at a barrier, each making distinct calls
``search(query, i)`` with the default layers: all into one shared run, then each into a shared run
of its own (16 runs). Throughput is all workers' calls divided by the time from the first
worker's first call to the last worker's last call (each worker notes both; process start and exit
are left out); every run checks that the shared runs counted every call exactly and that no layer
fired. Round trips are the scripts Redis ran (``INFO commandstats``: a shared run talks to Redis
only through its scripts; each worker's final ``stats()`` is subtracted) per guarded call: a call
is decided, with the completion of the call before it, in one round trip; a worker that another
committed before decides again on the state the lost round trip brought and commits in a second
one, whatever the others did meanwhile (the script still checks the run's kill and budgets).

The limit of the same machine is measured in the same run: as many processes, released the same
way, each making its calls' number of round trips with a bare redis-py client (``INCR`` of one key
per run, no guard). Each guarded figure's CPU per call is set against the bare client's as a
ratio, which does not depend on how fast the machine is; the bare client and the guarded workers
take turns, three times, and each figure is the median of the three.

    python benchmarks/shared_store.py            # prints the rows
    python benchmarks/shared_store.py --quick
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Row, median, queries, show

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "helpers"))  # the tests' redis-server starter

WORKERS = (1, 4, 16)
SECTION = "7. shared run (Redis)"
# The targets: a guarded call's CPU (workers and redis-server) over a bare client's round
# trip with as many processes, 16 workers on one run and 16 workers each on a run of its own.
CPU_TARGETS = {(16, False): 12.0, (16, True): 4.0}
ROUNDS = 3  # each figure is the median over this many turns of the bare client and the guarded


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
    own = f"{name}-{seed}" if name.endswith("-own") else name
    run = fuzeguard.run(own, store=url, config=Config(), store_timeout=10)
    # No socket timeout: the wait at the barrier is bounded by its own, and redis-py 8's default
    # of 5 s cut it short when the other workers were slow to start (a busy machine).
    client = redis.Redis.from_url(url, socket_timeout=None)
    with run:
        tool(qs[-1], -1)  # connects and loads the run before the clock starts
        client.incr(f"ready:{name}")
        client.blpop([f"go:{name}"], timeout=120)
        began, cpu = time.time(), time.process_time()
        for i, q in enumerate(qs[:-1]):
            tool(q, i)
        ended, cpu = time.time(), time.process_time() - cpu
        stats = run.stats()
    print(json.dumps({"detections": stats.detections, "local": stats.locally_judged,
                      "began": began, "ended": ended, "cpu": cpu}))


def _bare_worker(url: str, name: str, calls: int, seed: int) -> None:
    """The limit of the same machine: a bare redis-py client making one round trip (``INCR``)
    per call, released at the barrier like the guarded workers, on one key per run."""
    import redis

    client = redis.Redis.from_url(url)
    key = f"bare:{name}-{seed}" if name.endswith("-own") else f"bare:{name}"
    client.ping()  # connects before the clock starts
    client.incr(f"ready:{name}")
    client.blpop([f"go:{name}"], timeout=120)
    began, cpu = time.time(), time.process_time()
    incr = client.incr
    for _ in range(calls):
        incr(key)
    ended, cpu = time.time(), time.process_time() - cpu
    print(json.dumps({"began": began, "ended": ended, "cpu": cpu}))


def _scripts_run(client: Any) -> int:
    """Scripts Redis ran: a shared run talks to Redis only through them, one per round trip
    (the commands a script runs inside Redis are counted apart, and are not round trips)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("eval", "evalsha", "eval_ro", "evalsha_ro"))


def _server_cpu(client: Any) -> float:
    stats = client.info("cpu")
    return float(stats["used_cpu_user"]) + float(stats["used_cpu_sys"])


def _measure(
    server: Any, workers: int, per_worker: int, separate: bool, bare: bool = False, round_: int = 0
) -> tuple[float, float, int, float]:
    """(calls per second, round trips per call, calls, CPU seconds per call) for ``workers``
    processes on one run, or each on a run of its own (``separate``); guarded calls, or the bare
    client's round trips (``bare``). The CPU is the workers' (during their calls) and
    redis-server's: what the calls cost whatever else the machine runs."""
    name = f"bench-{workers}-{round_}" + ("-bare" if bare else "") + ("-own" if separate else "")
    client = server.client()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--bare-worker" if bare else "--worker", server.url, name,
             str(per_worker), str(i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(workers)
    ]
    # Every worker has loaded its run and made its warm-up call.
    deadline = time.monotonic() + 120
    while int(client.get(f"ready:{name}") or 0) < workers:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            for proc in procs:
                proc.kill()
            errors = [proc.communicate()[1][-2000:] for proc in procs]
            raise RuntimeError(f"the workers did not start: {errors}")
        time.sleep(0.01)
    before, server_cpu = _scripts_run(client), _server_cpu(client)
    client.rpush(f"go:{name}", *(["go"] * workers))
    began, ended, cpu = [], [], 0.0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(err[-2000:])
        got = json.loads(out)
        assert bare or (got["detections"], got["local"]) == (0, 0), got
        began.append(got["began"])
        ended.append(got["ended"])
        cpu += got["cpu"]
    seconds = max(ended) - min(began)  # the workers' clocks: one machine
    after, server_cpu = _scripts_run(client), _server_cpu(client) - server_cpu
    calls = workers * per_worker
    runs = [f"{name}-{i}" for i in range(workers)] if separate else [name]
    if bare:
        counted = sum(int(client.get(f"bare:{run}") or 0) for run in runs)
        assert counted == calls, (counted, calls)
        return calls / seconds, 1.0, calls, (cpu + server_cpu) / calls
    counted = sum(int(client.hget(f"fuzeguard:{{{run}}}:m", "calls") or 0) for run in runs)
    assert counted - workers == calls, (counted, calls)  # each worker's warm-up call too
    # Not the workers' calls: each worker's final stats() writes its last completion.
    trips = after - before - workers
    return calls / seconds, trips / calls, calls, (cpu + server_cpu) / calls


def measure(quick: bool) -> list[Row]:
    from redis_server import RedisServer

    total = 400 if quick else 4000
    rounds = 1 if quick else ROUNDS
    rows: list[Row] = []
    single = 0.0
    with tempfile.TemporaryDirectory() as directory:
        server = RedisServer(Path(directory))
        server.start()
        try:
            for workers, separate in [*((w, False) for w in WORKERS), (16, True)]:
                per_worker = max(total // workers, 25)
                guarded, bare = [], []
                for round_ in range(rounds):  # the bare client and the guarded calls in turn
                    bare.append(_measure(server, workers, per_worker, separate, True, round_))
                    guarded.append(_measure(server, workers, per_worker, separate, False, round_))
                rate, trips, calls, cpu = (median(m[i] for m in guarded) for i in range(4))
                bare_rate, bare_cpu = median(m[0] for m in bare), median(m[3] for m in bare)
                ratio = median(g[3] / b[3] for g, b in zip(guarded, bare, strict=True))
                if workers == 1:
                    single = trips
                plural = "es" if workers > 1 else ""
                where = "a run each" if separate else "one run"
                target = CPU_TARGETS.get((workers, separate))
                cores = os.cpu_count() or 1
                rows.append(Row(
                    SECTION,
                    f"{workers} worker process{plural}, {where}, {int(calls):,} calls: throughput, "
                    f"round trips per call; CPU per call (workers and redis-server) and the "
                    f"throughput it allows on {cores} idle cores",
                    f"{rate:,.0f} calls/s, {trips:.2f}; {cpu * 1e6:,.0f} µs, "
                    f"{cores / cpu:,.0f} calls/s",
                ))
                rows.append(Row(
                    SECTION,
                    f"{workers} worker process{plural}, {where}: CPU per call / a bare redis-py "
                    "client's round trip (INCR) with as many processes, measured in turn with them; "
                    "the bare client's throughput",
                    f"{ratio:.1f}x  ({cpu * 1e6:,.0f} µs / {bare_cpu * 1e6:,.0f} µs); "
                    f"{bare_rate:,.0f} calls/s",
                    "" if target is None else f"≤ {target:g}x",
                    None if target is None else ratio <= target,
                ))
        finally:
            server.stop()
    rows.append(Row(
        SECTION, "round trips per guarded call, one worker (the decision, with the completion "
        "of the call before it and, every 64 events, a snapshot)", f"{single:.2f}", "1",
        single <= 1.0,
    ))
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"] or argv[:1] == ["--bare-worker"]:
        url, name, calls, seed = argv[1:5]
        (_worker if argv[0] == "--worker" else _bare_worker)(url, name, int(calls), int(seed))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    show(measure(parser.parse_args(argv).quick))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
