"""Guarding tool calls that a framework knows by name and argument mapping.

The integrations see a tool call as a name, a mapping of arguments and a way to run it; they never
touch the tool. ``ToolCalls`` gives each tool name its own ``Guard`` (the one ``guard()`` would
build, with the same options, ``[functions.NAME]`` settings and fingerprints), so a call decided
here is recorded, judged and traced exactly like a call of a guarded function.

What every integration shows for a decision, so that the frameworks read alike:

- a **skip** answers the call with ``outcome.skipped.value`` (the detection's message by default);
- a **warn** lets the call run and adds ``warning_note(detection)`` to what the model reads of the
  result (``with_notes``: appended to a text result), or sends it through the framework's own
  message channel where a result cannot carry it;
- the **notes the run keeps for the model** (``run.notes()``: ``warn_at`` budget warnings, the
  note given to ``resume()``) go the same way, with the next result of a call that ran in the
  run (``Outcome.notes``), each once;
- a **kill** ends the agent with a final answer the application can show: where the framework
  allows one more model call and ``wrap_up`` is on, the model's own answer to
  ``wrap_up_request`` (asked once, without tools), else ``final_answer`` (the canned text); it
  keeps ``outcome.error()``, the ``LoopDetected`` whose ``stats`` are those of the run that was
  killed, for callers who want the exception; a tool call the agent still sends to a killed run
  is answered with ``stop_message``.

Which run a call is judged in is ``_runs.py``'s: one run per agent invocation by default.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.guard import Guard, Pending, Skipped, guard
from fuzeguard._private.runs.loop_detected import LoopDetected

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

T = TypeVar("T")
MAX_TOOLS = 1024  # guards kept per integration; the oldest tool name is forgotten beyond that


class Outcome:
    """What the guard decided about one call before it runs.

    Exactly one of the three holds: ``pending`` (run the tool, then ``done`` / ``fail``),
    ``skipped`` (answer with ``skipped.value``; the tool does not run) or ``killed`` (the run is
    over: end the agent; ``killed`` is the detection that ended it). A call the guard does not
    judge (guarding off, or fuzeguard failing open) is a ``pending`` of None.
    """

    __slots__ = ("_error", "killed", "pending", "skipped")

    def __init__(
        self,
        pending: Pending | None = None,
        skipped: Skipped | None = None,
        killed: LoopDetected | None = None,
    ) -> None:
        self.pending = pending
        self.skipped = skipped
        self._error = killed
        self.killed: Detection | None = None if killed is None else killed.detection

    @property
    def runs(self) -> bool:
        return self.skipped is None and self.killed is None

    @property
    def warning(self) -> Detection | None:
        """The detection of a call that goes ahead with a warning (``on_loop="warn"``), or None."""
        pending = self.pending
        if pending is None or pending.decision.action != "warn":
            return None
        return pending.decision.detection

    def notes(self) -> list[str]:
        """What the model reads with this call's result besides the result: the warning note of
        a warned call, then the notes its run gathered for the model since a result last
        carried them (``run.notes()``: ``warn_at`` budget warnings, the note given to
        ``resume()``), each handed over once. For an integration that passes them on, after
        ``done``."""
        pending = self.pending
        if pending is None:
            return []
        run = pending.run
        notes = run.notes() if run._notes else []  # a call with no note pays one check
        decision = pending.decision
        if decision.action != "warn" or decision.detection is None:
            return notes
        return [warning_note(decision.detection), *notes]

    def run_notes(self) -> list[str]:
        """The notes the call's run gathered for the model (``run.notes()``), taken now: for an
        integration that passes them apart from the warning note."""
        pending = self.pending
        if pending is None or not pending.run._notes:  # a call with no note pays one check
            return []
        return pending.run.notes()

    def error(self) -> LoopDetected:
        """The ``LoopDetected`` of a kill: its detection, and the stats of the run it killed."""
        assert self._error is not None, "error() is for an outcome that killed the run"
        return self._error

    def done(self, result: Any) -> None:
        """Record the tool's result (what the model is shown of it)."""
        if self.pending is not None:
            self.pending.done(result)

    def fail(self, error: BaseException) -> None:
        if self.pending is not None:
            self.pending.fail(error)


ExitBehavior = Literal["end", "error"]


def exit_behavior(value: str, allowed: tuple[str, ...] = ("end", "error")) -> str:
    """``value`` checked as an integration's ``exit_behavior`` (``"end"``: the final answer;
    ``"error"``: raise the kill's ``LoopDetected``)."""
    if value not in allowed:
        names = ", ".join(repr(a) for a in allowed[:-1]) + f" or {allowed[-1]!r}"
        raise ValueError(f"exit_behavior must be {names}, got {value!r}")
    return value


def warning_note(detection: Detection) -> str:
    """The short note a warned call's result carries for the model."""
    return f"[fuzeguard warning] {detection.message}"


def with_notes(result: Any, outcome: Outcome) -> Any:
    """``result`` with the outcome's notes (``Outcome.notes``) appended when it is text; else
    unchanged, and the run's notes are left for a later result."""
    if not isinstance(result, str):
        return result
    notes = outcome.notes()
    return "\n\n".join((result, *notes)) if notes else result


def final_answer(detection: Detection) -> str:
    """The final answer of an agent ended by a kill (what the application shows its user)."""
    what = "model call" if detection.fn.split(".")[0] == "model" else "tool call"
    return (
        f"Stopped: the agent was looping ({detection.layer} at {what} {detection.call_index}, "
        f"`{detection.fn}`). {detection.message}"
    )


def wrap_up_request(detection: Detection) -> str:
    """What the model is asked, once and without tools, after a kill, for a final answer it
    writes itself (``wrap_up``): the detection's message is the reason."""
    return (
        f"[fuzeguard] Your tool calls were stopped: {detection.message} No tool will run again. "
        "Write your final answer now, without calling any tool, from what you found so far, and "
        "say what you could not finish."
    )


def stop_message(detection: Detection) -> str:
    """What a tool call of a killed run is answered with, when the agent still makes one."""
    return (
        f"{detection.message} Tool calls in this session are stopped: no tool will run again. "
        "Stop calling tools and answer with what you have."
    )


def guarded(fn: Any) -> bool:
    """Whether ``fn`` is a function wrapped by ``guard()`` (its calls are judged there)."""
    return isinstance(getattr(fn, "guard", None), Guard)


class Once:
    """The tool names something was already said about (at most ``MAX_TOOLS``): ``first(name)``
    is True the first time only."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = new_lock()

    def first(self, name: str) -> bool:
        if name in self._said:
            return False
        with self._lock:
            if name in self._said:
                return False
            if len(self._said) >= MAX_TOOLS:
                self._said.clear()
            self._said.add(name)
        return True


class GuardedTwice:
    """Says once per tool name that a tool whose function has ``@guard`` is judged by that guard
    alone under the integration (``fuzeguard.guarded_twice``): each call counted once."""

    def __init__(self, integration: str) -> None:
        self.integration = integration
        self._once = Once()

    def say(self, name: str) -> None:
        if not self._once.first(name):
            return
        emit("warning", "fuzeguard.guarded_twice", fn=name,
             message=f"the tool {name!r} has @guard on its function and the agent has "
             f"{self.integration}: each call is judged once, by the function's guard and its "
             "options, and a kill still ends the agent with the integration's final answer. "
             f"Remove @guard from the function to judge it with {self.integration}'s options")


class ToolCalls:
    """One guard per tool name, built with ``guard()``'s options (validated once, here)."""

    def __init__(self, **options: Unpack[ToolOptions]) -> None:
        self._decorate = guard(**options)  # validates the options now, with guard()'s messages
        self._guards: dict[str, Guard] = {}
        self._lock = new_lock()

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
            return Outcome(killed=exc)
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
