"""Structured log events. The library never configures structlog; it only asks for a logger.

Where events go:

- the application configured structlog (``structlog.is_configured()``): through its pipeline,
  ``structlog.get_logger("fuzeguard")``, wherever that sends them;
- it did not: to **standard error**, rendered by structlog's default processors. structlog's own
  default logger prints to standard output, which is the protocol channel of MCP stdio servers
  and the data channel of command-line tools: a library must never write there.

The choice is made for every event, so configuring structlog after the first event still counts.
"""

from __future__ import annotations

import sys
from typing import Any

_configured_logger: Any = None
# The fallback logger and the stream it was built for: rebuilt when sys.stderr is replaced.
_stderr_logger: Any = None
_stderr_stream: Any = None


def logger() -> Any:
    """The logger the next event goes to (see the module docstring); imported on first use to
    keep ``import fuzeguard`` cheap."""
    global _configured_logger, _stderr_logger, _stderr_stream
    import structlog

    if structlog.is_configured():
        if _configured_logger is None:
            _configured_logger = structlog.get_logger("fuzeguard")
        return _configured_logger
    stream = sys.stderr
    if stream is None:  # pythonw and daemons: nowhere to write, and never standard output
        return None
    if _stderr_logger is None or stream is not _stderr_stream:
        defaults = structlog.get_config()
        _stderr_logger = structlog.wrap_logger(
            structlog.PrintLogger(file=stream),
            processors=defaults["processors"],
            wrapper_class=defaults["wrapper_class"],
            context_class=defaults["context_class"],
        )
        _stderr_stream = stream
    return _stderr_logger


def emit(level: str, event: str, **fields: Any) -> None:
    """Log one event; a broken logging setup never breaks a guarded call."""
    try:
        target = logger()
        if target is not None:
            getattr(target, level)(event, **fields)
    except Exception:  # pragma: no cover - depends on the application's logging setup
        pass
