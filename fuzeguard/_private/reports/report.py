"""The stop report: a short account of why a run was stopped, for the person who pays for it.

``run.report()``, ``LoopDetected.report()`` and ``fuze report TRACE`` give a ``StopReport``: which
layer fired and why, the evidence (the repeated calls, with their arguments previewed and redacted
as traces are, ``timeline.py``), the calls and cost spent and saved, and the ``fuze.toml`` lines
that would change the outcome. ``str(report)`` is its text; ``report.html()`` one self-contained
page with a picture of the run (``report_html.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.reports.advice import Suggestion, number, suggestions
from fuzeguard._private.reports.recorded import ACTIONS, Recorded, recorded_otherwise
from fuzeguard._private.reports.terminal import printable
from fuzeguard._private.reports.timeline import Mark, outcomes

if TYPE_CHECKING:
    from fuzeguard._private.configuration.config import Config
    from fuzeguard._private.protocols import RunInternals

# Calls shown as evidence, newest last.
MAX_EVIDENCE = 12


@dataclass(frozen=True, slots=True)
class StopReport:
    """Why a run stopped (or, for a run still going, what fired so far), with the evidence.

    ``stop`` is the detection that ended the run (None: not stopped); ``marks`` the calls known
    to the report, oldest first (a live run's are its history window); ``evidence`` the calls
    that show the loop; ``calls``, ``cost`` and ``elapsed`` what the run spent; ``skipped`` the
    calls the guard answered; ``saved_cost`` what those would have cost at the price of the
    call they repeated; ``later_calls`` the calls a trace recorded after the stop (calls the stop
    would have saved); ``source`` the trace the run was replayed from, ``replayed_under`` the
    config it was replayed under (in words) and ``recorded`` the outcome the trace records,
    which the report gives first: everything else is the replay's.
    """

    run: str
    stop: Detection | None
    marks: tuple[Mark, ...]
    evidence: tuple[Mark, ...]
    calls: int
    skipped: int
    cost: float
    elapsed: float
    saved_cost: float
    detections: dict[str, int]
    actions: dict[str, int]
    suggestions: tuple[Suggestion, ...]
    later_calls: int = 0
    source: str | None = None
    notes: tuple[str, ...] = field(default=())
    recorded: Recorded | None = None
    replayed_under: str | None = None

    def text(self) -> str:
        """The report as plain text (what ``str()`` gives)."""
        return render_text(self)

    def html(self, title: str | None = None) -> str:
        """One self-contained HTML page: the report and a timeline picture of the run."""
        # Deferred for start-up time: the page's module is loaded only when a page is drawn.
        from fuzeguard._private.reports.report_html import page

        return page([self], title or f"fuzeguard: run {self.run}", headings=False)

    def __str__(self) -> str:
        return self.text()


def report_of(run: RunInternals, *, later_calls: int = 0, source: str | None = None,
              recorded: Recorded | None = None, replayed_under: str | None = None) -> StopReport:
    """The report of ``run`` as it is now: the marks its timeline collected (replay), else its
    history, detections and the arguments previewed when layers fired (live)."""
    timeline = run._timeline
    stop = run.killed
    if timeline is not None and timeline.full:
        marks = timeline.marks()
    elif timeline is not None:
        marks = timeline.marks_of(list(run.history), run.detections)
    else:
        marks = []
    stats = run.stats()
    actions: dict[str, int] = {}
    for mark in marks:
        for d in mark.detections:
            actions[d.action or "observe"] = actions.get(d.action or "observe", 0) + 1
    saved = _saved_cost(marks)
    label = f'"{run.name}"' if run.name else run.id
    return StopReport(
        run=label,
        stop=stop,
        marks=tuple(marks),
        evidence=tuple(evidence(marks, stop)),
        calls=stats.calls,
        skipped=stats.skipped,
        cost=stats.cost,
        elapsed=stats.elapsed,
        saved_cost=saved,
        detections=dict(stats.detections_by_layer),
        actions=actions,
        suggestions=tuple(suggestions(stop, marks, run.config,
                                      timeline.plans.get(stop.fn) if timeline and stop else None)),
        later_calls=later_calls,
        source=source,
        recorded=recorded,
        replayed_under=replayed_under,
    )


def report_of_detection(detection: Detection, calls: int, cost: float, elapsed: float,
                        skipped: int, config: Config) -> StopReport:
    """A report from a detection and the run's usage alone, when the run itself is gone."""
    return StopReport(
        run=detection.run_id or "?", stop=detection, marks=(), evidence=(), calls=calls,
        skipped=skipped, cost=cost, elapsed=elapsed, saved_cost=0.0,
        detections={detection.layer: 1}, actions={detection.action or "kill": 1},
        suggestions=tuple(suggestions(detection, [], config)),
    )


def _saved_cost(marks: Sequence[Mark]) -> float:
    """What the skipped calls would have cost: each at the cost of the last call it repeated."""
    last: dict[bytes, float] = {}
    saved = 0.0
    for mark in marks:
        if mark.action == "skip":
            saved += last.get(mark.args_fp, 0.0) if mark.cost is None else mark.cost
        elif mark.cost is not None:
            last[mark.args_fp] = mark.cost
    return saved


def evidence(marks: Sequence[Mark], stop: Detection | None) -> list[Mark]:
    """The calls that show the loop, newest last: among the latest calls, those whose arguments
    or outcome repeat, and the calls detections were made on; the latest calls if none repeat
    (a budget ran out)."""
    if not marks:
        return []
    recent = list(marks[-3 * MAX_EVIDENCE:])
    args: dict[bytes, int] = {}
    results: dict[bytes, int] = {}
    for m in recent:
        args[m.args_fp] = args.get(m.args_fp, 0) + 1
        if m.result_fp is not None:
            results[m.result_fp] = results.get(m.result_fp, 0) + 1
    if stop is not None and stop.kind == "limit":
        return recent[-MAX_EVIDENCE // 2:]
    shown = [
        m for m in recent
        if args[m.args_fp] > 1 or (m.result_fp is not None and results[m.result_fp] > 1)
        or m.detections
    ]
    return (shown or recent)[-MAX_EVIDENCE:]


# ------------------------------------------------------------------------- text


def _fired(mark: Mark) -> str:
    parts = []
    for d in mark.detections:
        count = ""
        if d.count is not None and d.threshold is not None:
            count = f" {d.count}/{number(d.threshold)}"
        elif d.threshold is not None:
            count = f" limit {number(d.threshold)}"
        parts.append(f"{d.layer}{count}")
    return ", ".join(parts)


def render_text(report: StopReport) -> str:
    lines: list[str] = []
    stop = report.stop
    if report.source is not None:
        lines.append(f"Trace {report.source}")
    recorded = report.recorded
    if recorded is None:
        lines.extend(_stopped(f"Run {report.run} was", stop, ""))
    else:
        lines.extend(_recorded(report, recorded))
    if report.evidence:
        known = outcomes(report.marks)
        lines.append("")
        title = ("the calls that repeat" if stop is not None and stop.kind != "limit"
                 else "the latest calls")
        lines.append(f"Evidence, {title} (newest last):")
        rows = []
        for m in report.evidence:
            call = f"{m.fn}({m.args})" if m.args is not None else m.fn
            fired = _fired(m)
            was = recorded_otherwise(recorded, m)
            if was is not None:
                fired += ("; " if fired else "") + f"recorded: {was}"
            rows.append((str(m.index), f"{m.start:.3f}s", m.action, call, known[m.index], fired))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            cells = [r[0].rjust(widths[0]), r[1].rjust(widths[1]), r[2].ljust(widths[2]),
                     r[3].ljust(widths[3]), r[4]]
            line = "  " + "  ".join(cells)
            if r[5]:
                line += f"  [{r[5]}]"
            lines.append(line.rstrip())
    lines.append("")
    cost = f", cost {number(report.cost)}" if report.cost else ""
    lines.append(f"Spent: {report.calls} call{_s(report.calls)} ran in {report.elapsed:.2f}s{cost}.")
    saved = []
    if report.skipped:
        price = f" (cost {number(report.saved_cost)})" if report.saved_cost else ""
        saved.append(f"{report.skipped} call{_s(report.skipped)} answered by the guard{price}")
    if report.later_calls:
        saved.append(f"{report.later_calls} later call{_s(report.later_calls)} in the trace "
                     "not made")
    elif stop is not None:
        saved.append("every call after the stop")
    if saved:
        lines.append("Saved: " + "; ".join(saved) + ".")
    if report.detections:
        layers = ", ".join(f"{k} {v}" for k, v in sorted(report.detections.items(),
                                                         key=lambda kv: (-kv[1], kv[0])))
        total = sum(report.detections.values())
        line = f"Detections: {total} ({layers})"
        if report.actions:
            order = ("warn", "skip", "kill", "observe")
            line += "; actions: " + ", ".join(
                f"{a} {report.actions[a]}" for a in order if a in report.actions)
        lines.append(line + ".")
    if report.suggestions:
        lines.append("")
        if all(s.checked for s in report.suggestions):
            lines.append("Lines of fuze.toml that change the outcome (each checked by replaying "
                         "the trace with it alone):")
        else:
            lines.append("Lines of fuze.toml that may change the outcome (check one with "
                         "fuze replay --compare on a trace of the run):")
        table = ""
        width = max(len(s.line) for s in report.suggestions)
        for s in report.suggestions:
            if s.table != table:
                table = s.table
                lines.append(f"  {s.header}")
            lines.append(f"  {s.line.ljust(width)}  # {s.why}")
    if stop is not None:
        lines.append("")
        lines.append("Or resume this run with more budget: run.resume(extra_calls=..., "
                     "extra_cost=..., note=...) (docs/stopped.md).")
    lines.extend(report.notes)
    return _names_shown(report, "\n".join(lines) + "\n")


def _names_shown(report: StopReport, text: str) -> str:
    """``text`` with the names it took from the trace (the run's, the functions') written with
    their control characters as escapes: a newline in a tool's name never starts a line of the
    report (under the suggested lines of fuze.toml least of all), ESC never reaches a terminal."""
    names = {m.fn for m in report.marks} | {report.run}
    if report.stop is not None:
        names.add(report.stop.fn)
    for name in sorted(names, key=len, reverse=True):
        if not name.isprintable():
            text = text.replace(name, printable(name))
    return text


def _stopped(subject: str, stop: Detection | None, how: str) -> list[str]:
    """``subject`` stopped (or not), by what and why; ``how`` qualifies it (", as recorded")."""
    if stop is None:
        return [f"{subject} not stopped{how}."]
    what = {"limit": "a budget", "loop": "a loop", "warning": "a warning"}.get(stop.kind, "")
    if stop.kind == "limit" and stop.pattern is not None:
        what += f": {stop.pattern}"
    return [f"{subject} stopped at call {stop.call_index} by {stop.layer} ({what}){how}.",
            f"  {stop.message}"]


# What the guard did to a call, in the words of a report.
_DID = {"warn": "warned", "skip": "answered by the guard", "kill": "stopped",
        "observe": "fired in observe mode", "call": "called"}


def _recorded(report: StopReport, recorded: Recorded) -> list[str]:
    """The outcome the trace records, then whether the replay under the report's config gives
    the same (the rest of the report is the replay's)."""
    first = first_difference(recorded, report.marks)
    # The same outcome replayed: the replay's detection says it with what a trace leaves out.
    stop = report.stop if first is None and report.stop is not None else recorded.stop
    lines = _stopped(f"Run {report.run} was", stop, ", as the trace records")
    story = [f"{recorded.calls} call{_s(recorded.calls)}, {recorded.ran} ran"]
    for action in ACTIONS:
        at = sorted(i for i, a in recorded.actions.items() if a == action)
        if at and action != "kill":
            story.append(f"{_DID[action]} at {_calls(at)}")
    lines.append("  Recorded: " + "; ".join(story) + ".")
    under = report.replayed_under or "the given config"
    if first is None:
        lines.append(f"Replayed under {under}: the same outcome.")
        return lines
    index, was, now = first
    lines.append(f"Replayed under {under}, the outcome differs from call {index} on (recorded: "
                 f"{_DID[was]}; replayed: {_DID[now]}). The rest of this report is the replay's:")
    lines.extend(_stopped("The replayed run was", report.stop, ""))
    return lines


def first_difference(recorded: Recorded, marks: Sequence[Mark]) -> tuple[int, str, str] | None:
    """The first call whose replayed action differs from the recorded one: (call, recorded
    action, replayed action), or None when the replay acted on the same calls in the same way.
    A call the replay did not reach (its run was stopped earlier) counts as not acted on."""
    replayed = {m.index: m.action for m in marks if m.action in ACTIONS}
    for index in sorted(recorded.actions.keys() | replayed.keys()):
        was, now = recorded.actions.get(index, "call"), replayed.get(index, "call")
        if was != now:
            return index, was, now
    return None


def _calls(indices: Sequence[int], shown: int = 6) -> str:
    """``call 3``, ``calls 3, 4 and 7``, or ``calls 3, 4, ... and 12 more``."""
    if len(indices) == 1:
        return f"call {indices[0]}"
    if len(indices) <= shown:
        return "calls " + ", ".join(map(str, indices[:-1])) + f" and {indices[-1]}"
    return "calls " + ", ".join(map(str, indices[:shown])) + f" and {len(indices) - shown} more"


def _s(n: int) -> str:
    return "" if n == 1 else "s"

