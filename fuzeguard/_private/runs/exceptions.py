"""Exceptions raised by fuzeguard.

The tree::

    FuzeguardError                      base of everything fuzeguard raises
    ├── ConfigError (also ValueError)   a bad fuze.toml, key, type or value
    ├── LoopDetected (also RuntimeError) a run was killed: carries the detection and the stats
    └── StoreUnavailable                a shared run's store is unreachable under fail_closed

``LoopDetected`` lives in ``loop_detected.py``: it builds the stop report of the run it ended, so it
sits above the run and the report, while everything here sits below every other module.
"""

from __future__ import annotations


class FuzeguardError(Exception):
    """Base class of every exception fuzeguard raises on purpose."""


class ConfigError(FuzeguardError, ValueError):
    """A configuration value is unknown, of the wrong type or impossible.

    The message names the file, the dotted key and its line where known, and suggests a fix.
    ``file``, ``key`` and ``line`` are also available as attributes.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.key = key
        self.line = line
        where = ""
        if file is not None:
            where = f"{file}:{line}: " if line is not None else f"{file}: "
        super().__init__(where + message)


class StoreUnavailable(FuzeguardError):
    """A shared run's store cannot be reached and ``fail_closed = true``: the call was not made."""
