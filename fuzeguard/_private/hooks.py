"""Calling ``on_detect`` hooks so that a faulty hook never reaches the agent nor blocks it long.

The hooks of one detection run one after the other in a helper thread (with a copy of the
caller's context, so ``fuzeguard.current_run()`` answers as in the call). The guarded call waits
for them at most ``HOOK_TIMEOUT`` seconds in all; a hook still running then is logged
(``fuzeguard.hook_timeout``) and left to finish on its own, and the call goes on. Until it has
finished, later detections skip that hook (``fuzeguard.hook_skipped``) rather than wait for it
again or pile up threads behind it. A hook that raises is logged (``fuzeguard.hook_failed``).
None of this ever changes what the call does.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from typing import Any

from fuzeguard._private.log import emit
from fuzeguard._private.records import Detection
from fuzeguard._private.secrets import exception_text

# Seconds a guarded call waits for the hooks of one detection, all together.
HOOK_TIMEOUT = 1.0

# Hooks that overran HOOK_TIMEOUT, by id, with the thread still running them.
_hanging: dict[int, threading.Thread] = {}
_hanging_lock = threading.Lock()


def callable_name(fn: Any) -> str:
    """A hook's name for the logs: its qualified name, never its repr (a ``functools.partial``
    or a bound object's repr may carry a token)."""
    target = getattr(fn, "func", fn)  # functools.partial
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{name}"


def run_hooks(hooks: Sequence[Callable[[Detection], object]], detection: Detection,
              run_id: str) -> None:
    """Call each hook with ``detection``; return when they are done or ``HOOK_TIMEOUT`` passed."""
    if not hooks:
        return
    if _hanging:
        with _hanging_lock:
            for key in [k for k, t in _hanging.items() if not t.is_alive()]:
                del _hanging[key]
            busy = [h for h in hooks if id(h) in _hanging]
        if busy:
            for hook in busy:
                emit("error", "fuzeguard.hook_skipped", hook=callable_name(hook), fn=detection.fn,
                     run_id=run_id, message="this on_detect hook is still running from an earlier "
                     "detection (it overran the time limit); it was not called for this one")
            hooks = [h for h in hooks if id(h) not in {id(b) for b in busy}]
            if not hooks:
                return
    state: dict[str, Callable[[Detection], object] | None] = {"current": None}

    def call_all() -> None:
        for hook in hooks:
            state["current"] = hook
            try:
                hook(detection)
            except Exception as exc:
                emit("error", "fuzeguard.hook_failed", hook=callable_name(hook),
                     error=exception_text(exc), fn=detection.fn, run_id=run_id)
        state["current"] = None

    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(call_all,), daemon=True,
                              name="fuzeguard-hooks")
    worker.start()
    worker.join(HOOK_TIMEOUT)
    if worker.is_alive():
        running = state["current"]
        with _hanging_lock:
            _hanging[id(running)] = worker
        emit("error", "fuzeguard.hook_timeout", hook=callable_name(running), fn=detection.fn,
             run_id=run_id, timeout=HOOK_TIMEOUT,
             message=f"an on_detect hook ran longer than {HOOK_TIMEOUT:g} s; the call went on "
             "without waiting for it (it keeps running in the background)")
