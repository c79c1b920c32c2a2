"""``LoopDetected``: raised when a guarded call is killed, with the stop report of the run it ended.

Raised by ``guard()`` only (``guard.py``); kept apart from the other exceptions (``exceptions.py``,
imported by nearly every module) because its ``report()`` reads the run and the stop report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.runs.exceptions import FuzeguardError
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.run import Run

if TYPE_CHECKING:
    from fuzeguard._private.meaning.records import Detection, RunStats
    from fuzeguard._private.reports.report import StopReport


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
        # Deferred for start-up time: the report (and the advice and replay it reads) is loaded
        # only when a report is asked for, as ``Run.report`` does.
        from fuzeguard._private.reports.report import report_of, report_of_detection

        run = self.run
        if run is None:
            current = current_run()
            run = current if current.id == self.detection.run_id else None
        if run is not None:
            return report_of(run)
        s = self.stats
        return report_of_detection(self.detection, s.calls, s.cost, s.elapsed, s.skipped, Config())
