"""Calling ``on_detect`` hooks so that a faulty hook never reaches the agent nor blocks it long.

Hooks run in a helper thread, with a copy of the caller's context (so ``fuzeguard.current_run()``
answers as in the call), one after the other:

- from a plain thread, the hooks of one detection get a thread of their own and the guarded call
  waits for them at most ``HOOK_TIMEOUT`` seconds in all;
- from the thread of a running asyncio event loop (an async tool, an async server), the call
  never waits: waiting there would stall every task of the loop. The detection is queued for
  one helper thread that calls the hooks of queued detections in order (at most
  ``MAX_QUEUED`` wait; more are logged as skipped).

A hook still running ``HOOK_TIMEOUT`` seconds after it started is logged
(``fuzeguard.hook_timeout``) and left to finish on its own. Until it has finished, later
detections skip that hook (``fuzeguard.hook_skipped``) rather than wait for it again or pile up
threads behind it. A hook that raises is logged (``fuzeguard.hook_failed``). None of this ever
changes what the call does.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock

Hook = Callable[[Detection], object]

# Seconds a guarded call waits for the hooks of one detection, all together; and how long a hook
# may run before it counts as hanging.
HOOK_TIMEOUT = 1.0
# Detections made on an event loop's thread whose hooks may wait for the helper thread.
MAX_QUEUED = 1000

# Hooks that overran HOOK_TIMEOUT, by id, with the thread still running them.
_hanging: dict[int, threading.Thread] = {}
_hanging_lock = new_lock()


def callable_name(fn: Any) -> str:
    """A hook's name for the logs: its qualified name, never its repr (a ``functools.partial``
    or a bound object's repr may carry a token)."""
    target = getattr(fn, "func", fn)  # functools.partial
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{name}"


def run_hooks(hooks: Sequence[Hook], detection: Detection, run_id: str) -> None:
    """Call each hook with ``detection``: wait until they are done or ``HOOK_TIMEOUT`` passed,
    or, on an event loop's thread, hand them to the helper thread and return at once."""
    if not hooks:
        return
    if _hanging:
        hooks = _not_hanging(hooks, detection, run_id)
        if not hooks:
            return
    context = contextvars.copy_context()
    if _on_event_loop():
        _queue.put(hooks, detection, run_id, context)
        return
    state = _Progress()
    # Until the thread reaches it, the first hook counts as running: a thread slow to start (a
    # busy machine) overruns in it, and later detections skip it, as they would a slow hook.
    state.hook, state.since = hooks[0], time.monotonic()
    worker = threading.Thread(target=context.run, args=(_call_all, hooks, detection, run_id, state),
                              daemon=True, name="fuzeguard-hooks")
    worker.start()
    worker.join(HOOK_TIMEOUT)
    if worker.is_alive():
        _overran(state.hook, worker, detection.fn, run_id)


def _not_hanging(hooks: Sequence[Hook], detection: Detection, run_id: str) -> Sequence[Hook]:
    """The hooks not still running from an earlier detection; the others are logged skipped."""
    with _hanging_lock:
        for key in [k for k, t in _hanging.items() if not t.is_alive()]:
            del _hanging[key]
        busy = [h for h in hooks if id(h) in _hanging]
    if not busy:
        return hooks
    for hook in busy:
        emit("error", "fuzeguard.hook_skipped", hook=callable_name(hook), fn=detection.fn,
             run_id=run_id, message="this on_detect hook is still running from an earlier "
             "detection (it overran the time limit); it was not called for this one")
    return [h for h in hooks if all(h is not b for b in busy)]


def _on_event_loop() -> bool:
    """Whether this thread is running an asyncio event loop (asyncio is never imported here)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Progress:
    """Which hook a helper thread is in, and since when."""

    __slots__ = ("hook", "since")

    def __init__(self) -> None:
        self.hook: Hook | None = None
        self.since = 0.0


def _call_all(hooks: Sequence[Hook], detection: Detection, run_id: str, state: _Progress) -> None:
    for hook in hooks:
        state.hook, state.since = hook, time.monotonic()
        try:
            hook(detection)
        except Exception as exc:
            emit("error", "fuzeguard.hook_failed", hook=callable_name(hook),
                 error=exception_text(exc), fn=detection.fn, run_id=run_id)
    state.hook = None


def _overran(hook: Hook | None, thread: threading.Thread, fn: str, run_id: str) -> None:
    with _hanging_lock:
        _hanging[id(hook)] = thread
    emit("error", "fuzeguard.hook_timeout", hook=callable_name(hook), fn=fn, run_id=run_id,
         timeout=HOOK_TIMEOUT,
         message=f"an on_detect hook ran longer than {HOOK_TIMEOUT:g} s; the call went on "
         "without waiting for it (it keeps running in the background)")


class _Job:
    __slots__ = ("context", "detection", "hooks", "run_id")

    def __init__(self, hooks: Sequence[Hook], detection: Detection, run_id: str,
                 context: contextvars.Context) -> None:
        self.hooks = hooks
        self.detection = detection
        self.run_id = run_id
        self.context = context


class _Worker:
    """The helper thread of ``_Queue`` and the job it is in."""

    __slots__ = ("job", "progress", "thread")

    def __init__(self, queue: _Queue) -> None:
        self.progress = _Progress()
        self.job: _Job | None = None
        self.thread = threading.Thread(target=queue.work, args=(self,), daemon=True,
                                       name="fuzeguard-hooks")


class _Queue:
    """The hooks of detections made on an event loop's thread, called in order by one helper
    thread that exists while there is work. A worker found in one hook for longer than
    ``HOOK_TIMEOUT`` (checked as detections come, and by a timer on the loop while there is
    work) is left to that hook, which then counts as hanging, and a fresh worker takes over the
    queue."""

    def __init__(self) -> None:
        self.lock = new_lock()
        self.jobs: deque[_Job] = deque()
        self.worker: _Worker | None = None
        # The event loop a timer that will check the worker is set on: one timer at a time, while
        # there is work (a loop that ended with its timer pending leaves it here: not running).
        self.armed: Any = None

    def put(self, hooks: Sequence[Hook], detection: Detection, run_id: str,
            context: contextvars.Context) -> None:
        self.check()
        started: _Worker | None = None
        with self.lock:
            full = len(self.jobs) >= MAX_QUEUED
            if not full:
                self.jobs.append(_Job(hooks, detection, run_id, context))
                if self.worker is None:
                    started = self.worker = _Worker(self)
        if full:
            for hook in hooks:
                emit("error", "fuzeguard.hook_skipped", hook=callable_name(hook),
                     fn=detection.fn, run_id=run_id, message=f"{MAX_QUEUED} detections are "
                     "already waiting for their on_detect hooks; it was not called for this one")
            return
        if started is not None:
            started.thread.start()
        import asyncio  # already imported: the caller runs an event loop

        loop = asyncio.get_running_loop()
        if self.armed is not loop:
            self._arm(loop)

    def _arm(self, loop: Any) -> None:
        self.armed = loop
        loop.call_later(HOOK_TIMEOUT, self._tick, loop)

    def _tick(self, loop: Any) -> None:
        """The timer: check the worker, and look again while there is work (a worker that had
        not reached its hook yet, on a busy machine, is timed from when it does)."""
        self.armed = None
        self.check()
        if self.worker is not None:
            self._arm(loop)

    def work(self, me: _Worker) -> None:
        while True:
            with self.lock:
                if self.worker is not me:
                    return  # left to a hanging hook: a fresh worker has the queue
                if not self.jobs:
                    self.worker = None
                    return
                job = me.job = self.jobs.popleft()
            hooks = _not_hanging(job.hooks, job.detection, job.run_id) if _hanging else job.hooks
            job.context.run(_call_all, hooks, job.detection, job.run_id, me.progress)
            me.job = None

    def check(self) -> None:
        """Leave a worker that has been in one hook too long to it."""
        worker = self.worker
        if worker is None:
            return
        progress = worker.progress
        hook, job = progress.hook, worker.job
        if hook is None or job is None or time.monotonic() - progress.since <= HOOK_TIMEOUT:
            return
        with self.lock:
            if self.worker is not worker:
                return
            self.worker = fresh = _Worker(self) if self.jobs else None
        _overran(hook, worker.thread, job.detection.fn, job.run_id)
        if fresh is not None:
            fresh.thread.start()


_queue = _Queue()


def _after_fork() -> None:
    """A forked child has none of the parent's helper threads: it starts with none hanging and
    an empty queue."""
    global _queue
    _hanging.clear()
    _queue = _Queue()


if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX system
    os.register_at_fork(after_in_child=_after_fork)
