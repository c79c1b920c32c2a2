"""The run a call belongs to: the innermost run entered in its context, or else the process-wide
implicit run that calls made outside any ``fuzeguard.run()`` go to.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.records import Call, Decision, Detection
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs import astray
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.run import Run, _current

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan

_implicit: Run | None = None
_implicit_lock = new_lock()


def current_run() -> Run:
    """The run the current context belongs to, or the implicit process-wide run if none is open."""
    stack = _current.get()
    return stack[-1] if stack else implicit_run()


def implicit_run() -> Run:
    """The process-wide run that calls made outside any ``fuzeguard.run()`` go to.

    A kill ends the implicit run like any other, but it does not stay dead: the next call made
    outside any run starts a fresh implicit run (logged as ``fuzeguard.implicit_run_restarted``),
    so that one bad request cannot disable a long-lived process that opens no runs. The kill
    sticks for what looped: in every later implicit run, a call of the function with the
    arguments of the call that was killed is refused at once (``ImplicitRun``).
    """
    global _implicit
    if astray._awaited is not None or astray._open:  # a run this call may have missed
        astray.explain()
    run = _implicit
    if run is not None and run._killed is None:
        return run
    with _implicit_lock:
        run = _implicit
        if run is None:
            run = _implicit = ImplicitRun()
            emit(
                "info", "fuzeguard.implicit_run",
                message="a guarded call was made outside fuzeguard.run(): it counts against the "
                "process-wide implicit run; open one run per task or request to keep them apart",
            )
        elif run._killed is not None:
            killed = run._killed
            run.close()
            run = _implicit = ImplicitRun(run)
            emit(
                "warning", "fuzeguard.implicit_run_restarted",
                previous_run_id=killed.run_id, run_id=run.id, layer=killed.layer, fn=killed.fn,
                message="the implicit run was killed by a detection; calls made outside "
                "fuzeguard.run() now go to a fresh implicit run, which refuses the call that "
                "was killed if it comes again. Open one run per task or request so that a kill "
                "stays with the task that looped",
            )
    return run


def _reset_implicit_run() -> None:
    global _implicit
    astray.forget()
    with _implicit_lock:
        if _implicit is not None:
            _implicit.close()
        _implicit = None


class ImplicitRun(Run):
    """The process-wide run of calls made outside any ``fuzeguard.run()`` (and the run of a
    session an integration could only guess, ``KeyedRuns.restart``).

    A loop killed in one implicit run stays stopped in the next: each kill of a loop (not of a
    budget) remembers the function and argument fingerprint of the call it refused, and every
    later implicit run refuses a call with both at once, with the detection that killed it
    (the run itself goes on), for ``STUCK_TTL`` seconds after the kill. Before, a caller that
    caught ``LoopDetected`` and went on called the tool again and again: 30 identical calls ran
    it 23 times. The calls of a long-lived server come from many users: after ``STUCK_TTL`` the
    pattern is judged afresh (a loop that goes on is caught again at its next repeats), so
    that one user's loop does not refuse that call to every other user for the process's life.
    """

    # Patterns kept: a long-lived process killed for ever new loops forgets the oldest first.
    MAX_STUCK = 1024
    # Seconds a killed pattern stays refused.
    STUCK_TTL = 600.0
    # (function name, argument fingerprint) of each call a killed implicit run refused, with
    # the detection and the monotonic time at which it is forgotten.
    _stuck: dict[tuple[str, bytes], tuple[Detection, float]]
    _kill_pattern: tuple[str, bytes] | None

    def __init__(self, previous: Run | None = None, name: str = "implicit") -> None:
        super().__init__(name, store=None)
        stuck: dict[tuple[str, bytes], tuple[Detection, float]] = {}
        if previous is not None:
            now = time.monotonic()
            killed, pattern = previous._killed, None
            if isinstance(previous, ImplicitRun):
                stuck.update((k, v) for k, v in previous._stuck.items() if v[1] > now)
                pattern = previous._kill_pattern
            elif killed is not None and killed.kind == "loop" and previous._killed_fp:
                pattern = (killed.fn, previous._killed_fp)
            if pattern is not None and killed is not None:
                stuck[pattern] = (killed, now + self.STUCK_TTL)
            while len(stuck) > self.MAX_STUCK:
                del stuck[next(iter(stuck))]
        self._stuck = stuck
        self._kill_pattern = None

    def _judge(
        self, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        if self._stuck:
            found = self._stuck.get((plan.name, args_fp))
            if found is not None and found[1] <= time.monotonic():
                del self._stuck[(plan.name, args_fp)]
            elif found is not None:  # refused, not counted: the fresh run itself goes on
                call = Call(plan.name, self._attempts + 1, args_fp, arguments)
                return call, Decision("kill", call.index, found[0], ())
        call, decision = super()._judge(plan, args_fp, arguments, kind)
        if decision.action == "kill" and decision.detections and decision.detection is not None \
                and decision.detection.kind == "loop":
            self._kill_pattern = (call.fn, args_fp)
        return call, decision

