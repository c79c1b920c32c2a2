"""Exceptions raised by fuzeguard.

The tree::

    FuzeguardError                      base of everything fuzeguard raises
    ├── ConfigError (also ValueError)   a bad fuze.toml, key, type or value
    └── LoopDetected (also RuntimeError) a run was killed: carries the detection and the stats
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fuzeguard._private.meaning.records import Detection, RunStats
    from fuzeguard._private.reports.report import StopReport
    from fuzeguard._private.runs.run import Run


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


class LoopDetected(FuzeguardError, RuntimeError):
    """Raised when a guarded call is killed: the run is over.

    ``detection`` says which layer fired and why; ``stats`` is the run's usage at that moment.
    Every later guarded call in the same run raises this again (kill is sticky), so a framework that
    swallows the exception and retries cannot keep a dead run going.
    """

    def __init__(self, detection: Detection, stats: RunStats, run: Run | None = None) -> None:
        self.detection = detection
        self.stats = stats
        self.run = run
        super().__init__(detection.message)

    def report(self) -> StopReport:
        """The stop report of the run that was killed (``Run.report``); from the detection and
        the stats alone when that run is not known here."""
        from fuzeguard._private.reports.report import report_of, report_of_detection
        from fuzeguard._private.runs.run import current_run

        run = self.run
        if run is None:
            current = current_run()
            run = current if current.id == self.detection.run_id else None
        if run is not None:
            return report_of(run)
        s = self.stats
        from fuzeguard._private.configuration.config import Config

        return report_of_detection(self.detection, s.calls, s.cost, s.elapsed, s.skipped, Config())


class StoreUnavailable(FuzeguardError):
    """A shared run's store cannot be reached and ``fail_closed = true``: the call was not made."""
