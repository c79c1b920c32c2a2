"""A worker process for the shared-run tests: ``python tests/helpers/store_worker.py MODE URL RUN [N]``.

It waits at a barrier (the Redis list ``go:RUN``) so that every worker starts together, then:

* ``count N``: makes N distinct calls ``fetch(...)`` in the shared run until the run is killed;
* ``ping-pong N``: takes turns with another worker through the lists ``turn:RUN:A``/``:B``: on its
  turn it calls ``ask("same question")`` once and hands the turn over;
* ``kill``: calls ``fetch(0)`` in a run whose ``max_calls`` is already used up.

Settings (JSON) are passed to ``fuzeguard.run``; ``"run"`` among them names the worker's run
(by default ``RUN``, the barrier's name).

It prints one JSON object (its counts, or the call index at which the loop was caught) and
nothing else to stdout: the library's log goes to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import redis
import structlog

import fuzeguard
from fuzeguard import Config, LoopDetected, guard


@guard(max_iterations=10**9)
def fetch(i: int) -> str:
    return f"page {letters(i)}"  # new on every call, and not an echo of the argument


def letters(i: int) -> str:
    """``i`` written in letters (a, b, ..., ba, bb, ...): a page name with no digit in it."""
    out = ""
    while True:
        i, digit = divmod(i, 26)
        out += chr(ord("a") + digit)
        if not i:
            return out


@guard
def ask(question: str) -> str:
    return "I cannot answer that question, please ask something else."


def main(argv: list[str]) -> int:
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    mode, url, name = argv[:3]
    n = int(argv[3]) if len(argv) > 3 else 0
    settings = json.loads(argv[4]) if len(argv) > 4 else {}
    # No socket timeout: the waits at the barrier and for a turn are bounded by their own
    # timeouts, and redis-py 8's default of 5 s cut them short when the other workers were slow
    # to start (a busy machine).
    client = redis.Redis.from_url(url, socket_timeout=None)
    client.blpop([f"go:{name}"], timeout=120)
    out: dict[str, object] = {}
    run_name = settings.pop("run", name)  # a run of its own, released with the others
    with fuzeguard.run(run_name, store=url, config=Config(), store_timeout=10, **settings) as run:
        if mode == "count":
            made = 0
            base = os.getpid() * 1_000_000  # distinct calls: no worker repeats another's
            try:
                for i in range(n):
                    fetch(base + i)
                    made += 1
            except LoopDetected:
                out["killed"] = True
            out["made"] = made
        elif mode == "ping-pong":
            me, other = argv[5], argv[6]
            caught = None
            for _ in range(n):
                if client.blpop([f"turn:{name}:{me}"], timeout=30) is None:
                    break
                try:
                    ask("same question")
                except LoopDetected as exc:
                    caught = exc.detection.call_index
                client.rpush(f"turn:{name}:{other}", "go")
                if caught is not None:
                    break
            out["caught"] = caught
        elif mode == "kill":
            try:
                fetch(0)
                out["refused"] = False
            except LoopDetected as exc:
                out["refused"] = True
                out["layer"] = exc.detection.layer
        out["worker"] = fuzeguard.current_run().id
        stats = run.stats()
        out["calls"] = stats.calls
        out["locally_judged"] = stats.locally_judged
        out["store_errors"] = stats.store_errors
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
