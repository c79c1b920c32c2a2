"""Locks that a forked child can take: every lock fuzeguard makes is released in the child.

A process forked while another of its threads holds one of fuzeguard's locks (a guarded call
being decided, a trace line being written) inherits that lock held by a thread the child does not
have, so the child's first guarded call would wait for it forever (``multiprocessing`` forks by
default on Linux before Python 3.14). ``new_lock()`` makes a lock that is re-initialised in every
forked child, as the standard library does for its own (``threading``, ``logging``). What the
lock guarded is left as the fork found it: a count may miss the call that was being booked.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

# Weak references to the locks made so far, pruned of dead ones as the list grows (cheaper to
# add to than a WeakSet: a run makes two locks).
_locks: list[weakref.ref[Any]] = []
_prune_at = 1024
_registry = threading.Lock()


def new_lock() -> threading.Lock:
    """A ``threading.Lock`` that is released in a forked child."""
    global _prune_at
    lock = threading.Lock()
    with _registry:
        _locks.append(weakref.ref(lock))
        if len(_locks) >= _prune_at:
            _locks[:] = [ref for ref in _locks if ref() is not None]
            _prune_at = 2 * len(_locks) + 1024
    return lock


def _release_in_child() -> None:
    _registry._at_fork_reinit()  # type: ignore[attr-defined]
    for ref in _locks:
        lock = ref()
        if lock is not None:
            lock._at_fork_reinit()


if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX system
    os.register_at_fork(after_in_child=_release_in_child)
