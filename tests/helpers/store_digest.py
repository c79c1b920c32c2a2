"""The state digest of a shared run, for the tests: each process's copy against a fresh load.

Redis checks itself the same way (``DEBUG DIGEST`` compared after a reload or on a replica): after
a fault scenario, every process's copy of the run, brought up to date, must hold what a process
that joins now loads from Redis: the kill, the calls, the cost, the errors, the calls per function
and the bars a person raised through ``ask``.
"""

from __future__ import annotations

from typing import Any

import fuzeguard
from fuzeguard import Config


def digest(run: fuzeguard.Run) -> dict[str, Any]:
    killed = run.killed
    # A kill made out of reach of Redis is numbered by its process's own count of calls then:
    # the index is left out.
    return {"killed": None if killed is None else (killed.layer, killed.fn, killed.kind),
            "calls": run._calls, "cost": round(run._cost, 9), "errors": run._errors,
            "calls_by_fn": dict(run._calls_by_fn), "ask bars": dict(run._bars)}


def bars(state: dict[str, Any]) -> list[Any]:
    """The raised bars without their patterns' fingerprints, which each run keys its own way."""
    return sorted((pattern[0], bar) for pattern, bar in state["ask bars"].items())


def fresh_load(url: str, name: str, **settings: Any) -> fuzeguard.Run:
    """The run as Redis holds it, loaded by a process that joins now (opening it writes back
    first what a run of that name closed in this process during an outage still owes)."""
    settings.setdefault("store_timeout", 5.0)  # a loaded machine's scheduling is no outage
    with fuzeguard.run(name, store=url, config=Config(), **settings) as fresh:
        fresh.stats()
    return fresh


def assert_copies_agree(url: str, name: str, *runs: fuzeguard.Run,
                        **settings: Any) -> dict[str, Any]:
    """Each process's copy of the shared run ``name``, brought up to date, equals a fresh load
    from the Redis at ``url``; returns the digest they share."""
    fresh = digest(fresh_load(url, name, **settings))
    for run in runs:
        run.stats()
        assert digest(run) == fresh, f"{run!r} differs from Redis"
    return fresh
