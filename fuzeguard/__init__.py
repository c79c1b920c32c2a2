"""fuzeguard: stop AI agents from looping.

Wrap each tool function with ``guard``; open a ``run`` per task; fuzeguard records every call,
runs its detection layers before each one, and kills, warns or skips when it sees a loop.
"""

from __future__ import annotations

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.meaning.records import Call, CallRecord, Decision, Detection, LimitUsage, RunStats
from fuzeguard._private.runs.ask import Question
from fuzeguard._private.runs.exceptions import ConfigError, FuzeguardError, StoreUnavailable
from fuzeguard._private.runs.guard import add_cost, guard
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.public import name_classes as _name_classes
from fuzeguard._private.runs.run import Run, run


def __getattr__(name: str) -> str:
    # __version__ is read from the installed metadata on first access: importlib.metadata is slow
    # to import, and most programs never ask.
    if name == "__version__":
        import importlib.metadata

        try:
            return importlib.metadata.version("fuzeguard")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source tree, no install
            return "0.0.0"
    raise AttributeError(f"module 'fuzeguard' has no attribute {name!r}")

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
    "Question",
    "Run",
    "RunStats",
    "StoreUnavailable",
    "add_cost",
    "current_run",
    "guard",
    "run",
]

# Tracebacks and reprs name this module, not the private one a class is defined in.
_name_classes(__name__, globals(), __all__)
