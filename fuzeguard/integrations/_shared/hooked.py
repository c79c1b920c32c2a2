"""Invocations that a framework begins in one hook and ends in another.

Some frameworks give the integration no scope to wrap around an agent invocation, only a hook when
it starts and one when it ends (an ADK runner's ``before_run`` / ``after_run``, Strands'
``BeforeInvocationEvent`` / ``AfterInvocationEvent``, Claude Code's ``UserPromptSubmit`` /
``Stop``), and hand every tool hook in between something that names the invocation (an id, the
invocation's state, the session). ``Invocations`` keeps, under that key, the run the start hook
picked by ``_runs``' rules (the user's run if one is current, else a run of its own, a child of
an invocation under way), current in the context the start hook ran in until the end hook closes
it, so that an agent invoked inside (an agent called as a tool) gets a child run; hooks that all
run in one context for many invocations start them with ``enter=False``. The tool hooks judge
each call in the run of its invocation, whatever context they run in, and keep a call that goes
ahead (or is skipped) under its call id for the hook that sees its result.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.run import Run, make_current, restore_current
from fuzeguard.integrations._shared.calls import Outcome, ToolCalls
from fuzeguard.integrations._shared.runs import _opened, new_run, user_run, within

MAX_OPEN = 4096  # invocations under way (or whose end hook never came), oldest forgotten beyond
_MAX_IN_FLIGHT = 1024  # calls of one invocation whose end never came (cancelled), oldest forgotten


class Invocation:
    """One invocation under way: its run, its calls that went ahead and have not ended, and,
    for an integration that records its model calls (``_model_calls``), the tools its last model
    call was offered and the detection of a model call that ends it."""

    __slots__ = ("_tokens", "ended", "in_flight", "offered", "owned", "parent", "run")

    def __init__(self, run: Run, owned: bool = False, enter: bool = True,
                 parent: Run | None = None) -> None:
        self.run = run
        self.owned = owned  # opened for this invocation: closed at its end
        self.parent = parent  # the run of the invocation the framework said this one is inside
        self._tokens: tuple[Any, Any] | None = None
        self.in_flight: OrderedDict[Hashable, Outcome] = OrderedDict()
        self.offered: frozenset[str] | None = None  # None: not known
        self.ended: Detection | None = None
        if owned and enter:  # current in this context until its end
            self._tokens = (_opened.set(run), make_current(run))

    def begin(self, calls: ToolCalls, name: str, arguments: Mapping[str, Any] | None,
              call_id: Hashable) -> Outcome:
        """Decide about a call in this invocation's run; one that goes ahead or is skipped is kept
        under ``call_id`` until ``end(call_id)``."""
        with within(self.run):
            outcome = calls.begin(name, arguments)
        if outcome.killed is None:
            self.in_flight[call_id] = outcome
            while len(self.in_flight) > _MAX_IN_FLIGHT:
                self.in_flight.popitem(last=False)
        return outcome

    def end(self, call_id: Hashable) -> Outcome | None:
        """The call ``begin`` kept under ``call_id`` (once), or None."""
        return self.in_flight.pop(call_id, None)

    def close(self) -> None:
        tokens, self._tokens = self._tokens, None
        self.in_flight.clear()
        if tokens is not None:
            try:
                restore_current(tokens[1])
                _opened.reset(tokens[0])
            except ValueError:  # ended in another context than it began in: nothing to undo
                pass
        if self.owned:
            self.run.close()


class Invocations:
    """The invocations under way, by the key the framework's hooks name them with."""

    def __init__(self) -> None:
        self._open: OrderedDict[Hashable, Invocation] = OrderedDict()
        self._lock = new_lock()

    def start(self, key: Hashable, name: str, *, enter: bool = True,
              parent: Run | None = None) -> Invocation:
        """An invocation begins here: the user's run if one is current, else a run of its own
        (``_runs.new_run``), current in this context (unless ``enter`` is false: hooks that all run
        in one context for many invocations) until ``end(key)`` closes it. With a ``parent``, the
        run is a child of it (an invocation the framework says is nested)."""
        mine = user_run()
        if mine is not None:
            found = Invocation(mine)
        else:
            run = new_run(name) if parent is None else Run(name, store=None, parent=parent)
            found = Invocation(run, owned=True, enter=enter, parent=parent)
        with self._lock:
            self._open[key] = found
            while len(self._open) > MAX_OPEN:
                self._open.popitem(last=False)[1].close()
        return found

    def find(self, key: Hashable) -> Invocation | None:
        """The invocation of ``key`` under way, or None."""
        return self._open.get(key)

    def get(self, key: Hashable) -> Invocation:
        """The invocation of ``key``; one whose start was never seen (an agent run without the
        framework's start hook) is judged in the run current here."""
        found = self._open.get(key)
        if found is None:
            with self._lock:
                found = self._open.setdefault(key, Invocation(current_run()))
                while len(self._open) > MAX_OPEN:
                    self._open.popitem(last=False)[1].close()
        return found

    def end(self, key: Hashable) -> None:
        """The invocation of ``key`` is over: leave its run and close it if it opened one."""
        with self._lock:
            found = self._open.pop(key, None)
        if found is not None:
            found.close()
