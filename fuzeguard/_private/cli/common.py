"""What the ``fuze`` commands share: exit statuses, the trace files they read, how many processes
replay them, and what they say about a file that is not a trace."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, TextIO

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.reports.replay_pool import WorkerLost, default_jobs
from fuzeguard._private.reports.replayed import TraceSummary
from fuzeguard._private.reports.terminal import CONTROLS, printable
from fuzeguard._private.reports.trace_reading import GZIP_MAGIC, trace_files
from fuzeguard._private.runs.exceptions import ConfigError

EXIT_OK = 0
EXIT_DETECTED = 1
EXIT_USAGE = 2

# By default, traces of fewer characters than this in all are replayed in this process: their
# replay takes under a second, and starting and feeding worker processes would take most of what
# they save (forked workers start in tens of milliseconds).
PARALLEL_BYTES = 2 * 1024 * 1024

def _json_line(value: Any) -> str:
    """One JSON object as a line that shows as it is: control characters JSON leaves raw (C1,
    the bidirectional overrides) written as ``\\u`` escapes."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)

def _text_size(path: str) -> int:
    """How many characters replaying ``path`` reads, about: its size, or for a gzip trace the
    uncompressed size its trailer records (modulo 4 GiB), which the progress bar counts in."""
    size = os.path.getsize(path)
    if size < 18:
        return size
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return size
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little") or size
    except OSError:
        return size

def _is_trace(command: str, summary: TraceSummary, err: TextIO) -> bool:
    """Whether what was replayed is a trace: lines and none of them a call is not (said on
    ``err``); an empty file is one, with a warning."""
    path = printable(summary.trace)
    if summary.calls and not summary.call_lines:
        print(f"{command}: {path} is not a trace: none of its {summary.calls:,} "
              f"line{_s(summary.calls)} is a call (a JSON object with \"fn\", one per "
              "line, as fuzeguard records them)", file=err)
        return False
    if not summary.calls:
        print(f"{command}: warning: {path} holds no calls", file=err)
    return True

def _unreplayable(path: str, exc: Exception, err: TextIO) -> int:
    """Say why the replay stopped at ``path`` (it cannot be read, or a replay process died);
    the exit status."""
    if isinstance(exc, WorkerLost):
        # Every trace still in the workers' hands is lost with the pool: which one the process
        # that died was replaying is not known here.
        print(f"fuze replay: a replay process ended unexpectedly (out of memory? killed?) before "
              f"{printable(path)} was reported; nothing from it on is reported. Replay the traces "
              "from it on with -j 1 to see which one and why", file=err)
    else:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"fuze replay: cannot read {printable(path)}: {why}", file=err)
    return EXIT_USAGE

def _processes(jobs: int | None, traces: int, size: int) -> int:
    """How many processes replay ``traces`` traces of ``size`` characters in all: ``jobs``, or
    by default one per core when the traces are large enough to repay starting them."""
    if jobs is None:
        jobs = default_jobs() if size >= PARALLEL_BYTES else 1
    return max(1, min(jobs, traces))

def _s(n: int) -> str:
    return "" if n == 1 else "s"

def _config(command: str, path: str | None, env: str | None, err: TextIO) -> Config | None:
    """The config at ``path`` (None: the discovered one) under ``env``, or None once what is wrong
    with it is printed."""
    try:
        return Config.load(path, env=env)
    except ConfigError as exc:
        print(f"{command}: {exc}", file=err)
        return None


def _configs_and_traces(
    command: str, config_paths: Sequence[str | None], env: str | None, paths: Sequence[str],
    err: TextIO, *, stdin: bool,
) -> tuple[list[Config], list[str]] | None:
    """The configs and trace files a command works on, or None once what is wrong is printed."""
    configs = []
    for path in config_paths:
        config = _config(command, path, env, err)
        if config is None:
            return None
        configs.append(config)
    files = list(trace_files(paths))
    bad = False
    for p in files:
        if p == "-" and not stdin:
            print(f"{command}: --compare reads each trace twice: give files, not -", file=err)
            bad = True
        elif p != "-" and (not os.path.exists(p) or os.path.isdir(p)):
            print(f"{command}: no such trace file: {p}", file=err)
            bad = True
    if not files:
        print(f"{command}: no .jsonl traces found in " + ", ".join(paths), file=err)
        bad = True
    return None if bad else (configs, files)
