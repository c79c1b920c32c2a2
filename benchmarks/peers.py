"""Other loop guards' per-call work, measured on the same calls as fuzeguard's guarded call.

None of them reads results: they count identical calls. The common design keys each call by a
hash of its tool name and its arguments' canonical JSON and counts how many calls in a row had the
same key; the call that makes the count reach the threshold is refused. ``RepeatCounter`` is that
mechanism, written here: the guards built on it are parts of agents (DeerFlow's middleware among
them) rather than packages that can be installed in this process on their own. ``stacked`` wraps
a tool in several such counters, as an agent that runs three independent guards of this design
does.

``agentguard`` is the published package (``agentguard47`` on PyPI, no dependencies) of one such
guard library. ``agentguard_stacked`` wraps a tool in the three of its guards that look at tool
calls, each asked on every call as its documentation shows: ``LoopGuard`` (the same name and
arguments three times in a row, keyed by their sorted JSON), ``FuzzyLoopGuard`` (one name too
often in a window of ten, or two names alternating) and ``RetryGuard`` (attempts of one tool
without a success between them; a call that returns is its success).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from blake3 import blake3


class Repeated(RuntimeError):
    """Raised by a ``RepeatCounter`` on the call that makes the count reach its threshold."""


class RepeatCounter:
    """Refuse the ``threshold``-th identical call (same tool, same arguments) in a row."""

    __slots__ = ("count", "last", "threshold")

    def __init__(self, threshold: int = 3) -> None:
        self.threshold = threshold
        self.last: bytes | None = None
        self.count = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        names = tuple(inspect.signature(fn).parameters)
        prefix = fn.__name__.encode() + b"\x00"

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            arguments = dict(zip(names, args, strict=False))
            if kwargs:
                arguments.update(kwargs)
            key = blake3(
                prefix + json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
            ).digest()
            if key == self.last:
                self.count += 1
                if self.count >= self.threshold:
                    raise Repeated(f"{fn.__name__} called {self.count} times in a row")
            else:
                self.last, self.count = key, 1
            return fn(*args, **kwargs)

        return wrapper


def agentguard_stacked(fn: Callable[..., Any], max_tool_repeats: int = 5) -> Callable[..., Any]:
    """``fn`` behind agentguard's three tool-call guards, asked before the call as its docs show.

    ``max_tool_repeats`` is ``FuzzyLoopGuard``'s count of one name in its window: a benchmark
    that calls one tool thousands of times sets it above the window, as fuzeguard's rows set
    their iteration cap above the batch (the count is still taken on every call)."""
    from agentguard import FuzzyLoopGuard, LoopGuard, RetryGuard

    names = tuple(inspect.signature(fn).parameters)
    name = fn.__name__
    loop, fuzzy, retry = LoopGuard(), FuzzyLoopGuard(max_tool_repeats=max_tool_repeats), RetryGuard()

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = dict(zip(names, args, strict=False))
        if kwargs:
            arguments.update(kwargs)
        loop.check(name, arguments)
        fuzzy.check(name, arguments)
        retry.check(name, arguments)
        result = fn(*args, **kwargs)
        retry.record_success(name)
        return result

    return wrapper


def stacked(fn: Callable[..., Any], guards: int) -> Callable[..., Any]:
    """``fn`` wrapped in ``guards`` independent repeat counters."""
    for _ in range(guards):
        fn = RepeatCounter().wrap(fn)
    return fn
