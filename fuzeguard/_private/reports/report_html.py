"""The stop report as one self-contained HTML page, with a timeline picture of each run.

The picture is inline SVG: calls in the order they were made, evenly spaced (wall time would
crowd a run's calls into a sliver of the axis: a slow first call, then a burst), one lane per
tool, each call one mark (``<g class="call">``) shaped and coloured by what the guard did
(called, warned by the ladder, an early warning, skipped, killed; an error is ringed in red; a
call the replay acted on otherwise than the trace records is boxed), and each call linked by an
arc to the earlier call it repeats (same arguments). A legend names each mark. Hovering a mark
shows its call, when it started and its outcome (SVG ``<title>``). The picture scales down to
the width of the page. No script, no network: a Content-Security-Policy forbids both, and every
recorded text is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Protocol

from fuzeguard._private.reports.recorded import Recorded, recorded_otherwise
from fuzeguard._private.reports.timeline import Mark, outcomes

LANE = 40
LABEL = 170
TOP = 30
PLOT = 900.0  # the widest the calls are spread over, in pixels
MAX_STEP = 44.0  # the most room a call gets: a short run is not stretched over the whole plot
MIN_WIDTH = 820  # room for the legend
TICK = 60.0  # the least room between two call numbers on the axis
LEGEND_LINE = 26  # the legend's second line
COLOURS = {
    "call": "#3b6fb6", "warn": "#e0a100", "early": "#e0a100", "skip": "#8c8c8c",
    "kill": "#c62828", "observe": "#7b52ab", "interrupted": "#5f6b7a",
}

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d232b;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:32px}
pre{background:#f5f6f8;padding:12px;overflow-x:auto;font-size:12.5px;white-space:pre-wrap}
svg{border:1px solid #d9dde3;background:#fff}
"""
# The picture's own style, inside the SVG: it reads the same on its own (docs/stopped.md).
_SVG_STYLE = (
    ".lane{fill:#f7f8fa}.lane.odd{fill:#fff}"
    ".fn{font:12px ui-monospace,monospace;fill:#1d232b}"
    ".axis{font:11px system-ui,sans-serif;fill:#5f6b7a}"
    ".link{fill:none;stroke:#c62828;stroke-opacity:.45;stroke-width:1.2}"
    ".legend{font:12px system-ui,sans-serif;fill:#1d232b}"
)


class Drawn(Protocol):
    """What a page draws of a stop report (``report.StopReport``, which imports this module
    only when a page is asked for): the run's label, its calls, what the trace recorded of
    them, and the report's text."""

    @property
    def run(self) -> str: ...
    @property
    def marks(self) -> tuple[Mark, ...]: ...
    @property
    def recorded(self) -> Recorded | None: ...
    def text(self) -> str: ...


def page(reports: Sequence[Drawn], title: str, *, headings: bool = True) -> str:
    """A whole page: each report's picture and text, under a heading of its run's name
    (``headings``; a page of one run, whose title names it, needs none)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">",
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
    ]
    for i, report in enumerate(reports):
        parts.append(f'<section class="run" id="run-{i + 1}">')
        if headings:
            parts.append(f"<h2>Run {escape(report.run)}</h2>")
        parts.append(picture(report))
        parts.append(f"<pre>{escape(report.text())}</pre>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _xs(marks: Sequence[Mark]) -> list[float]:
    """Each mark's x: by its place in the run, evenly spaced."""
    step = min(MAX_STEP, PLOT / (len(marks) - 1)) if len(marks) > 1 else 0.0
    return [LABEL + 20 + step * i for i in range(len(marks))]


def picture(report: Drawn) -> str:
    """The timeline of one run as an inline SVG element."""
    marks = list(report.marks)
    lanes: dict[str, int] = {}
    for m in marks:
        lanes.setdefault(m.fn, len(lanes))
    xs = _xs(marks)
    width = max(int(max(xs, default=LABEL + 20) + 60), MIN_WIDTH)
    otherwise = {m.index: recorded_otherwise(report.recorded, m) for m in marks}
    differs = any(otherwise.values())
    height = TOP + LANE * max(len(lanes), 1) + 70 + (LEGEND_LINE if differs else 0)
    shown = outcomes(marks)
    out = [
        # Its natural size, shrunk to the width of a narrower page (in a page and in an img).
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" style="max-width:100%;height:auto" '
        'role="img" '
        f'aria-label="{escape(f"timeline of run {report.run}: {len(marks)} calls")}">',
        f"<style>{_SVG_STYLE}</style>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff"/>',
    ]
    for fn, lane in lanes.items():
        y = TOP + lane * LANE
        odd = " odd" if lane % 2 else ""
        out.append(f'<rect class="lane{odd}" x="0" y="{y}" width="{width}" height="{LANE}"/>')
        label = fn if len(fn) <= 22 else fn[:21] + "…"
        out.append(f'<text class="fn" x="8" y="{y + LANE / 2 + 4:.1f}">{escape(label)}</text>')
    if marks:
        axis_y = TOP + LANE * len(lanes) + 16
        out.append(f'<text class="axis" x="8" y="{axis_y}">call</text>')
        last = -TICK
        for i, (m, x) in enumerate(zip(marks, xs, strict=True)):
            if x - last >= TICK or (i == len(marks) - 1 and x - last >= TICK / 2):
                out.append(f'<text class="axis" x="{x:.1f}" y="{axis_y}" '
                           f'text-anchor="middle">{m.index}</text>')
                last = x
    # Arcs from each call to the previous call with the same arguments: the repeats.
    last_of: dict[bytes, int] = {}
    for i, m in enumerate(marks):
        j = last_of.get(m.args_fp)
        if j is not None and m.args_fp:
            x1, x2 = xs[j], xs[i]
            y1 = TOP + lanes[marks[j].fn] * LANE + LANE / 2
            y2 = TOP + lanes[m.fn] * LANE + LANE / 2
            lift = min(LANE / 2 + 4, 8 + (x2 - x1) / 6)
            out.append(f'<path class="link" data-from="{marks[j].index}" data-to="{m.index}" '
                       f'd="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 - lift:.1f} {x2:.1f},'
                       f'{y2 - lift:.1f} {x2:.1f},{y2:.1f}"/>')
        last_of[m.args_fp] = i
    for i, m in enumerate(marks):
        out.append(_mark(m, xs[i], TOP + lanes[m.fn] * LANE + LANE / 2, shown[m.index],
                         otherwise[m.index]))
    out.append(_legend(TOP + LANE * max(len(lanes), 1) + 44, differs))
    out.append("</svg>")
    return "\n".join(out)


def _drawn(m: Mark) -> str:
    """The mark a call gets: its action, or ``early`` for a warning no ladder step gave (an
    early warning: ``kind = "warning"``)."""
    if m.action == "warn" and m.detections and all(d.kind == "warning" for d in m.detections
                                                     if d.action == "warn"):
        return "early"
    return m.action


def _mark(m: Mark, x: float, y: float, outcome: str, recorded: str | None) -> str:
    """One call's mark; ``recorded``: the action the trace records for it, when the replay
    acted otherwise (boxed)."""
    colour = COLOURS.get(m.action, COLOURS["call"])
    call = f"{m.fn}({m.args})" if m.args is not None else m.fn
    fired = "; ".join(f"{d.layer} ({d.action}): {d.message}" for d in m.detections)
    tip = f"call {m.index} at {m.start:.3f}s, {m.action}: {call} → {outcome}"
    if fired:
        tip += f"\n{fired}"
    if recorded is not None:
        tip += f"\nrecorded when it ran: {recorded}"
    drawn = _drawn(m)
    attrs = f'class="call" data-index="{m.index}" data-action="{escape(m.action)}"'
    if drawn == "early":
        attrs += ' data-early="true"'
    if m.error:
        attrs += ' data-error="true"'
    if recorded is not None:
        attrs += f' data-recorded="{escape(recorded)}"'
    shape = _shape(drawn, x, y, COLOURS.get(drawn, colour))
    ring = _error_ring(x, y) if m.error else ""
    if recorded is not None:
        ring += _recorded_box(x, y)
    return f"<g {attrs}><title>{escape(tip)}</title>{shape}{ring}</g>"


def _error_ring(x: float, y: float) -> str:
    return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="8.5" fill="none" stroke="#c62828" '
            'stroke-width="2"/>')


def _recorded_box(x: float, y: float) -> str:
    """Around a call the replay acted on otherwise than the trace records."""
    return (f'<rect x="{x - 11:.1f}" y="{y - 11:.1f}" width="22" height="22" fill="none" '
            'stroke="#7b52ab" stroke-width="1.5" stroke-dasharray="3 2"/>')


def _shape(action: str, x: float, y: float, colour: str) -> str:
    if action == "kill":
        return (f'<path d="M{x - 7:.1f},{y - 7:.1f} L{x + 7:.1f},{y + 7:.1f} M{x + 7:.1f},'
                f'{y - 7:.1f} L{x - 7:.1f},{y + 7:.1f}" stroke="{colour}" stroke-width="3.5"/>')
    if action == "skip":
        return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5" fill="#fff" stroke="{colour}" '
                'stroke-width="2"/>')
    if action == "warn":
        return (f'<path d="M{x:.1f},{y - 7:.1f} L{x + 7:.1f},{y + 5:.1f} L{x - 7:.1f},'
                f'{y + 5:.1f} Z" fill="{colour}"/>')
    if action == "early":  # a hollow diamond: a warning of its own, not a step of the ladder
        return (f'<path d="M{x:.1f},{y - 7:.1f} L{x + 7:.1f},{y:.1f} L{x:.1f},{y + 7:.1f} '
                f'L{x - 7:.1f},{y:.1f} Z" fill="#fff" stroke="{colour}" stroke-width="2.5"/>')
    dash = ' stroke-dasharray="2 2"' if action == "interrupted" else ""
    return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5" fill="{colour}" stroke="{colour}"'
            f'{dash}/>')


def _legend(y: float, differs: bool) -> str:
    """What each mark means; ``differs``: a second line for the calls the replay acted on
    otherwise than the trace records."""
    items = [("call", "called"), ("early", "early warning"), ("warn", "warned"),
             ("skip", "answered by the guard"), ("kill", "killed")]
    out = ['<g class="legend-items">']
    x = 16.0
    for action, text in items:
        out.append(_shape(action, x, y, COLOURS[action]))
        out.append(f'<text class="legend" x="{x + 12:.1f}" y="{y + 4:.1f}">{text}</text>')
        x += 30 + 7 * len(text)
    out.append(_error_ring(x, y))
    out.append(f'<text class="legend" x="{x + 14:.1f}" y="{y + 4:.1f}">error</text>')
    x += 70
    out.append(f'<path class="link" d="M{x:.1f},{y:.1f} C{x:.1f},{y - 8:.1f} {x + 24:.1f},'
               f'{y - 8:.1f} {x + 24:.1f},{y:.1f}"/>')
    out.append(f'<text class="legend" x="{x + 30:.1f}" y="{y + 4:.1f}">same arguments again'
               "</text>")
    if differs:
        y += LEGEND_LINE
        out.append(_recorded_box(16.0, y))
        out.append(f'<text class="legend" x="32.0" y="{y + 4:.1f}">the trace records another '
                   "action for this call (hover for it)</text>")
    out.append("</g>")
    return "\n".join(out)
