"""The stop report as one self-contained HTML page, with a timeline picture of each run.

The picture is inline SVG: calls along time, one lane per tool, each call one mark (``<g
class="call">``) shaped and coloured by what the guard did (called, warned, skipped, killed; an
error is ringed in red), and each call linked by an arc to the earlier call it repeats (same
arguments). Hovering a mark shows its call and outcome (SVG ``<title>``). No script, no network:
a Content-Security-Policy forbids both, and every recorded text is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from fuzeguard._private.report import outcomes

if TYPE_CHECKING:
    from fuzeguard._private.report import StopReport
    from fuzeguard._private.timeline import Mark

LANE = 40
LABEL = 170
TOP = 30
MIN_STEP = 14.0  # calls closer in time than this many pixels are spread apart
PLOT = 900.0
COLOURS = {
    "call": "#3b6fb6", "warn": "#e0a100", "skip": "#8c8c8c", "kill": "#c62828",
    "observe": "#7b52ab", "interrupted": "#5f6b7a",
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


def page(reports: Sequence[StopReport], title: str) -> str:
    """A whole page: each report's picture and text."""
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
        parts.append(f"<h2>Run {escape(report.run)}</h2>")
        parts.append(picture(report))
        parts.append(f"<pre>{escape(report.text())}</pre>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _xs(marks: Sequence[Mark]) -> list[float]:
    """Each mark's x: proportional to its start time, spread at least ``MIN_STEP`` apart."""
    if not marks:
        return []
    t0 = min(m.start for m in marks)
    span = max(m.start for m in marks) - t0
    xs: list[float] = []
    for m in marks:
        x = LABEL + 20 + (PLOT * (m.start - t0) / span if span > 0 else 0.0)
        if xs and x < xs[-1] + MIN_STEP:
            x = xs[-1] + MIN_STEP
        xs.append(x)
    return xs


def picture(report: StopReport) -> str:
    """The timeline of one run as an inline SVG element."""
    marks = list(report.marks)
    lanes: dict[str, int] = {}
    for m in marks:
        lanes.setdefault(m.fn, len(lanes))
    xs = _xs(marks)
    width = int(max(xs, default=LABEL + 20) + 60)
    height = TOP + LANE * max(len(lanes), 1) + 70
    shown = outcomes(marks)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
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
        t0 = min(m.start for m in marks)
        end = max(m.start for m in marks)
        axis_y = TOP + LANE * len(lanes) + 16
        out.append(f'<text class="axis" x="{LABEL + 20}" y="{axis_y}">{_time(t0)}</text>')
        out.append(f'<text class="axis" x="{xs[-1]:.1f}" y="{axis_y}" '
                   f'text-anchor="end">{_time(end)}</text>')
    # Arcs from each call to the previous call with the same arguments: the repeats.
    last: dict[bytes, int] = {}
    for i, m in enumerate(marks):
        j = last.get(m.args_fp)
        if j is not None and m.args_fp:
            x1, x2 = xs[j], xs[i]
            y1 = TOP + lanes[marks[j].fn] * LANE + LANE / 2
            y2 = TOP + lanes[m.fn] * LANE + LANE / 2
            lift = min(LANE / 2 + 4, 8 + (x2 - x1) / 6)
            out.append(f'<path class="link" data-from="{marks[j].index}" data-to="{m.index}" '
                       f'd="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 - lift:.1f} {x2:.1f},'
                       f'{y2 - lift:.1f} {x2:.1f},{y2:.1f}"/>')
        last[m.args_fp] = i
    for i, m in enumerate(marks):
        out.append(_mark(m, xs[i], TOP + lanes[m.fn] * LANE + LANE / 2, shown[m.index]))
    out.append(_legend(TOP + LANE * max(len(lanes), 1) + 40))
    out.append("</svg>")
    return "\n".join(out)


def _time(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _mark(m: Mark, x: float, y: float, outcome: str) -> str:
    colour = COLOURS.get(m.action, COLOURS["call"])
    call = f"{m.fn}({m.args})" if m.args is not None else m.fn
    fired = "; ".join(f"{d.layer} ({d.action}): {d.message}" for d in m.detections)
    tip = f"call {m.index} at {m.start:.3f}s, {m.action}: {call} → {outcome}"
    if fired:
        tip += f"\n{fired}"
    attrs = f'class="call" data-index="{m.index}" data-action="{escape(m.action)}"'
    if m.error:
        attrs += ' data-error="true"'
    shape = _shape(m.action, x, y, colour)
    ring = ""
    if m.error:
        ring = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="8.5" fill="none" stroke="#c62828" '
                'stroke-width="2"/>')
    return f"<g {attrs}><title>{escape(tip)}</title>{shape}{ring}</g>"


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
    dash = ' stroke-dasharray="2 2"' if action == "interrupted" else ""
    return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5" fill="{colour}" stroke="{colour}"'
            f'{dash}/>')


def _legend(y: float) -> str:
    items = [("call", "called"), ("warn", "warned"), ("skip", "answered by the guard"),
             ("kill", "killed")]
    out = ['<g class="legend-items">']
    x = LABEL + 20.0
    for action, text in items:
        out.append(_shape(action, x, y, COLOURS[action]))
        out.append(f'<text class="legend" x="{x + 12:.1f}" y="{y + 4:.1f}">{text}</text>')
        x += 30 + 7 * len(text)
    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="8.5" fill="none" stroke="#c62828" '
               'stroke-width="2"/>')
    out.append(f'<text class="legend" x="{x + 14:.1f}" y="{y + 4:.1f}">error</text>')
    x += 70
    out.append(f'<path class="link" d="M{x:.1f},{y:.1f} C{x:.1f},{y - 8:.1f} {x + 24:.1f},'
               f'{y - 8:.1f} {x + 24:.1f},{y:.1f}"/>')
    out.append(f'<text class="legend" x="{x + 30:.1f}" y="{y + 4:.1f}">same arguments again'
               "</text>")
    out.append("</g>")
    return "\n".join(out)
