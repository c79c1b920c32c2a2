"""A run's state: its history, counters and escalation steps, and the bookkeeping that keeps them.

``RunState`` holds everything a run knows behind one lock, and the methods that decide about a
call from it (``_judge``), book a decision (``_count``) and a completed call (``_book``): one path
whether the run is this process's alone or shared through a store (``store/``), whose events are
booked by the same methods. Layers read it through the ``RunView`` members below. ``Run``
(``run.py``) is the user's handle around it: opening and closing, threads and tasks, events,
stats and controls.

A call that goes ahead is part of the run from the moment it starts: while it runs, every other
call decided in the run sees it in the history as an *in-flight* record whose result is unknown
(``result_fp`` None, ``features`` ``IN_FLIGHT``), so layers that count calls see concurrent calls
(``asyncio.gather``, threads, recursion) as they see sequential ones; its final record takes its
place when it ends. In-flight records are made lazily, when another call is decided while calls
are running: calls made one after another never need one, and pay only for a dict entry.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.judging.core import action_for, decide, pattern_key, settle
from fuzeguard._private.meaning.fastinit import new_call, new_decision, new_record
from fuzeguard._private.meaning.records import IN_FLIGHT, Call, CallRecord, Decision, Detection
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.events import CostAdded, Event, RunReset, TurnEnded
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs import budget, state
from fuzeguard._private.runs.ask import ACTION_OF
from fuzeguard._private.runs.exceptions import FuzeguardError
from fuzeguard._private.runs.forksafe import new_lock

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunHandle, StateHolder

MIN_HISTORY = 32
MAX_PATTERNS = 4096
MAX_KEPT_DETECTIONS = 100
MAX_NOTES = 32
_INF = budget.INF

_REFUSED = Decision("call", 0)  # marks a call refused under fail_closed (see ``_judge``)


class RunState:
    """A run's state and its bookkeeping (see the module docstring). Every ``_`` method that
    changes it is called with ``_lock`` held."""

    # The run's clock; None: time.monotonic. Replay's runs run on the trace's timestamps.
    _clock: Callable[[], float] | None = None
    # The store a shared run's state goes through (``Run``); None for a run of its own.
    _store: StateHolder | None = None

    def __init__(self, name: str | None, run_id: str, config: Config) -> None:
        self.name = name
        self.id = run_id
        self.config = config
        self._lock = new_lock()
        self._capacity = MIN_HISTORY
        # Events made while the lock was held, delivered once it is released (``Run._deliver``).
        self._outbox: list[Event] = []
        self.resets = 0
        # Layers that raised while judging a call: failures per layer name (see ``stats()``).
        self._layer_errors: dict[str, int] = {}
        self._layer_failures = 0
        self._unlogged: list[tuple[str, str, str]] = []
        # Notes for the model (budget warnings, a resume's note) until ``notes()`` takes them.
        self._notes: list[str] = []
        self._clear()

    def _clear(self) -> None:
        # Calls that went ahead and have not ended, by index: the ``Call`` until another call is
        # decided meanwhile, then the in-flight record put in the history for it. A reset
        # forgets them: one that ends later is recorded as a plain completed call.
        self._running: dict[int, Call | CallRecord] = {}
        self._unseen = 0  # how many of them are still a ``Call``
        self._history: deque[CallRecord] = deque(maxlen=self._capacity)
        self._by_args: dict[bytes, list[CallRecord]] = {}  # oldest first
        self._calls_by_fn: dict[str, int] = {}
        self._attempts = 0
        self._calls = 0
        self._skipped = 0
        self._errors = 0
        self._consecutive_errors = 0
        self._cost = 0.0
        # Tokens metered (``fuzeguard.metering``), and model cost counted toward the run but not
        # yet billed to a call's record (the next completed call takes it).
        self._tokens_in = 0
        self._tokens_out = 0
        self._unbilled = 0.0
        self._turn = 1
        self._turn_calls = 0
        self._start = self._now()
        self._killed: Detection | None = None
        self._killed_fp = b""
        # The arguments of the calls loops were killed at, kept by ``resume()``: repeating one
        # ends the run again at once (``_judge``). Empty unless the run was resumed.
        self._stopped: dict[bytes, Detection] = {}
        # Patterns a person let go on (``ask`` answered continue): the hits at which the ladder
        # asked, kept as their step, and the hits at which it asks again (the raised bar).
        self._bars: dict[Hashable, tuple[int, int]] = {}
        self._hits: dict[Hashable, int] = {}
        # The call and turn at which the model was last warned (a warning reached it), or 0;
        # for each pattern it was warned about (most recently warned last), the warnings given
        # (once per turn at most) and the turn of the latest.
        self._told_at = 0
        self._told_turn = 0
        self._warned: dict[Hashable, tuple[int, int]] = {}
        # Once turns are marked (``end_turn``), the turn in which each pattern last stepped its
        # ladder: the ladder steps once per model turn, so a batch of identical parallel calls
        # the model sent at once is one step, not one per call.
        self._turns_marked = False
        self._hit_turns: dict[Hashable, int] = {}
        self._detections = 0
        self._detections_by_layer: dict[str, int] = {}
        self._kept: deque[Detection] = deque(maxlen=MAX_KEPT_DETECTIONS)
        # warn_at: the thresholds ahead per budget, and the lowest of each (``budget.py``).
        self._budget_steps: budget.Steps = {}
        if self.config._values.get("warn_at"):  # off by default: no settings to resolve
            self._budget_steps = budget.arm(self.config.settings_for(None))
            self._set_warn()
        else:
            self._warn_calls = self._warn_turn = self._warn_cost = self._warn_time = _INF

    def _set_warn(self) -> None:
        steps = self._budget_steps
        self._warn_calls = budget.first(steps, "max_calls")
        self._warn_turn = budget.first(steps, "max_calls_per_turn")
        self._warn_cost = budget.first(steps, "max_cost")
        self._warn_time = budget.first(steps, "max_duration")

    def _budget_reached(self) -> None:
        """A counter reached a ``warn_at`` threshold (lock held): queue its warnings."""
        used = {"max_calls": float(self._calls), "max_calls_per_turn": float(self._turn_calls),
                "max_cost": self._cost, "max_duration": self.elapsed()}
        values = self.config.settings_for(None)
        for warning in budget.reached(cast("RunHandle", self), self._budget_steps, used, values):
            self._outbox.append(warning)
            self._note_for_model(warning.message)
        self._set_warn()

    def _note_for_model(self, text: str) -> None:
        notes = self._notes
        notes.append(text)
        if len(notes) > MAX_NOTES:
            del notes[0]

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
        self._outbox.append(RunReset(cast("RunHandle", self), self.resets))

    def _end_turn(self) -> None:
        """A new turn begins (lock held): here, or in another process sharing the run."""
        self._turn += 1
        self._turn_calls = 0
        if self.config._values.get("warn_at"):
            self._budget_steps.update(
                budget.arm(self.config.settings_for(None), ("max_calls_per_turn",))
            )
            self._set_warn()
        self._turns_marked = True
        self._outbox.append(TurnEnded(cast("RunHandle", self), self._turn))

    def _take_unbilled(self) -> float:
        """Model cost metered outside any call, for the record of the call completing now: it
        moves from the run's total into that record (``_book`` adds it back)."""
        with self._lock:
            amount, self._unbilled = self._unbilled, 0.0
            self._cost -= amount
        return amount

    def _spent(self, amount: float) -> None:
        """Cost counted toward this run outside its calls by a subagent's run (lock held)."""
        self._cost += amount
        if self._cost >= self._warn_cost:
            self._budget_reached()
        self._outbox.append(CostAdded(cast("RunHandle", self), amount))

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
                 message=f"the layer {name} failed while judging a call to {fn} (it raised, or "
                 "returned something other than a Detection or None); it is left out of "
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
        if not kind:
            kind = plan.kind_of(arguments) if plan.infer else plan.kind
        call = new_call(plan.name, self._attempts + 1, args_fp, arguments, kind)
        if self._stopped and args_fp in self._stopped:
            return call, self._stopped_again(call)
        if self._unseen:
            self._show_running()
        layers = plan.layers
        quiet = plan.quiet
        if quiet is not None:
            # The default layers that would let the call go ahead by their cheap exits, left out.
            left = quiet.left(self._history, self._by_args, self._calls_by_fn, self._errors, call)
            if left is not None:
                layers = left
        if not layers:
            return call, new_decision("call", call.index)
        observe = plan.observe or state.mode_override == "observe"
        failures = self._layer_failures
        decision = decide(self, call, layers, plan.ladder, self._hit_count,
                          early=plan.settings.early_warnings,
                          persist=plan.settings.persist_window, told=self._told,
                          observe=observe, on_error=self._layer_failed)
        if self._layer_failures != failures and plan.settings.fail_closed:
            return call, _REFUSED  # a layer could not judge the call: refuse it
        if decision.action == "ask":
            if self._bars:
                decision = self._under_bar(decision)
            if decision.action == "ask" and self._store is not None and not self._store.asks:
                # Judged under the locks of the runs above: no one can be asked there.
                decision = self._answered(decision, "kill")
        return call, decision

    def _under_bar(self, decision: Decision) -> Decision:
        """Questions about patterns a person let go on, below their raised bar, are warnings."""
        bars = self._bars
        detections = tuple(
            dataclasses.replace(d, action="warn")
            if d.action == "ask" and self._hits.get(pattern_key(d), 0) < bars.get(
                pattern_key(d), (0, 0))[1]
            else d
            for d in decision.detections
        )
        return settle(Decision(decision.action, decision.index, decision.detection, detections))

    def _answered(self, decision: Decision, answer: str, bars: bool = True) -> Decision:
        """The decision once ``ask`` answered (lock held): the asked detections take the
        answer's action. A continue keeps their patterns at the ladder's ``ask`` step and raises
        the bar: they are warned, and asked about again once detected more than twice as many
        times as when asked. ``bars=False``: the bars are raised when the decision is booked
        (a shared run's, by every process, from its event)."""
        action = ACTION_OF[answer]
        detections = []
        for d in decision.detections:
            if d.action == "ask":
                if answer == "continue" and bars:
                    self._raise_bar(d)
                d = dataclasses.replace(d, action=action)  # type: ignore[arg-type]
            detections.append(d)
        return settle(Decision(decision.action, decision.index, decision.detection,
                               tuple(detections)))

    def _raise_bar(self, detection: Detection) -> None:
        """A person let the pattern of ``detection`` go on (``ask`` answered "continue", lock
        held): it stays at its step, and is asked about again once detected more than twice as
        many times as now. Here, or in every process of a shared run (``store.events``)."""
        key = pattern_key(detection)
        hits = self._hits.get(key, 0)
        step = self._bars[key][0] if key in self._bars else hits
        self._bars[key] = (step, 2 * (hits + 1) + 1)

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
            if (
                self._calls >= self._warn_calls or self._turn_calls >= self._warn_turn
                or (self._warn_time != _INF and self._now() - self._start >= self._warn_time)
            ):
                self._budget_reached()
        elif action == "skip":
            self._skipped += 1
            self._remember_skip(call)
        else:
            self._killed = decision.detection
            self._killed_fp = call.args_fp

    def _stopped_again(self, call: Call) -> Decision:
        """A resumed run repeats the call a loop was killed at: it ends the run again."""
        before = self._stopped[call.args_fp]
        detection = dataclasses.replace(
            before, call_index=call.index, action="kill",
            message=f"This run was stopped at this same call before and resumed: {before.message}",
        )
        return Decision("kill", call.index, detection, (detection,))

    def _judge_flag(self, plan: Plan, call: Call, detection: Detection) -> Decision:
        if self._killed is not None:
            return Decision("kill", call.index, self._killed, ())
        observe = plan.observe or state.mode_override == "observe"
        # Made while the call is under way (a stream that repeats itself): no warning can reach
        # the model before it has finished, so on_loop applies at once.
        action = action_for(detection, plan.ladder, self._hit_count)
        detection = dataclasses.replace(
            detection, run_id=self.id, call_index=call.index, action=action
        )
        decision = Decision("call" if observe else action, call.index, detection, (detection,))
        if action == "ask" and self._bars and not observe:
            decision = self._under_bar(decision)
        return decision

    def _told(self, call: Call, persist: int) -> Callable[[Hashable], int]:
        """How often the model was told about a pattern before a loop of it detected now: the
        warnings about it that reached the model (given in an earlier turn), or as many as it
        takes when it was warned about anything in the last ``persist`` calls, in an earlier
        turn. A loop the model was told about persists after the model was told."""
        told = self._told_at
        marked = self._turns_marked
        turn = self._turn
        if (told and call.index - told <= persist
                and not (marked and self._told_turn == turn)):
            return _TOLD
        warned = self._warned

        def times(key: Hashable) -> int:
            count, last = warned.get(key, (0, 0))
            return count - 1 if count and marked and last == turn else count

        return times

    def _count_flag(self, decision: Decision) -> None:
        if not decision.detections:
            return
        self._note(decision)
        if decision.action == "kill":
            self._killed = decision.detection

    def _hit_count(self, key: Hashable) -> int:
        """Where a pattern is on the ladder: how often it was detected, or, for a pattern a
        person let go on, the ``ask`` step it stays at."""
        if self._bars:
            bar = self._bars.get(key)
            if bar is not None:
                return bar[0]
        hits = self._hits.get(key, 0)
        if hits and self._turns_marked and self._hit_turns.get(key) == self._turn:
            return hits - 1  # it stepped in this turn already: this detection takes that step
        return hits

    def _note(self, decision: Decision) -> None:
        if decision.action == "warn":
            turn = self._turn
            self._told_at, self._told_turn = decision.index, turn
            warned = self._warned
            for detection in decision.detections:
                if detection.kind == "warning":
                    key = pattern_key(detection)
                    count, last = warned.pop(key, (0, 0))
                    warned[key] = (count if last == turn and self._turns_marked else count + 1,
                                   turn)
                    if len(warned) > MAX_PATTERNS:
                        del warned[next(iter(warned))]
        for detection in decision.detections:
            self._detections += 1
            by_layer = self._detections_by_layer
            by_layer[detection.layer] = by_layer.get(detection.layer, 0) + 1
            self._kept.append(detection)
            if detection.kind == "loop":
                key = pattern_key(detection)
                if self._turns_marked:
                    turns = self._hit_turns
                    if turns.get(key) == self._turn:
                        continue  # this pattern already stepped its ladder in this turn
                    turns[key] = self._turn
                    if len(turns) > MAX_PATTERNS:
                        del turns[next(iter(turns))]
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
            kind=call.kind,  # a skipped search is a search: "other" with new arguments is news
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
            self._by_args[record.args_fp] = same = []
        same.append(record)

    def _evict(self) -> None:
        """Drop the oldest record's entry from the argument index: the full history is about to
        push it out (the lock is held)."""
        old = self._history[0]
        same = self._by_args.get(old.args_fp)
        if same is not None:
            if same and same[0] is old:
                del same[0]
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
            if record.index == index and record.in_flight:
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

    def _drop(self, index: int) -> None:
        """Call ``index`` ended without a record (lock held); here or in another process."""
        i = self._ended(index)
        if i >= 0:
            self._replace(i, None)

    def _book(self, record: CallRecord) -> None:
        """Book a completed call: history and counters (lock held). Here or, for a shared run,
        when another process's call completed."""
        running = self._running
        entry = running.pop(record.index, None)
        if entry is not None and type(entry) is Call:
            # The common case: no other call was decided while this one ran. Inlined.
            self._unseen -= 1
            history = self._history
            by_args = self._by_args
            if len(history) == history.maxlen:
                old = history[0]
                same = by_args.get(old.args_fp)
                if same is not None and len(same) == 1 and same[0] is old:
                    del by_args[old.args_fp]  # ``_evict`` when the oldest was its only call
                else:
                    self._evict()
            history.append(record)
            same = by_args.get(record.args_fp)
            if same is None:
                by_args[record.args_fp] = [record]
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
            if self._cost >= self._warn_cost:
                self._budget_reached()


def _told_enough(_: Hashable) -> int:
    return 1 << 30


_TOLD: Final = _told_enough
