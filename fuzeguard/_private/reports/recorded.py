"""What a trace records of how a run went when it ran: the guard's action on each call, as the
live guard wrote it (``trace.py``: ``"action"`` and ``"detections"`` on a call's line).

``fuze report`` replays a trace under a config that may not be the one the run ran under; what
the trace records is what happened, and the report gives it first (``report.py``). Nothing here
decides anything: a line's recorded action is read, never recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.records import Detection

if TYPE_CHECKING:
    from fuzeguard._private.reports.timeline import Mark

# What the guard did to a call, as a trace records it: the actions a report tells apart.
ACTIONS = ("warn", "skip", "kill", "observe")


@dataclass(frozen=True, slots=True)
class Recorded:
    """A run's outcome as its trace records it.

    ``calls`` is how many lines the run has (calls made or refused), ``ran`` how many of them
    ran (neither answered by the guard nor refused); ``actions`` maps each call the guard acted
    on to its action (``"warn"``, ``"skip"``, ``"kill"``, ``"observe"``); ``stop`` is the recorded
    detection that ended the run (None: the trace records no stop, or a resume after it).
    """

    calls: int
    ran: int
    actions: dict[int, str]
    stop: Detection | None


class RecordedRun:
    """Reads a run's trace lines, in order, as the replay parses them (``add``)."""

    __slots__ = ("actions", "calls", "ran", "stop")

    def __init__(self) -> None:
        self.calls = 0
        self.ran = 0
        self.actions: dict[int, str] = {}
        self.stop: Detection | None = None

    def add(self, line: dict[str, Any]) -> None:
        """One call's line of this run."""
        self.calls += 1
        index = self.calls
        if "resumed" in line:
            self.stop = None  # resumed after the stop: the run went on
        action = line.get("action")
        if action not in ACTIONS:
            self.ran += 1
            return
        if action != "kill" or self.stop is None:
            # a kill after the stop refuses a call of a dead run: it is not an action of its own
            self.actions[index] = action
        if action == "kill":
            if self.stop is None:
                self.stop = _detection(line, index)
        elif action != "skip":
            self.ran += 1

    def outcome(self) -> Recorded:
        return Recorded(self.calls, self.ran, dict(self.actions), self.stop)


def _detection(line: dict[str, Any], index: int) -> Detection:
    """The recorded detection that chose the kill on the line at call ``index`` (a line refused
    because its run was already dead records none)."""
    fn = line.get("fn")
    found = line.get("detections")
    chosen: dict[str, Any] = {}
    if isinstance(found, list):
        for item in found:
            if isinstance(item, dict) and item.get("action") == "kill":
                chosen = item
                break
    count, threshold = chosen.get("count"), chosen.get("threshold")
    kind = chosen.get("kind")
    return Detection(
        layer=str(chosen.get("layer", "?")),
        fn=fn if isinstance(fn, str) else "?",
        message=str(chosen.get("message", "")),
        count=count if type(count) is int else None,
        threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
        kind=kind if kind in ("loop", "warning", "limit") else "loop",
        call_index=index,
        action="kill",
    )


def recorded_otherwise(recorded: Recorded | None, mark: Mark) -> str | None:
    """The action the trace records for ``mark``'s call when the replay acted otherwise on it
    (``"call"``: the guard did nothing to it then), else None."""
    if recorded is None:
        return None
    was = recorded.actions.get(mark.index, "call")
    return was if was != (mark.action if mark.action in ACTIONS else "call") else None
