"""What a replay reports: each detection with where it was made, each line it could not replay as
written, and each trace's summary."""

from dataclasses import dataclass, field
from typing import Any

from fuzeguard._private.meaning.records import Detection

# Problems kept in a summary; all are counted and passed to ``on_problem``.
KEEP_PROBLEMS = 1000


@dataclass(frozen=True, slots=True)
class ReplayedDetection:
    """A detection found while replaying: where (trace, call number, line) and what.

    ``call`` is the 1-based index of the call in the trace: every non-blank line is one call, so
    for a trace of one run it is the live call index.
    """

    trace: str
    call: int
    line: int
    run: str | None
    detection: Detection

    def as_json(self) -> dict[str, Any]:
        """The ``fuze replay --format json`` object: exactly the eight documented keys."""
        d = self.detection
        return {
            "trace": self.trace,
            "call": self.call,
            "fn": d.fn,
            "layer": d.layer,
            "action": d.action,
            "count": d.count,
            "threshold": d.threshold,
            "message": d.message,
        }


@dataclass(frozen=True, slots=True)
class Problem:
    """A line that could not be replayed as written (it is skipped, or a field is unknown)."""

    trace: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.trace}:{self.line}: {self.message}"


@dataclass(slots=True)
class TraceSummary:
    """What replaying one trace found.

    ``detections`` holds the first ``Replayer.keep`` detections (all by default); ``detected``,
    ``by_layer`` and ``by_action`` count every one. ``problems`` holds the first ``KEEP_PROBLEMS``
    problems and ``problem_count`` counts them all. ``ignored_settings`` names the settings the
    trace recorded that replay ignored because they may name code or files.
    """

    trace: str
    calls: int = 0
    runs: int = 0
    # Lines that were calls (a JSON object with a "fn"); a file with lines and none of them is
    # not a trace.
    call_lines: int = 0
    detected: int = 0
    detections: list[ReplayedDetection] = field(default_factory=list)
    by_layer: dict[str, int] = field(default_factory=dict)
    by_action: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    kills: list[ReplayedDetection] = field(default_factory=list)
    not_evaluated: int = 0
    problem_count: int = 0
    ignored_settings: set[str] = field(default_factory=set)

    @property
    def killed_runs(self) -> int:
        """How many runs were killed: a run resumed and killed again is one run killed more
        than once (``kills`` holds each kill)."""
        return len({kill.run for kill in self.kills})
