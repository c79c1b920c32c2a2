"""Structured log events. The library configures no logging; it uses the application's.

Where events go, decided for every event (configuring logging after the first event counts):

- the application configured structlog (``structlog.is_configured()``) with a logger of its
  own: through its pipeline, ``structlog.get_logger("fuzeguard")``, wherever that sends them;
- it configured structlog, but its logger is structlog's default one, printing to standard
  output (``structlog.testing.capture_logs()`` leaves it so): through the configured processors,
  to **standard error**. Standard output is the protocol channel of MCP stdio servers and the
  data channel of command-line tools: a library must never write there;
- it did not configure structlog (most applications: they use the standard library's
  ``logging``): to the standard library logger ``fuzeguard``, whose level, handlers and filters
  (and its parents') decide, as for any library. Each record's message is the event and its
  fields as ``key=value`` (``fuzeguard.loop_detected action=warn ...``); the record also carries
  them apart, as ``record.event`` (the name) and ``record.fields`` (a dict), for a formatter that
  writes JSON. With no handler configured anywhere, Python prints warnings and errors on
  standard error (``logging.lastResort``).

Both ``logging`` and the structlog check are ready at import: the first event, made inside the
guarded call that detected something, imports and sets up nothing.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

# The standard library logger of every event when structlog is not configured.
stdlib_logger = logging.getLogger("fuzeguard")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}

_configured_logger: Any = None
# The fallback structlog logger, and the stream and structlog settings it was built with:
# rebuilt when sys.stderr is replaced or structlog is configured anew.
_stderr_logger: Any = None
_stderr_key: tuple[Any, ...] = (None, None, None, None)


def logger() -> Any:
    """The logger the next event goes to (see the module docstring): a structlog logger, the
    standard library's ``fuzeguard`` logger, or None (structlog's fallback with no standard
    error to write to)."""
    global _configured_logger, _stderr_logger, _stderr_key
    # Not imported here: an application that configured structlog has imported it.
    structlog = sys.modules.get("structlog")
    if structlog is None or not structlog.is_configured():
        return stdlib_logger
    if not _prints_to_stdout(structlog.get_config()["logger_factory"]):
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
    structlog = sys.modules["structlog"]
    if not isinstance(factory, (structlog.PrintLoggerFactory, structlog.WriteLoggerFactory,
                                structlog.BytesLoggerFactory)):
        return False
    target = getattr(factory, "_file", None)
    if target is None:
        return True
    outs = (sys.stdout, sys.__stdout__)
    return any(target is out or target is getattr(out, "buffer", None) for out in outs)


def line(event: str, fields: dict[str, Any]) -> str:
    """``event key=value ...``, keys sorted; a text with spaces or quotes is quoted (repr)."""
    parts = [event]
    for key in sorted(fields):
        value = fields[key]
        if isinstance(value, str) and (not value or any(c in value for c in " \t\n'\"=")):
            value = repr(value)
        parts.append(f"{key}={value}")
    return " ".join(parts)


def emit(level: str, event: str, **fields: Any) -> None:
    """Log one event; a broken logging setup never breaks a guarded call."""
    try:
        target = logger()
        if target is stdlib_logger:
            levelno = _LEVELS[level]
            if target.isEnabledFor(levelno):
                target.log(levelno, "%s", line(event, fields),
                           extra={"event": event, "fields": fields})
        elif target is not None:
            getattr(target, level)(event, **fields)
    except Exception:  # pragma: no cover - depends on the application's logging setup
        pass
