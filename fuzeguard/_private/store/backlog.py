"""What a shared run closed during an outage still owes its store, and the tries to write it.

A process that closes a shared run while Redis is out of reach holds what it did meanwhile (its
calls, cost and a kill) and nothing else will write it: the ``with`` block is over. Such a run
is kept here and written back as soon as Redis answers again:

- by one helper thread that tries again at once, then every ``RETRY_EVERY`` seconds;
- at once, before anything else, by a run of the same name opened in this process (the task
  retried here must not repeat the loop the closed run was killed for);
- one last time when the interpreter exits.

A run still owing when the store would have let it expire (``store_ttl`` after its close), or
at exit, is given up and logged at error level as ``fuzeguard.store_backlog_lost``, with what
was lost. ``fuzeguard.store_backlog_pending`` says at the close what waits.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock

if TYPE_CHECKING:
    from fuzeguard._private.protocols import RunInternals

RETRY_EVERY = 1.0  # seconds between the helper thread's tries


class Owing(Protocol):
    """What the backlog needs of a store that owes a write-back (the Redis store, ``redis.py``):
    the keys of its run, how long the run lives after its close, one more try at writing, and
    what it owes, for the logs."""

    keys: list[str]
    ttl_ms: int

    def write_back(self, run: RunInternals) -> bool: ...
    def owed_summary(self) -> dict[str, Any]: ...


# Runs that owe a write-back: (store, run, the monotonic time after which it is given up).
_owing: list[tuple[Owing, RunInternals, float]] = []
_lock = new_lock()
_worker: threading.Thread | None = None
_wake = threading.Event()  # set when a run is kept: the helper thread tries at once


def keep(store: Owing, run: RunInternals) -> None:
    """Hold ``run`` until what its store owes is written (or given up); logs what waits."""
    global _worker
    emit("warning", "fuzeguard.store_backlog_pending", run_id=run.id, run_name=run.name,
         **store.owed_summary(),
         message="the run was closed while its store could not be reached: what this process "
         "did meanwhile is written back as soon as the store answers again")
    with _lock:
        if all(s is not store for s, _r, _t in _owing):
            _owing.append((store, run, time.monotonic() + store.ttl_ms / 1000))
        if _worker is None:
            _worker = threading.Thread(target=_retry_forever, name="fuzeguard-backlog",
                                       daemon=True)
            _worker.start()
    _wake.set()


def owed(keys: list[str]) -> bool:
    """Whether a closed run stored under ``keys`` owes a write-back."""
    return bool(_owing) and any(entry[0].keys == keys for entry in list(_owing))


def settle(keys: list[str]) -> None:
    """Write back, now, what closed runs stored under ``keys`` owe (a run of that name is
    being opened in this process)."""
    with _lock:
        due = [entry for entry in _owing if entry[0].keys == keys]
    for entry in due:
        _try(entry, give_up=False)


def _retry_forever() -> None:
    global _worker
    while True:
        _wake.wait(RETRY_EVERY)
        _wake.clear()
        with _lock:
            due = list(_owing)
            if not due:  # under the lock: ``keep`` then starts a new helper
                if _worker is threading.current_thread():
                    _worker = None
                return
        for entry in due:
            _try(entry, give_up=time.monotonic() > entry[2])


def _try(entry: tuple[Owing, RunInternals, float], give_up: bool) -> None:
    store, run = entry[0], entry[1]
    try:
        done = store.write_back(run)
    except Exception as exc:  # the helper thread must outlive any failure of one write-back
        emit("error", "fuzeguard.internal_error", phase="store", error=repr(exc))
        done = False
    if done or give_up:
        with _lock:
            if entry in _owing:
                _owing.remove(entry)
    if not done and give_up:
        emit("error", "fuzeguard.store_backlog_lost", run_id=run.id, run_name=run.name,
             **store.owed_summary(),
             message="what this process did while its store could not be reached was never "
             "written back (the run was closed and the store did not answer again in time): "
             "other processes of the run do not know of it")


@atexit.register
def _at_exit() -> None:
    with _lock:
        due = list(_owing)
    for entry in due:
        _try(entry, give_up=True)


def _after_fork() -> None:
    """A forked child owes nothing of its parent's (its stores are reset: ``Replica._forked``)
    and has no helper thread."""
    global _worker, _wake
    _owing.clear()
    _worker = None
    _wake = threading.Event()


os.register_at_fork(after_in_child=_after_fork)

