"""fuzeguard: stop AI agents from looping.

Wrap each tool function with ``guard``; open a ``run`` per task; fuzeguard records every call,
runs its detection layers before each one, and kills, warns or skips when it sees a loop.
"""

from __future__ import annotations

import importlib.metadata as _metadata

from fuzeguard._private.config import Config
from fuzeguard._private.exceptions import ConfigError, FuzeguardError, LoopDetected
from fuzeguard._private.guard import add_cost, guard
from fuzeguard._private.records import Call, CallRecord, Decision, Detection, LimitUsage, RunStats
from fuzeguard._private.run import Run, current_run, run

try:
    __version__ = _metadata.version("fuzeguard")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "Call",
    "CallRecord",
    "Config",
    "ConfigError",
    "Decision",
    "Detection",
    "FuzeguardError",
    "LimitUsage",
    "LoopDetected",
    "Run",
    "RunStats",
    "add_cost",
    "current_run",
    "guard",
    "run",
]
