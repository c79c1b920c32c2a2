"""Whether ``@guard`` sits above a framework decorator that registered the function unchanged.

Pydantic AI's ``@agent.tool_plain`` / ``@agent.tool`` and an MCP server's ``@server.tool()``
register the function they are given and return it as it was: ``@guard`` placed above them wraps
a function the framework no longer calls, so the tool would run unguarded. Nothing on the function
says so; only the framework's tool object holds it. Looking for that object (``gc.get_referrers``)
scans the whole heap, so it is done only when the decorator lines say ``@guard`` is applied above
another decorator of the same ``def`` that returned the function itself: a decorated function's
first line is its first decorator, and the line of the frame applying ``@guard`` is ``@guard``'s.
"""

from __future__ import annotations

import gc
import inspect
import linecache
import sys
from typing import Any

# Top-level packages whose decorators register a function and return it unchanged.
REGISTERING = ("pydantic_ai", "mcp", "fastmcp")


def registered_by(f: Any) -> str | None:
    """The top-level package of a framework object holding ``f``, when ``@guard`` is being applied
    above another decorator of ``f``'s ``def`` that returned ``f`` itself; else None."""
    if not inspect.isfunction(f) or not any(p in sys.modules for p in REGISTERING):
        return None
    code = f.__code__
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("fuzeguard."):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None or frame.f_code.co_filename != code.co_filename:
        return None
    if not _decorated_below(code.co_filename, frame.f_lineno, code.co_firstlineno):
        return None
    holders = gc.get_referrers(f)
    dicts = [h for h in holders if type(h) is dict and h is not f.__globals__]
    if dicts:
        holders = holders + gc.get_referrers(*dicts)  # an instance's __dict__ holds the function
    for holder in holders:
        package = type(holder).__module__.split(".")[0]
        if package in REGISTERING:
            return package
    return None


def _decorated_below(filename: str, line: int, first: int) -> bool:
    """Whether ``line`` is a decorator line of the ``def`` that starts (with its decorators) at
    ``first`` and another decorator line follows it before the ``def``."""
    if line < first:
        return False
    for number in range(first, first + 200):  # decorators spanning lines end within them
        text = linecache.getline(filename, number).lstrip()
        if not text or text.startswith(("def ", "async def ")):
            return False
        if number > line and text.startswith("@"):
            return True
    return False
