"""Stop reports of recorded traces (``fuze report TRACE``): each run replayed under a config
through the same decision path as live calls (``replay.py``), and each suggested ``fuze.toml``
line checked by replaying the trace with it. A live run's report (``report.py``) needs none of
this: it is loaded only when traces are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.reports.advice import Suggestion
from fuzeguard._private.reports.recorded import RecordedRun
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replayed import ReplayedDetection
from fuzeguard._private.reports.report import StopReport, report_of
from fuzeguard._private.reports.timeline import Mark, Timeline
from fuzeguard._private.reports.trace_reading import trace_files
from fuzeguard._private.runs.exceptions import ConfigError

if TYPE_CHECKING:
    from fuzeguard._private.reports.replay_run import ReplayRun
    from fuzeguard._private.reports.replayed import Problem, TraceSummary

# Distinct suggested lines checked by replaying a trace (each is one more replay of it).
MAX_CHECKED_LINES = 32


def trace_reports(
    paths: Sequence[str],
    config: Config,
    *,
    use_code_settings: bool = True,
    on_problem: Callable[[Problem], object] | None = None,
    on_summary: Callable[[TraceSummary], object] | None = None,
) -> list[StopReport]:
    """The report of each run recorded in the traces (or directories of them), replayed under
    ``config`` through the same decision path as live calls (``replay.py``), with the outcome
    each trace records. ``on_summary`` gets what replaying each trace found."""
    runs: dict[int, tuple[ReplayRun, RecordedRun]] = {}

    def attach(run: ReplayRun) -> None:
        run._timeline = Timeline(run, full=True)
        runs[id(run)] = (run, RecordedRun())

    def read(run: ReplayRun, line: dict[str, Any]) -> None:
        runs[id(run)][1].add(line)

    replayer = Replayer(config, on_problem=on_problem, use_code_settings=use_code_settings,
                        keep=0, on_run=attach, on_line=read)
    reports: list[StopReport] = []
    for path in trace_files(paths):
        runs.clear()
        summary = replayer.replay_file(path)
        if on_summary is not None:
            on_summary(summary)
        # The calls after a kill are counted per trace: per run only when it holds one.
        later = summary.not_evaluated if len(runs) == 1 else 0
        found = [report_of(run, later_calls=later, source=path, recorded=lines.outcome(),
                           replayed_under=config.described)
                 for run, lines in runs.values()]
        if path != "-":  # a stream cannot be read again
            found = _checked(found, summary.kills, config, path, use_code_settings)
        reports.extend(found)
    return reports


def _checked(reports: list[StopReport], kills: Sequence[ReplayedDetection], config: Config,
             path: str, use_code_settings: bool) -> list[StopReport]:
    """The reports with only the suggested lines that change how their run ended and, for a
    threshold, act where their comment says: each line checked by replaying the trace with it
    (``replayed_with``)."""
    stops = {id(k.detection): (k.run, k.call) for k in kills}
    lines: dict[tuple[str, str, str], Suggestion] = {}
    for report in reports:
        if report.stop is not None and id(report.stop) in stops:
            for s in report.suggestions:
                lines.setdefault((s.table, s.key, s.value), s)
    trials = replayed_with(lines, config, path, use_code_settings)
    if trials is None:
        return reports
    out = []
    for report in reports:
        stop = stops.get(id(report.stop)) if report.stop is not None else None
        if stop is not None:
            kept = []
            for s in report.suggestions:
                trial = trials[(s.table, s.key, s.value)]
                if trial is not None and stop not in trial.kills and _acts_as_said(
                    s, stop[0], report.marks, trial
                ):
                    kept.append(dataclasses.replace(s, checked=True))
            report = dataclasses.replace(report, suggestions=tuple(kept))
        out.append(report)
    return out


def _acts_as_said(s: Suggestion, run: str | None, marks: Sequence[Mark], trial: Trial) -> bool:
    """Whether a threshold's layer first acted, on the function it is set for, where the line's
    comment says: at ``acted_at`` in the replay as it was, and at ``acts_at`` with the line (or
    not at all: the trace ended before that count)."""
    if s.acts_at is None:
        return True
    fn = s.table.removeprefix("functions.")
    if s.acted_at is not None:
        before = next((d.count for m in marks for d in m.detections
                       if d.layer == s.layer and d.fn == fn
                       and (d.kind == "loop" or not s.loop_only)), None)
        if before != s.acted_at:
            return False
    return trial.first_acted.get((run, s.layer, fn, s.loop_only), s.acts_at) == s.acts_at


@dataclass(frozen=True, slots=True)
class Trial:
    """A trace replayed with one suggested line added: the (run, call) of each kill, and the
    count at which each layer first acted, by (run, layer, function, loop detections only)."""

    kills: set[tuple[str | None, int]]
    first_acted: dict[tuple[str | None, str, str, bool], int]


def replayed_with(
    lines: Mapping[tuple[str, str, str], Suggestion], config: Config, path: str,
    use_code_settings: bool,
) -> dict[tuple[str, str, str], Trial | None] | None:
    """For each line, the ``Trial`` of the trace replayed with that line added, or None for a
    line that cannot be applied. None when there are no lines or more than
    ``MAX_CHECKED_LINES`` (each is one more replay of the trace)."""
    if not lines or len(lines) > MAX_CHECKED_LINES:
        return None
    trials: dict[tuple[str, str, str], Trial | None] = {}
    for key, line in lines.items():
        try:
            candidate = line.applied(config)
        except (ConfigError, ValueError, TypeError):
            trials[key] = None
            continue
        first: dict[tuple[str | None, str, str, bool], int] = {}

        def found(item: ReplayedDetection,
                  first: dict[tuple[str | None, str, str, bool], int] = first) -> None:
            d = item.detection
            if d.count is not None:
                first.setdefault((item.run, d.layer, d.fn, False), d.count)
                if d.kind == "loop":
                    first.setdefault((item.run, d.layer, d.fn, True), d.count)

        replayed = Replayer(candidate, use_code_settings=use_code_settings, keep=0,
                            on_detection=found)
        kills = {(k.run, k.call) for k in replayed.replay_file(path).kills}
        trials[key] = Trial(kills, first)
    return trials
