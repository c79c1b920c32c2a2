"""What a run publishes: one frozen event per change, delivered to the run's subscribers.

A run announces each step of a call (decided and started, completed, refused, interrupted), each
decision that carries detections, a kill, the end of a turn, a reset, cost added outside any call,
a budget reaching a ``warn_at`` fraction, a resume after a kill, and its closing. The trace
recorder, the structured log, the OpenTelemetry exporter and the ``on_detect`` hooks are
subscribers like any other (``sinks.py``); replay subscribes its own reporting instead. Nothing
a subscriber does changes what the run decides.

Events are delivered synchronously, in the thread (or task) whose call caused them, never while
the run's lock is held, in the order they happened. A change made while the lock is held (a
reset, the end of a turn, or cost counted toward a parent run) is queued and delivered right after
the lock is released, or with the run's next event. A subscriber that raises is logged
(``fuzeguard.subscriber_failed``) and the call goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.records import Call, CallRecord, Decision, Detection

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunHandle


@dataclass(frozen=True, slots=True)
class CallStarted:
    """A call was decided and goes ahead (``decision.action`` is ``"call"`` or ``"warn"``).

    ``plan`` is what the guard resolved for the call (its settings and layers): an internal
    object, given for the built-in subscribers; its shape may change between versions.
    """

    run: RunHandle
    plan: Plan
    call: Call
    decision: Decision


@dataclass(frozen=True, slots=True)
class CallCompleted:
    """A call that went ahead ended: ``record`` is what the run keeps of it. ``result`` is what
    it returned (the list of its chunks for a generator, ``stream`` True), ``error`` what it
    raised; ``decision`` includes what fired while it streamed."""

    run: RunHandle
    plan: Plan
    call: Call
    decision: Decision
    record: CallRecord
    result: Any
    error: BaseException | None
    stream: bool


@dataclass(frozen=True, slots=True)
class CallRefused:
    """A call that never ran: skipped (answered by the guard) or killed."""

    run: RunHandle
    plan: Plan
    call: Call
    decision: Decision


@dataclass(frozen=True, slots=True)
class CallInterrupted:
    """A call that went ahead and never completed (cancelled, closed early, or killed from
    inside): it leaves no record. ``start`` is when it began, in run seconds; ``chunks`` what a
    generator yielded before it stopped (None for other functions)."""

    run: RunHandle
    plan: Plan
    call: Call
    decision: Decision
    start: float
    chunks: list[Any] | None


@dataclass(frozen=True, slots=True)
class Detected:
    """Layers fired on a call (before it, or while it streamed): ``decision.detections``, each
    with the action it calls for; ``decision.action`` is what is done (``"call"`` in observe
    mode)."""

    run: RunHandle
    plan: Plan
    call: Call
    decision: Decision


@dataclass(frozen=True, slots=True)
class RunKilled:
    """A detection ended the run: every later call is refused."""

    run: RunHandle
    detection: Detection


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """``run.end_turn()``: ``turn`` is the number of the turn that begins."""

    run: RunHandle
    turn: int


@dataclass(frozen=True, slots=True)
class RunReset:
    """``run.reset()``: history, counters and the clock start again; ``resets`` so far."""

    run: RunHandle
    resets: int


@dataclass(frozen=True, slots=True)
class CostAdded:
    """Cost counted toward the run outside its calls: ``add_cost()`` outside a guarded call, or
    what a subagent's run spent."""

    run: RunHandle
    amount: float


@dataclass(frozen=True, slots=True)
class BudgetWarning:
    """A run budget reached one of its ``warn_at`` fractions (once each; a turn's budget once
    per turn): ``limit`` is the budget's key (``max_calls``, ``max_calls_per_turn``,
    ``max_cost``, ``max_duration``), ``used`` how much of ``budget`` is spent, and ``message``
    a note for the model ("80% of the call budget used (8 of 10 calls): wrap up."), also kept
    for ``run.notes()``."""

    run: RunHandle
    limit: str
    fraction: float
    used: float
    budget: float
    message: str


@dataclass(frozen=True, slots=True)
class RunResumed:
    """``run.resume()``: a killed run goes on with its history. ``detection`` is the stop it
    resumes from; ``budgets`` the budgets raised, by key, to their new values; ``note`` the note
    for the model, if any (also kept for ``run.notes()``)."""

    run: RunHandle
    detection: Detection
    budgets: dict[str, float]
    note: str | None


@dataclass(frozen=True, slots=True)
class RunClosed:
    """The last ``with`` block inside the run exited."""

    run: RunHandle


Event = (
    CallStarted | CallCompleted | CallRefused | CallInterrupted | Detected | RunKilled
    | TurnEnded | RunReset | CostAdded | BudgetWarning | RunResumed | RunClosed
)
EVENT_TYPES: tuple[type[Any], ...] = (
    CallStarted, CallCompleted, CallRefused, CallInterrupted, Detected, RunKilled, TurnEnded,
    RunReset, CostAdded, BudgetWarning, RunResumed, RunClosed,
)
Subscriber = Callable[[Any], object]
