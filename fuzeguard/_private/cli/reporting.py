"""``fuze report``: the stop report of each run in the traces, as text and as an HTML page."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from fuzeguard._private.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    _configs_and_traces,
    _is_trace,
)
from fuzeguard._private.reports.replayed import Problem, TraceSummary
from fuzeguard._private.reports.terminal import printable


def report(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    env: str | None = None,
    html: str | None = None,
    use_code_settings: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``fuze report``: the stop report of each run in the traces; returns the exit status."""
    # Deferred for start-up time: the report is loaded by ``fuze report`` only.
    from fuzeguard._private.reports.report_html import page
    from fuzeguard._private.reports.trace_reports import trace_reports

    out = out or sys.stdout
    err = err or sys.stderr
    loaded = _configs_and_traces("fuze report", [config_path], env, paths, err, stdin=True)
    if loaded is None:
        return EXIT_USAGE
    [config], files = loaded

    def on_problem(problem: Problem) -> None:
        print(f"fuze report: {problem}", file=err)

    not_traces: list[str] = []

    def on_summary(summary: TraceSummary) -> None:
        if not _is_trace("fuze report", summary, err):
            not_traces.append(summary.trace)

    try:
        reports = trace_reports(files, config, use_code_settings=use_code_settings,
                                on_problem=on_problem, on_summary=on_summary)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"fuze report: cannot read a trace: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    for i, item in enumerate(reports):
        if i:
            out.write("\n")
        out.write("\n".join(map(printable, item.text().split("\n"))))
    if html is not None and reports:
        title = "fuzeguard report: " + ", ".join(files) if len(files) <= 3 else (
            f"fuzeguard report: {len(files)} traces")
        try:
            Path(html).write_text(page(reports, title), encoding="utf-8")
        except OSError as exc:
            print(f"fuze report: cannot write {html}: {exc.strerror or exc}", file=err)
            return EXIT_USAGE
        print(f"fuze report: wrote {html}", file=err)
    return EXIT_USAGE if not_traces else EXIT_OK
