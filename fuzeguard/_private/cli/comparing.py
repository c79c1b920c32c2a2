"""``fuze replay --compare A B``: what each of two configs does to each trace, side by side."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from fuzeguard._private.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    _configs_and_traces,
    _processes,
    _s,
    _text_size,
    _unreplayable,
)
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replay_pool import WorkerLost, replay_files
from fuzeguard._private.reports.replayed import Problem, TraceSummary


def _outcome(summary: TraceSummary) -> str:
    """What one config does to one trace, in a few words."""
    if summary.kills:
        first = summary.kills[0]
        d = first.detection
        text = (f"killed at call {first.call} by {d.layer}" if summary.runs == 1 else
                f"{summary.killed_runs} of {summary.runs} runs killed (first at call {first.call} "
                f"by {d.layer})")
    elif summary.detected:
        text = "not killed"
    else:
        return "nothing fires"
    actions = ", ".join(f"{summary.by_action[a]} {a}" for a in ("warn", "skip", "ask", "observe")
                        if summary.by_action.get(a))
    return f"{text}; {actions}" if actions else text


def _difference(a: TraceSummary, b: TraceSummary) -> str:
    """How B's outcome differs from A's, in a few words."""
    ka, kb = a.kills, b.kills
    if ka and kb:
        ca, cb = ka[0].call, kb[0].call
        if cb < ca:
            return f"B stops it {ca - cb} call{_s(ca - cb)} earlier"
        if cb > ca:
            return f"B stops it {cb - ca} call{_s(cb - ca)} later"
        if ka[0].detection.layer != kb[0].detection.layer:
            return "same call, another layer"
        if a.killed_runs != b.killed_runs:
            return f"B kills {b.killed_runs} runs, A {a.killed_runs}"
    elif ka:
        return "only A stops it"
    elif kb:
        return "only B stops it"
    if a.detected != b.detected:
        more = b.detected - a.detected
        return (f"B: {abs(more)} detection{_s(abs(more))} {'more' if more > 0 else 'fewer'}")
    return "same"


def compare(
    paths: Sequence[str],
    config_a: str,
    config_b: str,
    *,
    env: str | None = None,
    fmt: str = "text",
    use_code_settings: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
    jobs: int | None = None,
) -> int:
    """``fuze replay --compare A B``: each trace under both configs, side by side (in ``jobs``
    processes, as ``replay``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    loaded = _configs_and_traces("fuze replay", [config_a, config_b], env, paths, err,
                                 stdin=False)
    if loaded is None:
        return EXIT_USAGE
    configs, files = loaded

    def on_problem(problem: Problem) -> None:
        print(f"fuze replay: {problem}", file=err)

    # Each problem once (from A's replay): both replays read the same lines.
    replayers = [Replayer(c, on_problem=on_problem if i == 0 else None,
                          use_code_settings=use_code_settings, keep=0)
                 for i, c in enumerate(configs)]
    rows: list[tuple[str, str, str, str]] = []
    size = sum(_text_size(p) if os.path.isfile(p) else 0 for p in files)
    replayed = replay_files(replayers, files, _processes(jobs, len(files), 2 * size))
    for path in files:
        try:
            a, b = next(replayed)
        except BrokenPipeError:
            raise
        except (OSError, WorkerLost) as exc:
            return _unreplayable(path, exc, err)
        if fmt == "json":
            out.write(json.dumps({"trace": path, "a": _as_json(a), "b": _as_json(b),
                                  "difference": _difference(a, b)}, ensure_ascii=False) + "\n")
        rows.append((path, _outcome(a), _outcome(b), _difference(a, b)))
    if fmt == "text":
        print(f"A: {config_a}\nB: {config_b}\n", file=out)
        header = ("trace", "A", "B", "difference")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        print("  ".join(h.ljust(w) for h, w in zip(header, [*widths, 0], strict=True)).rstrip(),
              file=out)
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, [*widths, 0], strict=True)).rstrip(),
                  file=out)
        changed = sum(1 for r in rows if r[3] != "same")
        print(f"\n{changed} of {len(rows)} trace{_s(len(rows))} differ.", file=out)
    return EXIT_OK


def _as_json(summary: TraceSummary) -> dict[str, Any]:
    kill = summary.kills[0] if summary.kills else None
    return {
        "calls": summary.calls,
        "runs": summary.runs,
        "detections": summary.detected,
        "by_action": dict(summary.by_action),
        "killed": summary.killed_runs,
        "first_kill": None if kill is None else {"call": kill.call, "layer": kill.detection.layer},
    }
