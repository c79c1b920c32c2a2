"""Runs: the unit loops are judged in, kept in a context variable.

``Run`` is the user's handle: opening and closing, threads and tasks, deciding the calls of its
guards, stats and controls. Its state and the bookkeeping that keeps it are ``RunState``'s
(``runstate.py``), its subscribers ``Delivering``'s (``delivery.py``); which run a call belongs
to, and the implicit run, are ``implicit.py``'s.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar

from fuzeguard._private.configuration.config import Config, checked_discovered_config
from fuzeguard._private.configuration.settings import store_url
from fuzeguard._private.configuration.validation import validate_code_options
from fuzeguard._private.meaning.fingerprint import keyed
from fuzeguard._private.meaning.records import (
    Call,
    Decision,
    Detection,
    LimitUsage,
    RunStats,
)
from fuzeguard._private.protocols import DetectHook
from fuzeguard._private.publish.events import (
    CallInterrupted,
    CallRefused,
    CallStarted,
    CostAdded,
    Detected,
    RunClosed,
    RunKilled,
    RunResumed,
)
from fuzeguard._private.publish.log import emit
from fuzeguard._private.publish.sinks import attach_standard
from fuzeguard._private.runs import astray, budget
from fuzeguard._private.runs.ask import Question, answer
from fuzeguard._private.runs.delivery import Delivering
from fuzeguard._private.runs.exceptions import FuzeguardError
from fuzeguard._private.runs.runstate import _REFUSED

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import RunOptions
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.reports.report import StopReport
    from fuzeguard._private.reports.timeline import Timeline
    from fuzeguard._private.runs.ask import AskHook
    from fuzeguard._private.store import Store

P = ParamSpec("P")
R = TypeVar("R")

# The runs entered in this context, innermost last: each task, thread or event loop that enters a
# run keeps its own stack, so overlapping ``with run:`` blocks in different contexts never
# disturb each other.
_current: contextvars.ContextVar[tuple[Run, ...]] = contextvars.ContextVar("fuzeguard_run", default=())


def make_current(run: Run) -> contextvars.Token[tuple[Run, ...]]:
    """Make ``run`` the current run in this context without entering it (leaving does not close
    it): for integrations that pick a run per call. Undo with ``restore_current(token)`` in the
    same context."""
    return _current.set((*_current.get(), run))


def restore_current(token: contextvars.Token[tuple[Run, ...]]) -> None:
    """Undo ``make_current``."""
    _current.reset(token)


class Run(Delivering):
    """One agent task, request or conversation turn: the unit loops are judged in.

    Open one with ``fuzeguard.run()``; use it as ``with`` or ``async with``. Calls made in asyncio
    tasks started inside it belong to it; for threads use ``run.bind(fn)`` or
    ``ThreadPoolExecutor(initializer=run.attach)``.
    """

    # The run's shared state (``store/``): None, as a class default that costs a run of its own
    # nothing, or set on runs that have a store or a parent.
    _store: Store | None = None
    # What the stop report reads the run's calls from (``timeline.py``): set by the standard
    # subscribers, or by ``fuze report`` on replay's runs.
    _timeline: Timeline | None = None
    # Whether the run gets the standard subscribers (``sinks.py``): replay's runs do not.
    _standard: ClassVar[bool] = True
    def __init__(
        self,
        name: str | None = None,
        *,
        config: Config | str | Any = None,
        on_detect: DetectHook | Iterable[DetectHook] | None = None,
        parent: Run | str | None = None,
        ask: AskHook | None = None,
        **settings: Unpack[RunOptions],
    ) -> None:
        if ask is not None and not callable(ask):
            raise TypeError(f"fuzeguard.run(ask=...) takes a function, got {ask!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"fuzeguard.run() takes a name that is a string (or None), got "
                            f"{name!r}: name it after the task, such as f\"ticket-{{id}}\"")
        resolved = _as_config(config)
        if settings:
            resolved = resolved.with_values(
                validate_code_options(settings, "fuzeguard.run()", run_scope=True)
            )
        # Keys the fingerprints this run writes to traces and logs (see ``public_fp``).
        self._fp_key = os.urandom(32)
        super().__init__(name, os.urandom(6).hex(), resolved)
        self.hooks: tuple[DetectHook, ...] = _as_hooks(on_detect)
        # Answers the "ask" action (``ask.py``).
        self.ask_hook: AskHook | None = ask
        # The run this one works for, as given (``__call__`` makes runs like this one).
        self._parent = parent
        self.started_at = time.time()
        # How many ``with`` blocks (in any task, thread or loop) are inside the run right now.
        self._entered = 0
        self._subs = {}
        url = store_url(self.config)
        if url is not None and name is None and self.config.origin_of("store") != "code":
            url = None  # a store from the file or FUZE_STORE shares named runs only
        if url is not None or parent is not None:
            # Deferred for start-up time: a run of its own never loads the store.
            from fuzeguard._private.store import open_store

            self._store = open_store(self, url, parent)
        # An async tool's decision awaits something: the store's round trips, or a person.
        self._awaits = self._store is not None or ask is not None
        if self._standard:
            attach_standard(self)

    # ------------------------------------------------------------------ context management

    def __enter__(self) -> Run:
        with self._lock:
            first = self._entered == 0
            self._entered += 1
        if first:
            astray.entered(self)
            if self._store is not None:
                self._store.open(self)
        _current.set((*_current.get(), self))
        return self

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack = _current.get()
        # Innermost first; a context that never entered this run (an exit in another task than
        # the enter) leaves its own stack alone.
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                _current.set(stack[:i] + stack[i + 1:])
                break
        with self._lock:
            self._entered = max(0, self._entered - 1)
            last = self._entered == 0
        if last:
            astray.left(self)
            self.close()

    async def __aenter__(self) -> Run:
        with self._lock:
            first = self._entered == 0
        if first and self._store is not None:
            await self._store.aopen(self)  # loaded now, awaited: ``__enter__`` finds it open
        return self.__enter__()

    async def __aexit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            last = self._entered == 1
        if last and self._store is not None:
            await self._store.aflush(self, everything=True)  # ``close`` finds nothing to send
        self.__exit__(tp, exc, tb)

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``@fuzeguard.run("ticket")`` on a task's function: each call of it runs in a fresh run
        made as this one was (same name, config, settings, hooks and parent), so that the calls
        of one task are judged together and those of the next start afresh. Works on plain and
        coroutine functions.
        """
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn) or not callable(fn):
            raise TypeError(
                f"@fuzeguard.run(...) takes a function or a coroutine function, got {fn!r}: for a "
                "generator, open the run inside it (`with fuzeguard.run(...):`)"
            )
        astray.settled(self)  # made to decorate: its calls go to the runs made from it
        name, config, hooks, parent, ask = self.name, self.config, self.hooks, self._parent, \
            self.ask_hook

        def fresh() -> Run:
            return Run(name, config=config, on_detect=hooks, parent=parent, ask=ask)

        if inspect.iscoroutinefunction(fn):
            async def in_a_run_async(*args: Any, **kwargs: Any) -> Any:
                async with fresh():
                    return await fn(*args, **kwargs)

            return functools.wraps(fn)(in_a_run_async)  # type: ignore[return-value]

        def in_a_run(*args: P.args, **kwargs: P.kwargs) -> R:
            with fresh():
                return fn(*args, **kwargs)

        return functools.wraps(fn)(in_a_run)

    def attach(self) -> None:
        """Make this run current in the calling thread's context, for good.

        Meant as a thread pool initializer: ``ThreadPoolExecutor(initializer=run.attach)`` makes
        every task on that pool's threads belong to this run.
        """
        _current.set((self,))

    def bind(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Wrap ``fn`` so that it runs inside this run in whatever thread calls it.

        ``executor.submit(run.bind(tool), arg)`` or ``threading.Thread(target=run.bind(work))``.
        """

        def bound(*args: P.args, **kwargs: P.kwargs) -> R:
            token = make_current(self)
            try:
                return fn(*args, **kwargs)
            finally:
                restore_current(token)

        return bound


    def close(self) -> None:
        """Flush and close the run's trace, if any. Called when the last ``with`` block inside the
        run exits (in whatever task, thread or event loop); a later call opens it again."""
        self._deliver(RunClosed(self))
        if self._store is not None:
            self._store.close(self)

    def end(self) -> None:
        """End the run for good. A shared run's state is deleted from its store: every process
        that shares it is done with it, and a process that opens (or goes on using) a run of
        that name afterwards starts a fresh one. Closing a run never does this: a shared run
        otherwise lives until ``store_ttl`` after its last activity. A run of this process's own
        has nothing to delete."""
        if self._store is not None:
            self._store.end(self)

    def public_fp(self, fp: bytes) -> bytes:
        """The form of a fingerprint that this run writes to traces and logs: keyed with the
        run's random secret, so that equal calls still match within the run while nothing
        outside the process can test a guess of a (redacted) value against it."""
        return keyed(fp, self._fp_key)


    # ------------------------------------------------------------------ user controls

    def stats(self) -> RunStats:
        """Calls in total and per function, errors, cost, time, detections, and limit usage."""
        values = self.config.settings_for(None)
        if self._store is not None:
            self._store.refresh(self)
        with self._lock:
            busiest = max(self._calls_by_fn.values(), default=0)
            limits = {
                "max_calls": LimitUsage(self._calls, values["max_calls"]),
                "max_calls_per_turn": LimitUsage(self._turn_calls, values["max_calls_per_turn"]),
                "max_duration": LimitUsage(self.elapsed(), values["max_duration"]),
                "max_errors": LimitUsage(self._errors, values["max_errors"]),
                "max_consecutive_errors": LimitUsage(
                    self._consecutive_errors, values["max_consecutive_errors"]
                ),
                "max_cost": LimitUsage(self._cost, values["max_cost"]),
                "max_iterations": LimitUsage(busiest, _iteration_cap(values["max_iterations"])),
                "max_resets": LimitUsage(self.resets, values["max_resets"]),
            }
            return RunStats(
                run_id=self.id,
                name=self.name,
                calls=self._calls,
                calls_by_fn=dict(self._calls_by_fn),
                skipped=self._skipped,
                errors=self._errors,
                consecutive_errors=self._consecutive_errors,
                cost=self._cost,
                elapsed=self.elapsed(),
                turn=self._turn,
                turn_calls=self._turn_calls,
                resets=self.resets,
                detections=self._detections,
                detections_by_layer=dict(self._detections_by_layer),
                killed=self._killed is not None,
                limits=limits,
                layer_errors=dict(self._layer_errors),
                tokens_in=self._tokens_in,
                tokens_out=self._tokens_out,
                **(self._store.stats() if self._store is not None else {}),
            )

    def report(self) -> StopReport:
        """Why the run was stopped (or what fired so far): the layer and its reason, the
        repeated calls with their arguments previewed (redacted as traces are), calls and cost
        spent and saved, and the ``fuze.toml`` lines that would change the outcome.
        ``str(run.report())`` is the text; ``.html()`` a page with a picture of the run."""
        # Deferred for start-up time: the reports load when a report is asked for.
        from fuzeguard._private.reports.report import report_of

        return report_of(self)

    def notes(self) -> list[str]:
        """The notes for the model gathered since the last call of ``notes()``, oldest first:
        each ``warn_at`` budget warning ("80% of the call budget used ...: wrap up") and the
        note given to ``resume()``. Each note is returned once: an integration passes them on
        to the model (with the next tool result, or in the next prompt)."""
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def resume(
        self,
        *,
        extra_calls: int = 0,
        extra_cost: float = 0.0,
        extra_time: float = 0.0,
        note: str | None = None,
    ) -> None:
        """Go on with a killed run, keeping its history: the same loop is caught again at its
        first repeat (the call it was killed at, made again, ends the run at once; its layers
        keep their history) while a new call may proceed.

        ``extra_calls`` raises the call budgets that are set (``max_calls``, and
        ``max_calls_per_turn``) by that many calls, or, when none is set, allows that many
        more calls; ``extra_cost`` raises ``max_cost`` (or allows that much more spending) and
        ``extra_time`` (seconds) ``max_duration`` the same way. A budget that stopped the run
        and is not raised stops it again at the next call. ``note`` is kept for the model
        (``notes()``). Publishes ``RunResumed``. Raises FuzeguardError if the run was not
        killed, or is shared through a store.
        """
        _non_negative("extra_calls", extra_calls, whole=True)
        _non_negative("extra_cost", extra_cost)
        _non_negative("extra_time", extra_time)
        if note is not None and not isinstance(note, str):
            raise TypeError(f"run.resume(note=...) takes a string, got {type(note).__name__}")
        if self._store is not None:
            raise FuzeguardError(
                f"run {self.name or self.id} is shared through a store: resume() is not available "
                "for shared runs; open a new run (or reset() it) instead"
            )
        with self._lock:
            killed = self._killed
            if killed is None:
                raise FuzeguardError(
                    f"run {self.name or self.id} was not killed: resume() continues a run after "
                    "a kill; to give a running run more budget, open it with larger limits"
                )
            values = self.config.settings_for(None)
            raised: dict[str, Any] = {}
            if extra_calls:
                for key in ("max_calls", "max_calls_per_turn"):
                    if values[key] is not None:
                        raised[key] = values[key] + extra_calls
                if not raised:
                    raised["max_calls"] = self._calls + extra_calls
            if extra_cost:
                base = values["max_cost"]
                raised["max_cost"] = (self._cost if base is None else base) + extra_cost
            if extra_time:
                base = values["max_duration"]
                raised["max_duration"] = (self.elapsed() if base is None else base) + extra_time
            self._resumed(raised, note)
            if self._entered == 0:
                astray.awaiting(self, "resumed")
        self._drain()
        emit("warning", "fuzeguard.run_resumed", run_id=self.id, run_name=self.name,
             layer=killed.layer, fn=killed.fn, call_index=killed.call_index,
             budgets={k: v for k, v in raised.items()},
             message="a killed run was resumed with its history: the loop that stopped it is "
             "caught again at its first repeat")

    def _resumed(self, raised: dict[str, Any], note: str | None) -> None:
        """Raise the budgets in ``raised`` to their new values and lift the kill, keeping the
        history (lock held): ``resume()`` here, or replay at a trace's ``resumed`` line."""
        killed = self._killed
        if raised:
            values = self.config.settings_for(None)
            used = {"max_calls": float(self._calls), "max_calls_per_turn": float(self._turn_calls),
                    "max_cost": self._cost, "max_duration": self.elapsed()}
            self.config = self.config.with_values(raised, origin="code")
            if values["warn_at"]:
                self._budget_steps.update(
                    budget.arm(self.config.settings_for(None), tuple(raised), used)
                )
                self._set_warn()
        if killed is None:
            return
        self._killed = None
        if killed.kind == "loop" and self._killed_fp:
            self._stopped[self._killed_fp] = killed
        if note:
            self._note_for_model(note)
        self._outbox.append(RunResumed(self, killed, raised, note))

    def reset(self) -> None:
        """Clear history, counters, the clock and a kill: a fresh start (``/clear``).

        Allowed ``max_resets`` times per run (2 by default); the next one raises FuzeguardError.
        """
        if self._store is not None:
            self._store.reset(self)
        else:
            with self._lock:
                self._reset()
        if self._outbox:
            self._drain()

    def end_turn(self) -> None:
        """End the current turn: per-turn counters (``max_calls_per_turn``) start again.

        Once a run's turns are marked this way (the integrations end one at each model call), an
        escalation ladder steps at most once per turn for each pattern: identical calls the model
        sent together in one turn are one step."""
        if self._store is not None:
            self._store.end_turn(self)
        else:
            with self._lock:
                self._end_turn()
        if self._outbox:
            self._drain()

    def _add_cost(self, amount: float) -> None:
        """Cost spent outside any guarded call (``add_cost()``)."""
        if self._store is not None:
            self._store.add_cost(self, amount)
        else:
            with self._lock:
                self._cost += amount
                if self._cost >= self._warn_cost:
                    self._budget_reached()
        self._deliver(CostAdded(self, amount))

    # ------------------------------------------------------------------ used by guards

    def _decide(
        self, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        """Decide a call about to run; ``kind`` is given by replay when a trace recorded it."""
        if self._store is not None:
            call, decision = self._store.decide(self, plan, args_fp, arguments, kind)
            return self._decided(plan, call, decision)
        call, decision = self._judged(plan, args_fp, arguments, kind)
        if decision.action == "ask":
            decision = self._ask(call, decision, self._question(call, decision), self._count)
        elif (
            decision.action == "call" and not decision.detections and decision is not _REFUSED
            and not self._unlogged and not self._outbox and CallStarted not in self._subs
        ):
            return call, decision  # a quiet call, with nothing to log or publish
        return self._decided(plan, call, decision)

    async def _adecide(
        self, plan: Plan, args_fp: bytes, arguments: Any
    ) -> tuple[Call, Decision]:
        """``_decide`` for a coroutine tool of a run with a store (its round trips awaited) or
        with an ``ask`` callback (the answer awaited off the event loop's thread)."""
        if self._store is not None:
            call, decision = await self._store.adecide(self, plan, args_fp, arguments, None)
            return self._decided(plan, call, decision)
        call, decision = self._judged(plan, args_fp, arguments, None)
        if decision.action == "ask":
            import asyncio  # already imported: the caller runs an event loop

            reply = await asyncio.to_thread(self._question, call, decision)
            decision = self._ask(call, decision, reply, self._count)
        return self._decided(plan, call, decision)

    def _judged(
        self, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None
    ) -> tuple[Call, Decision]:
        """Judge a call of a run without a store and book it, unless it waits for ``ask``."""
        with self._lock:
            call, decision = self._judge(plan, args_fp, arguments, kind)
            if decision is not _REFUSED and decision.action != "ask":
                self._count(call, decision)
        return call, decision

    def _ask(
        self, call: Call, decision: Decision, reply: str,
        book: Callable[[Call, Decision], None],
    ) -> Decision:
        """Book a decision that called for ``ask`` with the ``ask`` callback's ``reply``,
        given outside the lock (``ask.py``)."""
        with self._lock:
            if self._killed is not None:  # killed by another call while the question was open
                return Decision("kill", call.index, self._killed, ())
            decision = self._answered(decision, reply)
            book(call, decision)
        return decision

    def _question(self, call: Call, decision: Decision) -> str:
        """The ``ask`` callback's answer to a decision that calls for it (``ask.py``); waits
        for it, up to ``ask_timeout``."""
        assert decision.detection is not None
        if self.ask_hook is None and not self._standard:
            return "kill"  # replay: no one to ask, and nothing to log as live
        timeout = self.config.settings_for(None)["ask_timeout"]
        return answer(self.ask_hook, Question(decision.detection, call.fn, self), timeout)

    def _decided(self, plan: Plan, call: Call, decision: Decision) -> tuple[Call, Decision]:
        """Log layer failures and refuse a call a failing layer could not judge under
        ``fail_closed``: after the decision, outside the lock."""
        if self._unlogged:
            self._log_layer_failures()
        if decision is _REFUSED:
            raise LayerFailed(f"a layer failed while judging a call to {plan.name}")
        if decision.detections:
            self._announce(plan, call, decision)
        action = decision.action
        if action == "call" or action == "warn":
            if CallStarted in self._subs or self._outbox:
                self._deliver(CallStarted(self, plan, call, decision))
        else:
            self._deliver(CallRefused(self, plan, call, decision))
        return call, decision

    def _announce(self, plan: Plan, call: Call, decision: Decision) -> None:
        """Publish a decision's detections, and the kill if it killed the run."""
        self._deliver(Detected(self, plan, call, decision))
        if decision.action == "kill" and decision.detection is not None:
            self._deliver(RunKilled(self, decision.detection))

    def _flag(self, plan: Plan, call: Call, detection: Detection) -> Decision:
        """Act on a detection made while a call is under way (a stream that repeats itself):
        the same action choice, bookkeeping and kill as a detection made before the call."""
        if self._store is not None:
            decision = self._store.flag(self, plan, call, detection)
        else:
            with self._lock:
                decision = self._judge_flag(plan, call, detection)
                if decision.action != "ask":
                    self._count_flag(decision)
            if decision.action == "ask":
                decision = self._ask(call, decision, self._question(call, decision),
                                     lambda _, d: self._count_flag(d))
        if decision.detections:
            self._announce(plan, call, decision)
        return decision

    def _interrupted(
        self, plan: Plan, call: Call, decision: Decision, start: float, chunks: list[Any] | None
    ) -> None:
        """A call that went ahead and never completed: it leaves no record."""
        self._discard(call)
        self._deliver(CallInterrupted(self, plan, call, decision, start, chunks))

    def _discard(self, call: Call) -> None:
        """A call that went ahead but never completed (interrupted): it leaves no record."""
        if self._store is not None:
            self._store.discard(self, call.index)
            return
        with self._lock:
            self._drop(call.index)

    def __repr__(self) -> str:
        state = "killed" if self._killed is not None else "open"
        return f"<Run {self.name or self.id} {state} calls={self._calls}>"


def _non_negative(name: str, value: Any, *, whole: bool = False) -> None:
    ok = isinstance(value, int) if whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not 0 <= value < float("inf"):
        expected = "a whole number" if whole else "a finite number"
        raise TypeError(f"run.resume({name}=...) takes {expected} of at least 0, got {value!r}")


def _iteration_cap(value: int | None) -> int:
    """The iteration cap in force: the one set, or the built-in one."""
    # Deferred for start-up time: the built-in layers load with the first guard, not with
    # ``import fuzeguard``.
    from fuzeguard.layers.iterations import DEFAULT_CAP

    return DEFAULT_CAP if value is None else value


class LayerFailed(RuntimeError):
    """Raised to the guard when a layer failed and ``fail_closed`` refuses the call."""


def _as_config(config: Any) -> Config:
    if config is None:
        return checked_discovered_config()
    if isinstance(config, Config):
        return config
    if isinstance(config, dict):
        return Config.from_dict(config)
    return Config.load(config)


def _as_hooks(hooks: DetectHook | Iterable[DetectHook] | None) -> tuple[DetectHook, ...]:
    if hooks is None:
        return ()
    if callable(hooks):
        return (hooks,)
    return tuple(hooks)


def run(
    name: str | None = None,
    *,
    config: Config | str | Any = None,
    on_detect: DetectHook | Iterable[DetectHook] | None = None,
    parent: Run | str | None = None,
    ask: AskHook | None = None,
    **settings: Unpack[RunOptions],
) -> Run:
    """Open a run: ``with fuzeguard.run("ticket-4711") as run: ...`` (or ``async with``).

    ``config`` is a ``Config``, a path to a TOML file, or a TOML-shaped dict; by default the
    discovered fuze.toml. Keyword settings (``max_calls=50``, ``trace="traces/"``) override it.
    ``store="redis://host:6379/0"`` shares the run with every process that opens a run of the
    same name on that store (``docs/workers.md``). ``parent`` is the run this one works for (a
    subagent's run): its calls and cost count toward the parent's budgets as well. ``ask``
    answers the ``"ask"`` action of ``on_loop``: a function (or coroutine function) of a
    ``Question`` that answers ``"continue"``, ``"skip"`` or ``"kill"`` (docs/stopped.md).
    """
    made = Run(name, config=config, on_detect=on_detect, parent=parent, ask=ask, **settings)
    astray.awaiting(made, "created")
    return made
