"""Structured log events. The library never configures structlog; it only asks for a logger."""

from __future__ import annotations

from typing import Any

_logger: Any = None


def logger() -> Any:
    """``structlog.get_logger("fuzeguard")``, imported on first use to keep ``import`` cheap."""
    global _logger
    if _logger is None:
        import structlog

        _logger = structlog.get_logger("fuzeguard")
    return _logger


def emit(level: str, event: str, **fields: Any) -> None:
    """Log one event; a broken logging setup never breaks a guarded call."""
    try:
        getattr(logger(), level)(event, **fields)
    except Exception:  # pragma: no cover - depends on the application's logging setup
        pass
