"""``fuze replay``: the detections each trace would get under a config, as text or JSON, with a
progress bar."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from fuzeguard._private.cli.common import (
    EXIT_DETECTED,
    EXIT_OK,
    EXIT_USAGE,
    _config,
    _is_trace,
    _json_line,
    _processes,
    _s,
    _text_size,
    _unreplayable,
)
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replay_pool import WorkerLost, replay_files
from fuzeguard._private.reports.replayed import Problem, ReplayedDetection, TraceSummary
from fuzeguard._private.reports.terminal import printable
from fuzeguard._private.reports.trace_reading import trace_files

MAX_ROWS = 50
MAX_PROBLEMS = 20
PROGRESS_BYTES = 16 * 1024 * 1024
PROGRESS_TRACES = 10


class _Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, total_bytes: int, traces: int) -> None:
        self.stream = stream
        self.total = max(total_bytes, 1)
        self.traces = traces
        self.base = 0
        self.index = 0
        self.last = 0.0

    def start(self, index: int) -> None:
        self.index = index

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        fraction = min((self.base + done) / self.total, 1.0)
        width = 30
        filled = int(fraction * width)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(
            f"\r[{bar}] {fraction:6.1%}  {_size(self.base + done)}/{_size(self.total)}  "
            f"trace {self.index}/{self.traces} "
        )
        self.stream.flush()

    def finish_trace(self, size: int) -> None:
        self.base += size

    def close(self) -> None:
        self.update(0, force=True)
        self.stream.write("\r" + " " * 79 + "\r")
        self.stream.flush()


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def replay(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    env: str | None = None,
    fmt: str = "text",
    fail_on_detect: bool = False,
    use_code_settings: bool = True,
    progress: bool | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    merge: bool = False,
    jobs: int | None = None,
) -> int:
    """``fuze replay``: replay traces and report detections; returns the exit status. ``jobs``:
    the processes the traces are split across (None: one per core, when they are large enough
    to gain from it)."""
    out = out or sys.stdout
    err = err or sys.stderr
    config = _config("fuze replay", config_path, env, err)
    if config is None:
        return EXIT_USAGE
    files = list(trace_files(paths))
    # Not only regular files: a FIFO (``<(ssh host cat run.jsonl)``) or a device is read as a stream.
    missing = [p for p in files if p != "-" and (not os.path.exists(p) or os.path.isdir(p))]
    if missing:
        for p in missing:
            print(f"fuze replay: no such trace file: {p}", file=err)
        return EXIT_USAGE
    empty = [p for p in paths
             if os.path.isdir(p) and not any(f.startswith(os.path.join(p, "")) for f in files)]
    for p in empty:
        print(f"fuze replay: no traces in directory {p} (a directory stands for its *.jsonl and "
              "*.jsonl.gz files)", file=err)
    if empty:
        return EXIT_USAGE

    sizes = [_text_size(p) if p != "-" and os.path.isfile(p) else 0 for p in files]
    show = progress if progress is not None else (
        err.isatty() and (len(files) >= PROGRESS_TRACES or sum(sizes) >= PROGRESS_BYTES)
    )
    bar = _Progress(err, sum(sizes), len(files)) if show else None

    problems_shown: dict[str, int] = {}

    def on_problem(problem: Problem) -> None:
        shown = problems_shown.get(problem.trace, 0)
        problems_shown[problem.trace] = shown + 1
        if shown < MAX_PROBLEMS:
            if bar is not None:
                err.write("\r" + " " * 79 + "\r")
            print(f"fuze replay: {printable(str(problem))}", file=err)

    def on_json(found: ReplayedDetection) -> None:
        out.write(_json_line(found.as_json()) + "\n")

    replayer = Replayer(
        config,
        on_detection=on_json if fmt == "json" else None,
        on_problem=on_problem,
        use_code_settings=use_code_settings,
        keep=0 if fmt == "json" else MAX_ROWS,
    )
    total_calls = total_runs = total_detections = killed = problems = 0
    not_traces: list[str] = []
    by_layer: dict[str, int] = {}
    by_action: dict[str, int] = {}
    traces = list(zip(files, sizes, strict=True))
    if merge:  # one stream: every worker's trace of a shared run, ordered by time
        traces = [(f"{len(files)} traces merged", sum(sizes))]
    processes = _processes(jobs, len(traces), sum(sizes))
    if processes > 1:
        summaries = replay_files([replayer], [path for path, _ in traces], processes)
    for i, (path, size) in enumerate(traces, start=1):
        if bar is not None:
            bar.start(i)
            bar.update(0, force=True)
        try:
            if processes > 1:
                [summary] = next(summaries)
            elif merge:
                summary = replayer.replay_merged(files, path)
            else:
                summary = replayer.replay_file(path, progress=bar.update if bar else None)
        except BrokenPipeError:
            raise  # our reader left (``| head``), not the trace: main() ends quietly
        except (OSError, WorkerLost) as exc:
            return _unreplayable(path, exc, err)
        if bar is not None:
            bar.finish_trace(size)
        for name in files if merge else [path]:  # a merged replay's problems name their file
            extra = problems_shown.get(name, 0) - MAX_PROBLEMS
            if extra > 0:
                print(f"fuze replay: ... and {extra} more problem lines in {printable(name)}",
                      file=err)
        if not _is_trace("fuze replay", summary, err):
            not_traces.append(path)
        total_calls += summary.calls
        total_runs += summary.runs
        total_detections += summary.detected
        killed += summary.killed_runs
        problems += summary.problem_count
        for key, n in summary.by_layer.items():
            by_layer[key] = by_layer.get(key, 0) + n
        for key, n in summary.by_action.items():
            by_action[key] = by_action.get(key, 0) + n
        if fmt == "text":
            if bar is not None:
                err.write("\r" + " " * 79 + "\r")
            _print_trace(out, summary)
    if bar is not None:
        bar.close()
    out.flush()
    if fmt == "text":
        print(f"\nReplayed {len(files)} trace{_s(len(files))}: {total_calls:,} call{_s(total_calls)} in "
              f"{total_runs:,} run{_s(total_runs)}, under {config.described}.", file=out)
        if total_detections:
            layers = ", ".join(f"{k} {v}" for k, v in sorted(by_layer.items(), key=lambda kv: -kv[1]))
            actions = ", ".join(f"{k} {v}" for k, v in sorted(by_action.items(), key=lambda kv: -kv[1]))
            print(f"{total_detections:,} detection{_s(total_detections)} (by layer: {layers}; "
                  f"by action: {actions}); {killed} run{_s(killed)} killed.", file=out)
            print("(count: what the layer counted, such as identical calls or laps of a cycle, "
                  "over the threshold it counts against; limit: a budget's value.)", file=out)
        else:
            print("Nothing would have fired.", file=out)
        if problems:
            print(f"{problems} line{_s(problems)} could not be replayed as written (see stderr).",
                  file=out)
    if not_traces:
        return EXIT_USAGE
    if fail_on_detect and total_detections:
        return EXIT_DETECTED
    return EXIT_OK


def _print_trace(out: TextIO, summary: TraceSummary) -> None:
    found: list[ReplayedDetection] = summary.detections
    total = summary.detected
    head = (f"{printable(summary.trace)}: {summary.calls:,} call{_s(summary.calls)}, "
            f"{summary.runs} run{_s(summary.runs)}, {total:,} detection{_s(total)}")
    print(head, file=out)
    if found:
        rows = []
        for item in found[:MAX_ROWS]:
            d = item.detection
            count = "" if d.count is None else str(d.count)
            if d.threshold is not None:
                count += f"/{d.threshold:g}" if count else f"limit {d.threshold:g}"
            message = d.message if len(d.message) <= 70 else d.message[:69] + "…"
            rows.append((str(item.call), printable(d.fn), printable(d.layer), d.action, count,
                         printable(message)))
        widths = [max(len(r[i]) for r in [("call", "fn", "layer", "action", "count", ""), *rows])
                  for i in range(5)]
        header = ("call", "fn", "layer", "action", "count")
        print("  " + "  ".join(h.ljust(w) if i else h.rjust(w) for i, (h, w) in
                               enumerate(zip(header, widths, strict=True))) + "  message", file=out)
        for r in rows:
            cells = [r[0].rjust(widths[0])] + [r[i].ljust(widths[i]) for i in range(1, 5)]
            print("  " + "  ".join(cells) + "  " + r[5], file=out)
        if total > len(rows):
            print(f"  ... and {total - len(rows):,} more (--format json lists them all)",
                  file=out)
    for kill in summary.kills:
        run = f" (run {printable(kill.run)})" if summary.runs > 1 and kill.run else ""
        print(f"  run killed at call {kill.call}{run} by {printable(kill.detection.layer)}", file=out)
    if summary.not_evaluated:
        print(f"  {summary.not_evaluated:,} later call{_s(summary.not_evaluated)} not evaluated "
              "(their run was already killed)", file=out)
