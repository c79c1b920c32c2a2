"""Replay of many traces across processes, reported as one process reports them (``fuze replay -j``).

Every trace is an independent run, so traces are split across worker processes, each replaying
whole traces with its own ``Replayer`` made like the caller's (same config, same options). What a
trace's replay reports as it goes (detections, problems) is collected in the worker and handed,
with the trace's summary, to the caller's callbacks in the parent, trace after trace in the order
given: the output is the one a single process gives, line for line.

Workers are forked from the calling process when it runs no other thread (the ``fuze`` command
does not): they start at once, with the package already imported. A process that runs threads
(a fork copies a lock another thread may hold) starts them with ``forkserver`` (``spawn`` where
there is none), and nothing of its state is copied into them but the replayers' settings. Either
way they read nothing but the trace files, as data, and write nothing: what they find comes back
to the parent. Standard input (``-``) is the parent's own: a trace read from it is replayed in the
parent, in its turn.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replayed import Problem, ReplayedDetection, TraceSummary


class WorkerLost(RuntimeError):
    """A replay process ended unexpectedly (killed, out of memory): the traces it and the other
    workers held are lost with the pool. Raised from the pool's ``BrokenProcessPool``, so that
    a caller can catch it without importing ``concurrent.futures`` for a replay in one process."""


def default_jobs() -> int:
    """The processes ``fuze replay`` uses by default: one per core it may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class _Spec:
    """What a worker needs to make a replayer like the caller's (its callbacks stay behind)."""

    config: Config
    use_code_settings: bool
    keep: int | None
    max_line: int
    detections: bool
    problems: bool


@dataclass(frozen=True, slots=True)
class _Replayed:
    """One trace replayed by one replayer in a worker: its summary, or the error that stopped it
    being read, and what it reported on the way, in order."""

    summary: TraceSummary | None
    error: OSError | None
    reported: list[ReplayedDetection | Problem]


def _spec(replayer: Replayer) -> _Spec:
    if replayer.on_run is not None or replayer.on_line is not None:
        raise ValueError("a replay across processes cannot hand its runs to on_run or on_line; "
                         "use jobs=1")
    return _Spec(replayer.config, replayer.use_code_settings, replayer.keep, replayer.max_line,
                 replayer.on_detection is not None, replayer.on_problem is not None)


# The worker's replayers (one per spec, made once: their plans serve every trace it replays) and
# what they report while the current trace replays.
_replayers: list[Replayer] = []
_reported: list[ReplayedDetection | Problem] = []


def _start_worker(specs: Sequence[_Spec]) -> None:
    keep = _reported.append
    _replayers[:] = [
        Replayer(s.config, use_code_settings=s.use_code_settings, keep=s.keep, max_line=s.max_line,
                 on_detection=keep if s.detections else None,
                 on_problem=keep if s.problems else None)
        for s in specs
    ]


def _replay_in_worker(path: str) -> list[_Replayed]:
    out = []
    for replayer in _replayers:
        _reported.clear()
        try:
            summary, error = replayer.replay_file(path), None
        except OSError as exc:
            summary, error = None, exc
        out.append(_Replayed(summary, error, list(_reported)))
        if error is not None:
            break  # the caller stops at a trace it cannot read
    _reported.clear()
    return out


def _handed_over(replayer: Replayer, replayed: _Replayed) -> TraceSummary:
    """Pass what a worker collected to ``replayer``'s callbacks; the summary, or the error."""
    for item in replayed.reported:
        if type(item) is Problem:
            if replayer.on_problem is not None:
                replayer.on_problem(item)
        elif replayer.on_detection is not None:
            replayer.on_detection(item)  # type: ignore[arg-type]
    if replayed.error is not None:
        raise replayed.error
    assert replayed.summary is not None
    return replayed.summary


def _context() -> Any:
    # Deferred for start-up time: only a replay spread over processes needs it.
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")  # it flushes the standard streams first
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__])
        return context
    return multiprocessing.get_context("spawn")


def replay_files(
    replayers: Sequence[Replayer], paths: Sequence[str], jobs: int
) -> Iterator[list[TraceSummary]]:
    """Replay each trace in ``paths`` with each of ``replayers``, in ``jobs`` processes: yields,
    trace after trace in order, the summaries, after passing what each replay reported to the
    replayer's ``on_detection`` and ``on_problem`` as ``replay_file`` would have.

    An ``OSError`` reading a trace is raised when its turn comes, after everything before it was
    handed over (as ``replay_file`` raises it); a worker process that dies raises
    ``WorkerLost``. ``jobs=1``, or a single trace, replays in this process; ``-`` (standard
    input) is always read here."""
    jobs = min(jobs, sum(1 for p in paths if p != "-"))
    if jobs <= 1:
        for path in paths:
            yield [replayer.replay_file(path) for replayer in replayers]
        return
    # Imported here: a replay in one process (the most common) need not load multiprocessing.
    from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

    specs = [_spec(replayer) for replayer in replayers]
    pool = ProcessPoolExecutor(jobs, mp_context=_context(), initializer=_start_worker,
                               initargs=(specs,))
    try:
        files = [p for p in paths if p != "-"]
        # Traces go out in chunks (about 16 per worker in all): fewer hand-offs between processes,
        # and little left for one worker to finish alone at the end.
        results = pool.map(_replay_in_worker, files, chunksize=max(1, len(files) // (16 * jobs)))
        for path in paths:
            if path == "-":
                yield [replayer.replay_file(path) for replayer in replayers]
                continue
            try:
                replayed = next(results)
            except BrokenExecutor as exc:
                raise WorkerLost(str(exc)) from exc
            yield [_handed_over(r, one) for r, one in zip(replayers, replayed, strict=False)]
    finally:
        # Left early (a trace that cannot be read, a reader gone): what is queued is dropped.
        pool.shutdown(wait=False, cancel_futures=True)
