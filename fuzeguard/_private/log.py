"""Structured log events. The library never configures structlog; it only asks for a logger.

Where events go:

- the application configured structlog (``structlog.is_configured()``) with a logger of its
  own: through its pipeline, ``structlog.get_logger("fuzeguard")``, wherever that sends them;
- it did not, or its configured logger is structlog's default one, printing to standard output:
  to **standard error**, through the configured processors. Standard output is the protocol
  channel of MCP stdio servers and the data channel of command-line tools: a library must never
  write there. (``structlog.testing.capture_logs()`` leaves structlog "configured" with the
  default logger: events after it still go to standard error.)

The choice is made for every event, so configuring structlog after the first event still counts.
"""

from __future__ import annotations

import sys
from typing import Any

_configured_logger: Any = None
# The fallback logger, and the stream and structlog settings it was built with: rebuilt when
# sys.stderr is replaced or structlog is configured anew.
_stderr_logger: Any = None
_stderr_key: tuple[Any, ...] = (None, None, None, None)


def logger() -> Any:
    """The logger the next event goes to (see the module docstring); imported on first use to
    keep ``import fuzeguard`` cheap."""
    global _configured_logger, _stderr_logger, _stderr_key
    import structlog

    if structlog.is_configured() and not _prints_to_stdout(structlog.get_config()["logger_factory"]):
        if _configured_logger is None:
            _configured_logger = structlog.get_logger("fuzeguard")
        return _configured_logger
    stream = sys.stderr
    if stream is None:  # pythonw and daemons: nowhere to write, and never standard output
        return None
    config = structlog.get_config()
    key = (stream, config["processors"], config["wrapper_class"], config["context_class"])
    if _stderr_logger is None or any(a is not b for a, b in zip(key, _stderr_key, strict=True)):
        _stderr_logger = structlog.wrap_logger(
            structlog.PrintLogger(file=stream),
            processors=config["processors"],
            wrapper_class=config["wrapper_class"],
            context_class=config["context_class"],
        )
        _stderr_key = key
    return _stderr_logger


def _prints_to_stdout(factory: Any) -> bool:
    """Whether loggers from ``factory`` write to standard output: structlog's own print, write
    and bytes loggers do when made without a file, or with standard output (or its buffer)."""
    import structlog

    if not isinstance(factory, (structlog.PrintLoggerFactory, structlog.WriteLoggerFactory,
                                structlog.BytesLoggerFactory)):
        return False
    target = getattr(factory, "_file", None)
    if target is None:
        return True
    outs = (sys.stdout, sys.__stdout__)
    return any(target is out or target is getattr(out, "buffer", None) for out in outs)


def emit(level: str, event: str, **fields: Any) -> None:
    """Log one event; a broken logging setup never breaks a guarded call."""
    try:
        target = logger()
        if target is not None:
            getattr(target, level)(event, **fields)
    except Exception:  # pragma: no cover - depends on the application's logging setup
        pass
