"""Runs: the unit loops are judged in, kept in a context variable.

A run owns all mutable state (history, counters, escalation steps) behind one lock; layers only
read it through the ``RunView`` methods below.

A call that goes ahead is part of the run from the moment it starts: while it runs, every other
call decided in the run sees it in the history as an *in-flight* record whose result is unknown
(``result_fp`` None, ``features`` ``IN_FLIGHT``), so layers that count calls see concurrent calls
(``asyncio.gather``, threads, recursion) as they see sequential ones; its final record takes its
place when it ends. In-flight records are made lazily, when another call is decided while calls
are running: calls made one after another never need one, and pay only for a dict entry.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, ParamSpec, TypeVar

from fuzeguard._private import state
from fuzeguard._private.config import Config, discovered_config, validate_code_options
from fuzeguard._private.core import action_for, decide, pattern_key
from fuzeguard._private.events import (
    EVENT_TYPES,
    CallCompleted,
    CallInterrupted,
    CallRefused,
    CallStarted,
    CostAdded,
    Detected,
    Event,
    RunClosed,
    RunKilled,
    RunReset,
    Subscriber,
    TurnEnded,
)
from fuzeguard._private.exceptions import FuzeguardError
from fuzeguard._private.fastinit import new_call, new_decision, new_record
from fuzeguard._private.fingerprint import keyed
from fuzeguard._private.hooks import callable_name
from fuzeguard._private.log import emit
from fuzeguard._private.records import (
    IN_FLIGHT,
    Call,
    CallRecord,
    Decision,
    Detection,
    LimitUsage,
    RunStats,
)
from fuzeguard._private.secrets import exception_text
from fuzeguard._private.settings import store_url
from fuzeguard._private.sinks import attach_standard

if TYPE_CHECKING:
    from fuzeguard._private.plan import Plan
    from fuzeguard._private.store import Store

P = ParamSpec("P")
R = TypeVar("R")

# The runs entered in this context, innermost last: each task, thread or event loop that enters a
# run keeps its own stack, so overlapping ``with run:`` blocks in different contexts never
# disturb each other.
_current: contextvars.ContextVar[tuple[Run, ...]] = contextvars.ContextVar("fuzeguard_run", default=())
_implicit: Run | None = None
_implicit_lock = threading.Lock()

MIN_HISTORY = 32
MAX_PATTERNS = 4096
MAX_KEPT_DETECTIONS = 100

DetectHook = Callable[[Detection], object]


def current_run() -> Run:
    """The run the current context belongs to, or the implicit process-wide run if none is open."""
    stack = _current.get()
    return stack[-1] if stack else implicit_run()


def make_current(run: Run) -> contextvars.Token[tuple[Run, ...]]:
    """Make ``run`` the current run in this context without entering it (leaving does not close
    it): for integrations that pick a run per call. Undo with ``restore_current(token)`` in the
    same context."""
    return _current.set((*_current.get(), run))


def restore_current(token: contextvars.Token[tuple[Run, ...]]) -> None:
    """Undo ``make_current``."""
    _current.reset(token)


def implicit_run() -> Run:
    """The process-wide run that calls made outside any ``fuzeguard.run()`` go to.

    A kill ends the implicit run like any other, but it does not stay dead: the next call made
    outside any run starts a fresh implicit run (logged as ``fuzeguard.implicit_run_restarted``),
    so that one bad request cannot disable a long-lived process that opens no runs.
    """
    global _implicit
    run = _implicit
    if run is not None and run._killed is None:
        return run
    with _implicit_lock:
        run = _implicit
        if run is None:
            run = _implicit = Run("implicit", store=None)
            emit(
                "info", "fuzeguard.implicit_run",
                message="a guarded call was made outside fuzeguard.run(): it counts against the "
                "process-wide implicit run; open one run per task or request to keep them apart",
            )
        elif run._killed is not None:
            killed = run._killed
            run.close()
            run = _implicit = Run("implicit", store=None)
            emit(
                "warning", "fuzeguard.implicit_run_restarted",
                previous_run_id=killed.run_id, run_id=run.id, layer=killed.layer, fn=killed.fn,
                message="the implicit run was killed by a detection; calls made outside "
                "fuzeguard.run() now go to a fresh implicit run. Open one run per task or "
                "request so that a kill stays with the task that looped",
            )
    return run


def _reset_implicit_run() -> None:
    global _implicit
    with _implicit_lock:
        if _implicit is not None:
            _implicit.close()
        _implicit = None


class Run:
    """One agent task, request or conversation turn: the unit loops are judged in.

    Open one with ``fuzeguard.run()``; use it as ``with`` or ``async with``. Calls made in asyncio
    tasks started inside it belong to it; for threads use ``run.bind(fn)`` or
    ``ThreadPoolExecutor(initializer=run.attach)``.
    """

    # The run's shared state (``store/``): None, as a class default that costs a run of its own
    # nothing, or set on runs that have a store or a parent.
    _store: Store | None = None
    # Whether the run gets the standard subscribers (``sinks.py``): replay's runs do not.
    _standard: ClassVar[bool] = True
    # The run's clock; None: time.monotonic. Replay's runs run on the trace's timestamps.
    _clock: Callable[[], float] | None = None

    def __init__(
        self,
        name: str | None = None,
        *,
        config: Config | str | Any = None,
        on_detect: DetectHook | Iterable[DetectHook] | None = None,
        parent: Run | str | None = None,
        **settings: Any,
    ) -> None:
        self.name = name
        self.id = os.urandom(6).hex()
        # Keys the fingerprints this run writes to traces and logs (see ``public_fp``).
        self._fp_key = os.urandom(32)
        self.config = _as_config(config)
        if settings:
            self.config = self.config.with_values(
                validate_code_options(settings, "fuzeguard.run()", run_scope=True)
            )
        self.hooks: tuple[DetectHook, ...] = _as_hooks(on_detect)
        self.started_at = time.time()
        self._lock = threading.Lock()
        # How many ``with`` blocks (in any task, thread or loop) are inside the run right now.
        self._entered = 0
        self._capacity = MIN_HISTORY
        # Subscribers by event type (``subscribe``), and events made while the lock was held,
        # delivered once it is released (``_deliver``).
        self._subs: dict[type[Any], tuple[Subscriber, ...]] = {}
        self._outbox: list[Event] = []
        self.resets = 0
        # Layers that raised while judging a call: failures per layer name (see ``stats()``).
        self._layer_errors: dict[str, int] = {}
        self._layer_failures = 0
        self._unlogged: list[tuple[str, str, str]] = []
        self._clear()
        url = store_url(self.config)
        if url is not None and name is None and self.config.origin_of("store") != "code":
            url = None  # a store from the file or FUZE_STORE shares named runs only
        if url is not None or parent is not None:
            from fuzeguard._private.store import open_store

            self._store = open_store(self, url, parent)
        if self._standard:
            attach_standard(self)

    def _clear(self) -> None:
        # Calls that went ahead and have not ended, by index: the ``Call`` until another call is
        # decided meanwhile, then the in-flight record put in the history for it. A reset
        # forgets them: one that ends later is recorded as a plain completed call.
        self._running: dict[int, Call | CallRecord] = {}
        self._unseen = 0  # how many of them are still a ``Call``
        self._history: deque[CallRecord] = deque(maxlen=self._capacity)
        self._by_args: dict[bytes, deque[CallRecord]] = {}
        self._calls_by_fn: dict[str, int] = {}
        self._attempts = 0
        self._calls = 0
        self._skipped = 0
        self._errors = 0
        self._consecutive_errors = 0
        self._cost = 0.0
        self._turn = 1
        self._turn_calls = 0
        self._start = self._now()
        self._killed: Detection | None = None
        self._hits: dict[Hashable, int] = {}
        self._detections = 0
        self._detections_by_layer: dict[str, int] = {}
        self._kept: deque[Detection] = deque(maxlen=MAX_KEPT_DETECTIONS)

    # ------------------------------------------------------------------ context management

    def __enter__(self) -> Run:
        with self._lock:
            first = self._entered == 0
            self._entered += 1
        if first and self._store is not None:
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
            self.close()

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(tp, exc, tb)

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

    def subscribe(self, subscriber: Subscriber, *events: type[Any]) -> Callable[[], None]:
        """Deliver this run's events of the given types (all types if none are given) to
        ``subscriber``, a callable taking one event (``fuzeguard.events``); returns a function
        that unsubscribes it.

        Events are delivered in the thread or task whose call caused them, in order, never while
        the run's lock is held. A subscriber that raises is logged and the call goes on.
        """
        kinds = events or EVENT_TYPES
        for kind in kinds:
            if kind not in EVENT_TYPES:
                raise TypeError(
                    f"run.subscribe(): {kind!r} is not an event type; use the classes in "
                    "fuzeguard.events"
                )
        with self._lock:
            subs = dict(self._subs)
            for kind in kinds:
                subs[kind] = (*subs.get(kind, ()), subscriber)
            self._subs = subs  # replaced whole: deliveries in flight keep the tuples they read

        def unsubscribe() -> None:
            with self._lock:
                subs = dict(self._subs)
                for kind in kinds:
                    kept = tuple(s for s in subs.get(kind, ()) if s is not subscriber)
                    if kept:
                        subs[kind] = kept
                    else:
                        subs.pop(kind, None)
                self._subs = subs

        return unsubscribe

    def _deliver(self, event: Event) -> None:
        """Hand ``event`` to its subscribers, after any event queued while the lock was held."""
        if self._outbox:
            self._drain()
        for subscriber in self._subs.get(type(event), ()):
            try:
                subscriber(event)
            except Exception as exc:
                _subscriber_failed(self, subscriber, event, exc)

    def _drain(self) -> None:
        with self._lock:
            queued, self._outbox = self._outbox, []
        for event in queued:
            for subscriber in self._subs.get(type(event), ()):
                try:
                    subscriber(event)
                except Exception as exc:
                    _subscriber_failed(self, subscriber, event, exc)

    def close(self) -> None:
        """Flush and close the run's trace, if any. Called when the last ``with`` block inside the
        run exits (in whatever task, thread or event loop); a later call opens it again."""
        self._deliver(RunClosed(self))
        if self._store is not None:
            self._store.close(self)

    # ------------------------------------------------------------------ the read-only view

    @property
    def calls(self) -> int:
        """Calls executed so far (skipped and killed calls are not counted)."""
        return self._calls

    @property
    def errors(self) -> int:
        return self._errors

    @property
    def consecutive_errors(self) -> int:
        return self._consecutive_errors

    @property
    def cost(self) -> float:
        return self._cost

    @property
    def turn_calls(self) -> int:
        return self._turn_calls

    @property
    def history(self) -> Sequence[CallRecord]:
        return self._history

    @property
    def killed(self) -> Detection | None:
        """The detection that ended the run, or None while it is alive."""
        return self._killed

    @property
    def detections(self) -> tuple[Detection, ...]:
        """The most recent detections (up to 100), oldest first."""
        return tuple(self._kept)

    def calls_of(self, fn: str) -> int:
        return self._calls_by_fn.get(fn, 0)

    def elapsed(self) -> float:
        return self._now() - self._start

    def _now(self) -> float:
        clock = self._clock
        return time.monotonic() if clock is None else clock()

    def same_args(self, args_fp: bytes) -> Sequence[CallRecord]:
        return self._by_args.get(args_fp, ())

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
                **(self._store.stats() if self._store is not None else {}),
            )

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
        """End the current turn: per-turn counters (``max_calls_per_turn``) start again."""
        if self._store is not None:
            self._store.end_turn(self)
        else:
            with self._lock:
                self._end_turn()
        if self._outbox:
            self._drain()

    def _reset(self) -> None:
        limit = self.config.settings_for(None)["max_resets"]
        if self.resets >= limit:
            raise FuzeguardError(
                f"run {self.name or self.id} was already reset {self.resets} times, its "
                f"max_resets = {limit}; open a new run with fuzeguard.run() instead"
            )
        self._restart()

    def _restart(self) -> None:
        """Start afresh (lock held): here, or a reset made by another process sharing the run."""
        self.resets += 1
        self._clear()
        self._outbox.append(RunReset(self, self.resets))

    def _end_turn(self) -> None:
        """A new turn begins (lock held): here, or in another process sharing the run."""
        self._turn += 1
        self._turn_calls = 0
        self._outbox.append(TurnEnded(self, self._turn))

    def _spent(self, amount: float) -> None:
        """Cost counted toward this run outside its calls by a subagent's run (lock held)."""
        self._cost += amount
        self._outbox.append(CostAdded(self, amount))

    def _add_cost(self, amount: float) -> None:
        """Cost spent outside any guarded call (``add_cost()``)."""
        if self._store is not None:
            self._store.add_cost(self, amount)
        else:
            with self._lock:
                self._cost += amount
        self._deliver(CostAdded(self, amount))

    # ------------------------------------------------------------------ used by guards

    def _decide(
        self, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        """Decide a call about to run; ``kind`` is given by replay when a trace recorded it."""
        if self._store is not None:
            call, decision = self._store.decide(self, plan, args_fp, arguments, kind)
            return self._decided(plan, call, decision)
        with self._lock:
            call, decision = self._judge(plan, args_fp, arguments, kind)
            if decision is not _REFUSED:
                self._count(call, decision)
        return self._decided(plan, call, decision)

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

    def _layer_failed(self, layer: Any, call: Call, error: Exception) -> None:
        """A layer raised while judging ``call`` (the run's lock is held): it is left out of this
        decision, counted, and logged the first time it fails in this run."""
        name = str(getattr(layer, "name", None) or type(layer).__name__)
        self._layer_failures += 1
        count = self._layer_errors.get(name, 0)
        self._layer_errors[name] = count + 1
        if count == 0:
            self._unlogged.append((name, call.fn, exception_text(error)))

    def _feature_failed(self, name: str, error: Exception) -> None:
        """A layer's extractor raised while a call was recorded: counted and logged like a
        failing check."""
        with self._lock:
            self._layer_failures += 1
            count = self._layer_errors.get(name, 0)
            self._layer_errors[name] = count + 1
            if count == 0:
                self._unlogged.append((name, "", exception_text(error)))
        self._log_layer_failures()

    def _log_layer_failures(self) -> None:
        with self._lock:
            failures, self._unlogged = self._unlogged, []
        for name, fn, error in failures:
            emit("error", "fuzeguard.layer_failed", layer=name, fn=fn, run_id=self.id,
                 run_name=self.name, error=error,
                 message=f"the layer {name} raised while judging a call to {fn}; it is left out of "
                 "the decisions it fails (the other layers still judge), and its failures are "
                 "counted in run.stats().layer_errors. This is logged once per run and layer.")

    def _judge(
        self, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        """Decide about a call from the run's state as it is, changing nothing (but the history's
        capacity); ``_count`` then books the decision. Called with the lock held."""
        if self._killed is not None:
            call = Call(plan.name, self._attempts + 1, args_fp, arguments)
            return call, Decision("kill", call.index, self._killed, ())
        if plan.history_needed > self._capacity:
            self._grow(plan.history_needed)
        call = new_call(
            plan.name, self._attempts + 1, args_fp, arguments, kind or plan.kind_of(arguments)
        )
        if self._unseen:
            self._show_running()
        if not plan.layers:
            return call, new_decision("call", call.index)
        observe = plan.observe or state.mode_override == "observe"
        failures = self._layer_failures
        decision = decide(self, call, plan.layers, plan.ladder, self._hit_count,
                          observe=observe, on_error=self._layer_failed)
        if self._layer_failures != failures and plan.settings.fail_closed:
            return call, _REFUSED  # a layer could not judge the call: refuse it
        return call, decision

    def _count(self, call: Call, decision: Decision) -> None:
        """Book a decision ``_judge`` made (here or, for a shared run, in another process)."""
        action = decision.action
        if decision.detections:
            self._note(decision)
        elif action == "kill":
            return  # refused because the run was already killed: not an attempt
        self._attempts += 1
        if action == "call" or action == "warn":
            self._calls += 1
            self._calls_by_fn[call.fn] = self._calls_by_fn.get(call.fn, 0) + 1
            self._turn_calls += 1
            self._running[call.index] = call  # in flight from now on
            self._unseen += 1
        elif action == "skip":
            self._skipped += 1
            self._remember_skip(call)
        else:
            self._killed = decision.detection

    def _flag(self, plan: Plan, call: Call, detection: Detection) -> Decision:
        """Act on a detection made while a call is under way (a stream that repeats itself):
        the same action choice, bookkeeping and kill as a detection made before the call."""
        if self._store is not None:
            decision = self._store.flag(self, plan, call, detection)
        else:
            with self._lock:
                decision = self._judge_flag(plan, call, detection)
                self._count_flag(decision)
        if decision.detections:
            self._announce(plan, call, decision)
        return decision

    def _judge_flag(self, plan: Plan, call: Call, detection: Detection) -> Decision:
        if self._killed is not None:
            return Decision("kill", call.index, self._killed, ())
        observe = plan.observe or state.mode_override == "observe"
        action = action_for(detection, plan.ladder, self._hit_count)
        detection = dataclasses.replace(
            detection, run_id=self.id, call_index=call.index, action=action
        )
        return Decision("call" if observe else action, call.index, detection, (detection,))

    def _count_flag(self, decision: Decision) -> None:
        if not decision.detections:
            return
        self._note(decision)
        if decision.action == "kill":
            self._killed = decision.detection

    def _hit_count(self, key: Hashable) -> int:
        return self._hits.get(key, 0)

    def _note(self, decision: Decision) -> None:
        for detection in decision.detections:
            self._detections += 1
            by_layer = self._detections_by_layer
            by_layer[detection.layer] = by_layer.get(detection.layer, 0) + 1
            self._kept.append(detection)
            if detection.kind == "loop":
                key = pattern_key(detection)
                hits = self._hits
                hits[key] = hits.pop(key, 0) + 1  # re-insert: most recently seen last
                if len(hits) > MAX_PATTERNS:
                    del hits[next(iter(hits))]

    def _remember_skip(self, call: Call) -> None:
        """Keep a skipped call in the history, with the outcome the model already had for it.

        The model repeated the pattern and the guard answered: it learned nothing new. The record
        stands for the latest call with the same arguments (else the latest call of the same
        function, else a call of unknown outcome): its result, error, cost and features, so that
        every layer judges the next repeat as one more lap of the same loop. It is answered by the
        guard again and steps the ladder, instead of the pattern fading out of the window and the
        real tool running again. The run's counters (calls, errors, cost) are left alone: nothing
        ran. Called with the lock held.
        """
        model: CallRecord | None = None
        same = self._by_args.get(call.args_fp)
        if same:
            model = same[-1]
        else:
            for record in reversed(self._history):
                if record.fn == call.fn:
                    model = record
                    break
        record = new_record(
            fn=call.fn,
            index=call.index,
            args_fp=call.args_fp,
            result_fp=None if model is None else model.result_fp,
            error=None if model is None else model.error,
            cost=None if model is None else model.cost,
            start=self._now() - self._start,
            duration=0.0,
            features={} if model is None or model.in_flight else model.features,
        )
        self._append(record)

    def _grow(self, needed: int) -> None:
        self._capacity = needed
        self._history = deque(self._history, maxlen=needed)

    def _append(self, record: CallRecord) -> None:
        """Add ``record`` to the history and its argument index (the lock is held)."""
        history = self._history
        if len(history) == history.maxlen:
            self._evict()
        history.append(record)
        same = self._by_args.get(record.args_fp)
        if same is None:
            self._by_args[record.args_fp] = same = deque()
        same.append(record)

    def _evict(self) -> None:
        """Drop the oldest record's entry from the argument index: the full history is about to
        push it out (the lock is held)."""
        old = self._history[0]
        same = self._by_args.get(old.args_fp)
        if same is not None:
            if same and same[0] is old:
                same.popleft()
            else:
                try:
                    same.remove(old)
                except ValueError:
                    pass
            if not same:
                del self._by_args[old.args_fp]

    def _show_running(self) -> None:
        """Put an in-flight record in the history for each running call that has none yet: a call
        is being decided while they run (the lock is held). Its ``start`` is now, when the run
        first needs it, rather than when it began: a difference of one call's decision."""
        start = self._now() - self._start
        running = self._running
        for index, entry in running.items():
            if type(entry) is Call:
                record = new_record(entry.fn, index, entry.args_fp, None, None, None, start, None,
                                    IN_FLIGHT, entry.kind)
                running[index] = record
                self._append(record)
        self._unseen = 0

    def _in_flight(self, index: int) -> int:
        """Position in the history of call ``index``'s in-flight record, or -1 (the lock is held).

        Searched from the end: a call usually ends before the next one starts.
        """
        history = self._history
        for i in range(len(history) - 1, -1, -1):
            record = history[i]
            if record.index == index and record.features is IN_FLIGHT:
                return i
        return -1

    def _replace(self, i: int, record: CallRecord | None) -> None:
        """Put ``record`` in the place of the in-flight record at position ``i``, or drop it."""
        history = self._history
        old = history[i]
        same = self._by_args.get(old.args_fp)
        if same is not None:
            for j in range(len(same) - 1, -1, -1):
                if same[j] is old:
                    if record is None:
                        del same[j]
                    else:
                        same[j] = record
                    break
            if not same:
                del self._by_args[old.args_fp]
        if record is None:
            del history[i]
        else:
            history[i] = record

    def _ended(self, index: int) -> int:
        """Call ``index`` is no longer running: the position of its in-flight record in the
        history, or -1 if it has none there (the lock is held)."""
        entry = self._running.pop(index, None)
        if entry is None:
            return -1
        if type(entry) is Call:
            self._unseen -= 1
            return -1
        return self._in_flight(index)

    def _interrupted(
        self, plan: Plan, call: Call, decision: Decision, start: float, chunks: list[Any] | None
    ) -> None:
        """A call that went ahead and never completed: it leaves no record."""
        self._discard(call)
        self._deliver(CallInterrupted(self, plan, call, decision, start, chunks))

    def _completed(
        self,
        plan: Plan,
        call: Call,
        decision: Decision,
        record: CallRecord,
        result: Any,
        error: BaseException | None,
        stream: bool,
    ) -> None:
        """Book a completed call and publish it."""
        self._complete(record)
        if CallCompleted in self._subs or self._outbox:
            self._deliver(CallCompleted(self, plan, call, decision, record, result, error, stream))

    def _discard(self, call: Call) -> None:
        """A call that went ahead but never completed (interrupted): it leaves no record."""
        if self._store is not None:
            self._store.discard(self, call.index)
            return
        with self._lock:
            self._drop(call.index)

    def _drop(self, index: int) -> None:
        """Call ``index`` ended without a record (lock held); here or in another process."""
        i = self._ended(index)
        if i >= 0:
            self._replace(i, None)

    def _complete(self, record: CallRecord) -> None:
        if self._store is not None:
            self._store.complete(self, record)
            return
        with self._lock:
            self._book(record)

    def _book(self, record: CallRecord) -> None:
        """Book a completed call: history and counters (lock held). Here or, for a shared run,
        when another process's call completed."""
        running = self._running
        entry = running.pop(record.index, None)
        if entry is not None and type(entry) is Call:
            # The common case: no other call was decided while this one ran. Inlined.
            self._unseen -= 1
            history = self._history
            if len(history) == history.maxlen:
                self._evict()
            history.append(record)
            same = self._by_args.get(record.args_fp)
            if same is None:
                self._by_args[record.args_fp] = deque((record,))
            else:
                same.append(record)
        else:
            i = self._in_flight(record.index) if entry is not None else -1
            if i >= 0:
                self._replace(i, record)
            else:  # pushed out of the window while it ran, or the run was reset meanwhile
                self._append(record)
        if record.error is not None:
            self._errors += 1
            self._consecutive_errors += 1
        else:
            self._consecutive_errors = 0
        if record.cost:
            self._cost += record.cost

    def __repr__(self) -> str:
        state = "killed" if self._killed is not None else "open"
        return f"<Run {self.name or self.id} {state} calls={self._calls}>"


def _subscriber_failed(run: Run, subscriber: Subscriber, event: Event, exc: Exception) -> None:
    emit("error", "fuzeguard.subscriber_failed", run_id=run.id, run_name=run.name,
         event_type=type(event).__name__, subscriber=callable_name(subscriber),
         error=exception_text(exc),
         message="a subscriber of the run's events raised; the call goes on")


def _iteration_cap(value: int | None) -> int:
    """The iteration cap in force: the one set, or the built-in one."""
    from fuzeguard.layers.iterations import DEFAULT_CAP

    return DEFAULT_CAP if value is None else value


class LayerFailed(RuntimeError):
    """Raised to the guard when a layer failed and ``fail_closed`` refuses the call."""


_REFUSED = Decision("call", 0)  # marks a call refused under fail_closed inside ``_decide``


def _as_config(config: Any) -> Config:
    if config is None:
        return discovered_config()
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
    **settings: Any,
) -> Run:
    """Open a run: ``with fuzeguard.run("ticket-4711") as run: ...`` (or ``async with``).

    ``config`` is a ``Config``, a path to a TOML file, or a TOML-shaped dict; by default the
    discovered fuze.toml. Keyword settings (``max_calls=50``, ``trace="traces/"``) override it.
    ``store="redis://host:6379/0"`` shares the run with every process that opens a run of the
    same name on that store (``docs/workers.md``). ``parent`` is the run this one works for (a
    subagent's run): its calls and cost count toward the parent's budgets as well.
    """
    return Run(name, config=config, on_detect=on_detect, parent=parent, **settings)
