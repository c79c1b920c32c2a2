"""The stop report and what it holds.

``run.report()``, ``LoopDetected.report()`` and ``fuze report TRACE`` give a ``StopReport``: why
a run stopped, its calls (``Mark``), the ``fuze.toml`` lines that would change the outcome
(``Suggestion``) and, for a report replayed from a trace, the outcome the trace records
(``Recorded``). See ``docs/stopped.md``.
"""

from __future__ import annotations

from fuzeguard._private.reports.advice import Suggestion
from fuzeguard._private.reports.recorded import Recorded
from fuzeguard._private.reports.report import StopReport
from fuzeguard._private.reports.timeline import Mark
from fuzeguard._private.runs.public import name_classes as _name_classes

__all__ = ["Mark", "Recorded", "StopReport", "Suggestion"]

# Tracebacks and reprs name this module, not the private one a class is defined in.
_name_classes(__name__, globals(), __all__)
