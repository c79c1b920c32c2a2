"""Guarding tool calls that a framework knows by name and argument mapping.

The integrations see a tool call as a name, a mapping of arguments and a way to run it; they never
touch the tool. ``ToolCalls`` gives each tool name its own ``Guard`` (the one ``guard()`` would
build, with the same options, ``[functions.NAME]`` settings and fingerprints), so a call decided
here is recorded, judged and traced exactly like a call of a guarded function.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard._private.guard import Guard, Pending, Skipped, guard
from fuzeguard._private.records import Detection

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import ToolOptions

T = TypeVar("T")
MAX_TOOLS = 1024  # guards kept per integration; the oldest tool name is forgotten beyond that


class Outcome:
    """What the guard decided about one call before it runs.

    Exactly one of the three holds: ``pending`` (run the tool, then ``done`` / ``fail``),
    ``skipped`` (answer with ``skipped.value``; the tool does not run) or ``killed`` (the run is
    over: end the agent; ``killed`` is the detection that ended it). A call the guard does not
    judge (guarding off, or fuzeguard failing open) is a ``pending`` of None.
    """

    __slots__ = ("killed", "pending", "skipped")

    def __init__(
        self,
        pending: Pending | None = None,
        skipped: Skipped | None = None,
        killed: Detection | None = None,
    ) -> None:
        self.pending = pending
        self.skipped = skipped
        self.killed = killed

    @property
    def runs(self) -> bool:
        return self.skipped is None and self.killed is None

    def done(self, result: Any) -> None:
        """Record the tool's result (what the model is shown of it)."""
        if self.pending is not None:
            self.pending.done(result)

    def fail(self, error: BaseException) -> None:
        if self.pending is not None:
            self.pending.fail(error)


class ToolCalls:
    """One guard per tool name, built with ``guard()``'s options (validated once, here)."""

    def __init__(self, **options: Unpack[ToolOptions]) -> None:
        self._decorate = guard(**options)  # validates the options now, with guard()'s messages
        self._guards: dict[str, Guard] = {}
        self._lock = threading.Lock()

    def guard_for(self, name: str) -> Guard:
        found = self._guards.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._guards.get(name)
            if found is None:

                def tool(**arguments: Any) -> Any:  # the shape of a call made with a mapping
                    raise AssertionError("never called: the framework runs the tool")

                tool.__name__ = tool.__qualname__ = name
                if len(self._guards) >= MAX_TOOLS:  # names come from the model: keep it bounded
                    del self._guards[next(iter(self._guards))]
                found = self._guards[name] = self._decorate(tool).guard  # type: ignore[attr-defined]
            return found

    def begin(self, name: str, arguments: Mapping[str, Any] | None) -> Outcome:
        """Decide about a call of tool ``name`` with ``arguments`` (a kill is returned, not raised).

        For frameworks that decide and complete a call in different hooks: the caller records
        the outcome with ``done`` / ``fail``.
        """
        try:
            started = self.guard_for(name).begin((), dict(arguments or {}))
        except LoopDetected as exc:
            return Outcome(killed=exc.detection)
        if isinstance(started, Skipped):
            return Outcome(skipped=started)
        return Outcome(pending=started)

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        execute: Callable[[], T],
        *,
        shown: Callable[[T], Any] = lambda result: result,
    ) -> tuple[Outcome, T | None]:
        """Decide, and run ``execute`` if the call goes ahead; ``shown(result)`` is recorded."""
        outcome = self.begin(name, arguments)
        if not outcome.runs:
            return outcome, None
        if outcome.pending is not None:
            outcome.pending.enter()  # add_cost() inside the tool counts for this call
        try:
            result = execute()
        except BaseException as exc:
            outcome.fail(exc)
            raise
        outcome.done(shown(result))
        return outcome, result

    async def acall(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        execute: Callable[[], Awaitable[T]],
        *,
        shown: Callable[[T], Any] = lambda result: result,
    ) -> tuple[Outcome, T | None]:
        """``call`` for a coroutine."""
        outcome = self.begin(name, arguments)
        if not outcome.runs:
            return outcome, None
        if outcome.pending is not None:
            outcome.pending.enter()  # add_cost() inside the tool counts for this call
        try:
            result = await execute()
        except BaseException as exc:
            outcome.fail(exc)
            raise
        outcome.done(shown(result))
        return outcome, result
