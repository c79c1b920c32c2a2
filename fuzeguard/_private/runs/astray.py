"""Why a guarded call went to the implicit run when the program meant it for another one.

A call made outside every ``with`` block of a run goes to the process-wide implicit run. Two
mistakes send it there, and each is logged once, naming the run, the cause and the fix:

- a run that was created (``fuzeguard.run("x")`` without ``with``) or resumed after its ``with``
  block had ended (``run.resume()``), and not entered since: ``fuzeguard.run_not_entered``;
- a run open in another thread (work handed to a ``ThreadPoolExecutor`` does not inherit the
  context that holds the current run) or in another context of this thread (an asyncio task
  started before the run was entered): ``fuzeguard.call_outside_run``.

While there is nothing to say, a call to the implicit run pays two truth tests for this
(``implicit.implicit_run`` reads ``_awaited`` and ``_open`` itself: no function call).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from fuzeguard._private.publish.log import emit

if TYPE_CHECKING:
    from fuzeguard._private.protocols import RunInternals

# The latest run created or resumed and not entered since, and which of the two.
_awaited: tuple[weakref.ref[RunInternals], str] | None = None
# The runs inside a ``with`` block now, not yet named in a warning: by id, with the thread that
# entered each.
_open: dict[int, tuple[weakref.ref[RunInternals], int]] = {}
# The threads whose calls outside any run were explained already.
_told: set[int] = set()


def awaiting(run: RunInternals, why: str) -> None:
    """``run`` was created (``why`` = ``"created"``) or resumed (``"resumed"``) and is not
    entered: calls are expected in it."""
    global _awaited
    _awaited = (weakref.ref(run), why)


def settled(run: RunInternals) -> None:
    """``run`` is no longer awaited: it was entered, or made to decorate a function."""
    global _awaited
    awaited = _awaited
    if awaited is not None and awaited[0]() is run:
        _awaited = None


def entered(run: RunInternals) -> None:
    """The first ``with`` block inside ``run`` began."""
    settled(run)
    _open[id(run)] = (weakref.ref(run), threading.get_ident())


def left(run: RunInternals) -> None:
    """The last ``with`` block inside ``run`` ended."""
    _open.pop(id(run), None)


def forget() -> None:
    """Nothing awaited, nothing open (``testing.reset_implicit_run``)."""
    global _awaited
    _awaited = None
    _open.clear()
    _told.clear()


def explain() -> None:
    """Log why the call being made went to the implicit run, once per run it was likely meant
    for."""
    global _awaited
    awaited, _awaited = _awaited, None
    if awaited is not None:
        run = awaited[0]()
        if run is not None and run._entered == 0:
            _not_entered(run, awaited[1])
    if _open:
        found = [(ref(), thread) for ref, thread in list(_open.values())]
        _open.clear()  # each open run is named once
        runs = [(run, thread) for run, thread in found if run is not None]
        here = threading.get_ident()
        if runs and here not in _told:  # and each thread told once: a pool's threads live on
            _told.add(here)
            _outside(runs)


def _label(run: RunInternals) -> str:
    return f'"{run.name}"' if run.name else run.id


def _not_entered(run: RunInternals, why: str) -> None:
    label = _label(run)
    if why == "resumed":
        cause = (f"run {label} was resumed after its `with` block ended, and no `with` block is "
                 "inside it: this guarded call went to the process-wide implicit run, not to it")
        fix = "enter it again around the calls that follow the resume: `with run:` (a run can be " \
              "entered again)"
    else:
        name = repr(run.name) if run.name else ""
        cause = (f"run {label} was created (fuzeguard.run({name})) but never entered: this "
                 "guarded call went to the process-wide implicit run, not to it")
        fix = (f"open it with `with fuzeguard.run({name}) as run:` (or `async with`) around the "
               f"task's calls, or decorate the task's function with @fuzeguard.run({name})")
    emit("warning", "fuzeguard.run_not_entered", run_id=run.id, run_name=run.name,
         message=f"{cause}. Fix: {fix}")


def _outside(runs: list[tuple[RunInternals, int]]) -> None:
    here = threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    where = []
    for run, thread in runs[:3]:
        place = ("in this thread, but not in this call's context (an asyncio task or a "
                 "copied context made before the run was entered)" if thread == here
                 else f"in thread {names.get(thread, thread)!r}")
        where.append(f"run {_label(run)} is open {place}")
    more = f" (and {len(runs) - 3} more)" if len(runs) > 3 else ""
    if any(thread != here for _, thread in runs):
        fix = ("work handed to another thread does not inherit it. Fix: hand the work over "
               "inside the run, executor.submit(run.bind(tool), ...), or give the pool the run: "
               "ThreadPoolExecutor(initializer=run.attach)")
    else:
        fix = ("a context made before the run was entered does not see it. Fix: enter the run "
               "in the task that makes the calls, or wrap the work with run.bind(fn)")
    current = threading.current_thread().name
    emit("warning", "fuzeguard.call_outside_run",
         run_id=runs[0][0].id, run_name=runs[0][0].name, thread=current,
         message=f"a guarded call in thread {current!r} went to the process-wide implicit run "
         f"while {'; '.join(where)}{more}: the current run is kept in a context variable, and "
         + fix)
