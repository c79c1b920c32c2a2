"""Which run a framework's tool calls are judged in: one run per agent invocation by default.

Every integration follows the same rules, so that a server that only adds the integration keeps
its concurrent requests apart:

- **A run the user opened wins.** If a ``fuzeguard.run()`` is current when the invocation starts
  (``with fuzeguard.run(ticket):`` around ``agent.invoke``), the invocation's calls are judged in
  it and nothing is opened.
- **Otherwise one invocation is one run.** An agent ``invoke`` / ``Runner.run`` / ``agent.run`` /
  ``kickoff`` opens a run of its own (named after the agent, never shared through a store) when it
  starts and closes it when it ends. Concurrent requests never count against each other, and a
  kill ends the request that looped, not the process's next request.
- **Nested invocations are child runs.** An invocation started while another one is under way in
  the same context (a subagent, an agent used as a tool) gets ``fuzeguard.run(parent=outer)``: its
  own loops are its own, its calls and cost also count toward the outer run's budgets.
- **A conversation is one run when the application says so.** ``KeyedRuns`` keeps a run per key
  (a thread or conversation id): ``with conversations.run_for(thread_id): agent.invoke(...)`` makes
  every invocation of that conversation one run (the user's run wins, above).

``invocation(name)`` applies the rules where the framework lets the integration wrap the
invocation (a context manager: enter it where the invocation starts, in the context its tools run
in). ``InvocationRuns`` applies them where the integration only sees the invocation through an
object the framework hands to each hook (the invocation's state, its context wrapper): the run is
kept for that object while it lives. ``LoopDetected.stats`` of a kill is the stats of the run that
was killed (``Outcome.error()`` in ``_calls.py``).
"""

from __future__ import annotations

import contextvars
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.implicit import ImplicitRun
from fuzeguard._private.runs.run import Run, _current, make_current, restore_current

MAX_KEYED_RUNS = 1024  # runs kept by KeyedRuns for the most recently used keys

# The run the innermost invocation under way in this context opened (None: no invocation, or the
# invocation uses the user's run). A run current on top of it that is not this one is the user's.
_opened: contextvars.ContextVar[Run | None] = contextvars.ContextVar(
    "fuzeguard_invocation", default=None
)


def user_run() -> Run | None:
    """The run the user opened that is current here, or None (no run open, or only runs an
    invocation opened)."""
    stack = _current.get()
    if not stack:
        return None
    top = stack[-1]
    return None if top is _opened.get() else top


def invocation_run() -> Run | None:
    """The run the innermost invocation under way here opened, when it is current (None when
    the calls are judged in a run the user opened): the run whose model turns the integration
    marks with ``run.end_turn()``."""
    stack = _current.get()
    opened = _opened.get()
    return opened if stack and stack[-1] is opened else None


def open_run() -> Run | None:
    """The run current here (the user's or an invocation's), or None when no run is open."""
    stack = _current.get()
    return stack[-1] if stack else None


def new_run(name: str) -> Run:
    """The run an invocation starting here is judged in when the user opened none: a child of the
    invocation under way in this context, else a run of its own (never shared through a store)."""
    outer = _opened.get()
    stack = _current.get()
    if outer is not None and stack and stack[-1] is outer:
        return Run(name, store=None, parent=outer)
    return Run(name, store=None)


@contextmanager
def invocation(name: str) -> Iterator[Run]:
    """Judge the calls made inside in the invocation's run (see the module docstring): the user's
    run if one is current, else a new run (a child of an enclosing invocation's run), current
    inside and closed at the end."""
    mine = user_run()
    if mine is not None:
        yield mine
        return
    run = new_run(name)
    try:
        with within(run):
            yield run
    finally:
        run.close()


@contextmanager
def within(run: Run) -> Iterator[Run]:
    """Make ``run`` (one ``InvocationRuns`` or ``KeyedRuns`` keeps) current inside, as the run of
    an invocation: an invocation started inside is its child. Leaving does not close it."""
    opened = _opened.set(run)
    token = make_current(run)
    try:
        yield run
    finally:
        restore_current(token)
        _opened.reset(opened)


def adopt(run: Run) -> None:
    """Make ``run`` current, as an invocation's run, for the rest of this context: for a framework
    that runs each tool call in a task of its own started after the integration's hook (what the
    tool does, and an agent it runs, is then inside the run). Never undone: the task ends."""
    _opened.set(run)
    make_current(run)


class InvocationRuns:
    """The run of each invocation, kept for an object the framework hands to every hook of one
    invocation (``owner``: its context wrapper or usage object) while that object lives.

    ``run_for(owner, name)``: the user's run if one is current here; else the run kept for
    ``owner``, opened on its first call by ``new_run`` (so a child of the invocation under way
    here, if any). Owners are told apart by identity (they need not be hashable). A run is closed
    when its owner is garbage-collected or ``end(owner)`` is called; an owner that cannot be
    weakly referenced keeps its run until ``end`` or until ``MAX_KEYED_RUNS`` newer ones push it
    out.
    """

    def __init__(self) -> None:
        self._runs: OrderedDict[int, tuple[Any, Run]] = OrderedDict()
        self._lock = new_lock()

    def run_for(self, owner: Any, name: str) -> Run:
        mine = user_run()
        return mine if mine is not None else self.kept(owner, name)

    def kept(self, owner: Any, name: str | None = None) -> Run:
        """The run kept for ``owner`` (opened now if ``name`` is given and it has none)."""
        key = id(owner)
        with self._lock:
            entry = self._runs.get(key)
            if entry is not None and _alive(entry[0]) is owner:
                return entry[1]
        run = new_run(name or "agent")
        try:
            ref: Any = weakref.ref(owner)
            weakref.finalize(owner, self._forget, key, run)
        except TypeError:
            ref = owner  # held strongly: bounded below
        with self._lock:
            entry = self._runs.get(key)
            if entry is not None and _alive(entry[0]) is owner:
                return entry[1]  # another thread got there first
            self._runs[key] = (ref, run)
            while len(self._runs) > MAX_KEYED_RUNS:
                self._runs.popitem(last=False)[1][1].close()
        return run

    def find(self, owner: Any) -> Run | None:
        """The run kept for ``owner``, or None."""
        entry = self._runs.get(id(owner))
        return entry[1] if entry is not None and _alive(entry[0]) is owner else None

    def _forget(self, key: int, run: Run) -> None:
        with self._lock:
            entry = self._runs.get(key)
            if entry is not None and entry[1] is run:
                del self._runs[key]
        run.close()

    def end(self, owner: Any) -> None:
        """The invocation of ``owner`` is over: close its run and forget it."""
        with self._lock:
            entry = self._runs.get(id(owner))
            if entry is None or _alive(entry[0]) is not owner:
                return
            del self._runs[id(owner)]
        entry[1].close()


def _alive(ref: Any) -> Any:
    return ref() if isinstance(ref, weakref.ref) else ref


class KeyedRuns:
    """A run per key, for conversations of several invocations (and MCP sessions).

    ``runs = KeyedRuns("support-chat")``; ``with runs.run_for(thread_id): agent.invoke(...)``: every
    invocation with the same key is judged in one run, which stays open between invocations (a
    kill stays with that conversation). The runs of the ``MAX_KEYED_RUNS`` most recently used keys
    are kept; an older one is closed and a later call with its key starts afresh.
    """

    def __init__(self, name: str = "conversation", *, limit: int = MAX_KEYED_RUNS) -> None:
        if limit < 1:
            raise ValueError(f"KeyedRuns(limit=...) must be at least 1, got {limit!r}")
        self.name = name
        self.limit = limit
        self._runs: OrderedDict[Hashable, Run] = OrderedDict()
        self._lock = new_lock()

    def get(self, key: Hashable) -> Run:
        """The run of ``key`` (opened on first use; never shared through a store)."""
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = Run(self.name, store=None)
                while len(self._runs) > self.limit:
                    self._runs.popitem(last=False)[1].close()
            else:
                self._runs.move_to_end(key)
            return run

    def restart(self, key: Hashable) -> None:
        """After a kill of the run of ``key``, a key that may stand for several users (a
        connection a proxy shares): its next run refuses the call that was killed (the same
        function with the same arguments) and judges every other call afresh (``ImplicitRun``)."""
        with self._lock:
            run = self._runs.get(key)
            if run is not None and run.killed is not None:
                self._runs[key] = ImplicitRun(run, name=self.name)
                run.close()

    def run_for(self, key: Hashable) -> Any:
        """A context manager making the run of ``key`` current inside (leaving does not close it;
        invocations started inside use it, as a run the user opened)."""
        return _current_run(self.get(key))

    def __len__(self) -> int:
        return len(self._runs)


@contextmanager
def _current_run(run: Run) -> Iterator[Run]:
    token = make_current(run)
    try:
        yield run
    finally:
        restore_current(token)
