"""A run shared by every process that opens it on one Redis server.

The run is a log of events (``events.py``) kept in Redis under three keys,
``fuzeguard:[NAMESPACE:]{NAME}:m`` (a hash: the log's sequence number, the run's *epoch*, its start
time and id, a snapshot, and the call and cost counters a subagent's budget check reads),
``...:e`` (a list: the events after the snapshot) and ``...:x`` (the epoch of a run ended with
``run.end()``). Each process keeps a copy of the state, applied from the log.

**One round trip per call.** A call is judged on the copy and committed by one Lua script. The
first try commits only if the log has not moved since the copy was taken (``EXACT``), so that a
process that did not lose decides on the state every earlier decision left, exactly as in one
process. If the log moved, the script returns the events the process missed; it applies them,
judges the call again on the copy now up to date, and commits whatever the log did meanwhile
(``RELAXED``), unless the run was killed or the call would go past the run's budgets, which the
script checks itself: budgets and kills stay exact however many processes share the run, and a
call takes two round trips at most unless it is refused or its process has to reload the run.
The completions of this process's earlier calls are not sent on their own: they wait in a short
queue (``MAX_QUEUED``) and travel in front of the next decision, in the same script (a completion
with a cost or an error is sent at once: the other processes judge their budgets by it). Every few
dozen events a commit also carries a snapshot of the state, and the events before it are dropped:
the snapshot is made by the one process whose commit wrote across a multiple of
``SNAPSHOT_EVERY``, of its copy just after that commit (exactly the log at that place), and sent
with its next commit.

**Lifetime.** Closing a run never deletes it: it lives until ``run.end()`` (or ``fuze end``) or
until ``store_ttl`` after its last activity (every script renews the keys' time to live).

**Outages** (Redis down, erroring, or slower than ``store_timeout``): the call is judged on this
process's copy, which goes on from where it is (never rolled back), and goes ahead (refused with
``fail_closed``). What this process does meanwhile is kept as sums (``events.Tally``: calls,
cost, errors, turns, a reset, its latest records, the kill), bounded whatever the outage's
length, and written back when Redis answers again by one script that applies only the part of
the sums it has not applied before: a write-back retried after a cut never counts twice. A
commit whose answer never came is resolved by the number of this process's last event Redis
holds. **When Redis lost the run** (restarted without its data, or expired), the first process to
reach it creates it afresh under a new epoch, with the same id; every process that finds a new
epoch reloads the run from it and writes back what it did itself since the run's last reset
(its calls and cost, and the kill it knew of). The loop history before the loss is not rebuilt.
A process whose very first read of the run failed (the store slow or down from the start) writes
back what it did before it could read it the same way.

The module holds the store as the run sees it (the ``Store`` protocol) and the judging of a call;
under it, ``outage.py`` handles Redis out of reach, ``replica.py`` keeps this process's copy up
to the log, ``scripts.py`` holds the Lua scripts and packs their calls, ``clients.py`` the
connections, and ``drive.py`` runs the same steps with the blocking or the asyncio client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from typing import TYPE_CHECKING, Any, ClassVar

from fuzeguard._private.meaning.records import Call, CallRecord, Decision, Detection
from fuzeguard._private.meaning.secrets import redactor, scrub_leaves
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.runstate import _REFUSED
from fuzeguard._private.store import backlog, events, replica
from fuzeguard._private.store.clients import per_loop
from fuzeguard._private.store.drive import ASK, Steps
from fuzeguard._private.store.outage import Outages
from fuzeguard._private.store.parent import limit_decision, parent_limit
from fuzeguard._private.store.scripts import (
    APPEND,
    COMMITTED,
    EXACT,
    OVER_BUDGET,
    RELAXED,
    end_run,
)

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals

MAX_CONFLICTS = 1000  # commits lost to other processes before a call is judged locally


class RedisStore(Outages):
    """A shared run's state on Redis (see the module docstring)."""

    asks: ClassVar[bool] = True  # ``_decide`` asks, waiting off the event loop in ``_adrive``

    def open(self, run: RunInternals) -> None:
        backlog.settle(self.keys)
        with run._lock:
            self._drive(self._reachable(run))

    async def aopen(self, run: RunInternals) -> None:
        if backlog.owed(self.keys):
            await asyncio.to_thread(backlog.settle, self.keys)
        await self._adrive(run, self._reachable(run))

    def decide(
        self, run: RunInternals, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        with run._lock:
            return self._drive(self._decide(run, plan, args_fp, arguments, kind))

    async def adecide(
        self, run: RunInternals, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        """``decide`` for a coroutine: its round trips are awaited on the asyncio client. This
        process's decisions in one event loop are made one at a time (each on the state the
        previous one left)."""
        async with self._turn():
            return await self._adrive(run, self._decide(run, plan, args_fp, arguments, kind))

    def _turn(self) -> asyncio.Lock:
        lock: asyncio.Lock = per_loop(self._locks, asyncio.Lock)
        return lock

    async def aflush(self, run: RunInternals, everything: bool = False) -> None:
        """Write what waits to be sent at once (a completion with a cost or an error), awaited;
        ``everything``: all that waits, and one more try during an outage (the run is left)."""
        if everything and (self.queue or self.outage is not None):
            self.retry_at = 0.0
            self.urgent = True
        if self.urgent:
            async with self._turn():
                await self._adrive(run, self._flush(run))

    def _decide(
        self, run: RunInternals, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None
    ) -> Steps[tuple[Call, Decision]]:
        """Judge a call on the copy and commit it: ``EXACT`` first, so that a process that did
        not lose judges on the state every earlier decision left; ``RELAXED`` once it lost (the
        copy was brought up to date by the lost round trip), so that a run many processes share
        never waits on a retry: its budgets and its kill stay exact, checked by the script."""
        self.fail_closed = plan.settings.fail_closed
        args_fp = self._key(args_fp)
        conflicts = 0
        over: Detection | None = None  # a budget (the run's, or a parent's), used up
        reply_given: str | None = None  # the ``ask`` callback's answer: asked once per call
        while True:
            reachable = yield from self._reachable(run)  # first: it may bring the copy up to date
            call, decision = run._judge(plan, args_fp, arguments, kind)
            if decision is _REFUSED or (decision.action == "kill" and not decision.detections):
                return call, decision  # refused (failing layer, or killed): nothing to write
            let_go: list[int] | None = None
            if decision.action == "ask":
                if reply_given is None:
                    reply_given = yield (ASK, run, [call, decision])
                    continue  # judged again: others may have changed the run meanwhile
                if reply_given == "continue":  # every process raises these patterns' bar
                    let_go = [i for i, d in enumerate(decision.detections) if d.action == "ask"]
                # The bars are raised when the decision is booked (``events.count``), on the
                # state the log holds then: not here, on a copy a lost commit may bring forward.
                decision = run._answered(decision, reply_given, bars=False)
            if over is not None and decision.action in ("call", "warn"):
                decision = limit_decision(plan, call, dataclasses.replace(
                    over, call_index=call.index))
            counts = 1 if decision.action in ("call", "warn") else 0
            event = events.decided(self.worker, self._next(), call, decision, let_go)
            if not reachable or conflicts >= MAX_CONFLICTS:
                return self._locally(run, call, decision, event, None)
            try:
                reply = yield from self._commit(run, [event], EXACT if conflicts == 0 else RELAXED,
                                                counts)
            except Exception as exc:
                # The judgement stands: it was made on the state as last seen.
                return self._locally(run, call, decision, event, exc)
            status = reply[0]
            if status == COMMITTED:
                if call.index != run._attempts + 1:  # others' calls came first (RELAXED)
                    call, decision = events.reindexed(call, decision, run._attempts + 1)
                self.own.fold(event)
                events.count(run, call, decision, event)
                return call, decision
            if status == OVER_BUDGET:  # decided again, on the state the script handed back
                position = int(reply[4])
                owner = run.name or run.id if position == 0 else self.ancestors[position - 1]
                over = parent_limit(owner, reply[5].decode(), float(reply[6]), float(reply[7]),
                                    call, run.id, own=position == 0)
            conflicts += 1

    def _locally(
        self, run: RunInternals, call: Call, decision: Decision, event: dict[str, Any],
        exc: BaseException | None,
    ) -> tuple[Call, Decision]:
        if exc is not None:
            self._down(run, exc)  # the event is in doubt: ``_load`` decides when Redis is back
        elif self.outage is None:  # judged here after too many commits lost to the others
            self._down(run, TimeoutError(f"{MAX_CONFLICTS} commits lost to other processes"))
        if self.fail_closed:
            self._refuse(run)
        assert self.outage is not None
        self.own.fold(event)
        if not any(sent is event for sent in self.doubt):  # else ``_load`` decides
            self.outage.tally.fold(event)
        self.local_calls += 1
        events.count(run, call, decision, event)
        return call, decision

    def _write(self, run: RunInternals, event: dict[str, Any], cost: float = 0.0) -> None:
        """Book and write at once a change that needs no judgement (run lock held)."""
        self._drive(self._reachable(run))  # first: it may bring the copy up to date
        events.apply(run, event)
        self._keep(run, event, cost, send=True)

    def flag(self, run: RunInternals, plan: Plan, call: Call, detection: Detection) -> Decision:
        with run._lock:
            decision = run._judge_flag(plan, call, detection)
            if decision.detections:
                self._write(run, events.flagged(self.worker, self._next(), decision))
            return decision

    def complete(self, run: RunInternals, record: CallRecord, plan: Plan, call: Call) -> None:
        if record.features:
            record = _redacted(record, plan, call)
        if record.cost is not None and not math.isfinite(record.cost):
            emit("error", "fuzeguard.cost_rejected", run_id=run.id, run_name=run.name,
                 fn=record.fn, cost=repr(record.cost),
                 message="a call's cost is not a finite number: a shared run cannot count it, "
                 "so the call is recorded without it; check the cost setting's function")
            record = dataclasses.replace(record, cost=None)
        if record.result_fp is not None:
            record = dataclasses.replace(record, result_fp=self._key(record.result_fp))
        event = events.completed(self.worker, self._next(), record)
        with run._lock:
            self.encoded[id(record)] = (record, event["r"])
            if len(self.encoded) > 4 * run._capacity + replica.SNAPSHOT_EVERY:
                self.encoded = {id(r): e for r in run._history
                                if (e := self.encoded.get(id(r))) is not None and e[0] is r}
            run._book(record)
            # Cost and errors are budgets the other processes judge by: sent at once.
            self._keep(run, event, record.cost or 0.0,
                       send=bool(record.cost) or record.error is not None)

    def discard(self, run: RunInternals, index: int) -> None:
        event = events.simple("x", self.worker, self._next(), i=index)
        with run._lock:
            run._drop(index)
            self._keep(run, event, 0.0, send=True)

    def add_cost(self, run: RunInternals, amount: float) -> None:
        if not math.isfinite(amount):
            raise TypeError(f"add_cost() takes a finite number, got {amount!r}")
        with run._lock:
            self._write(run, events.simple("a", self.worker, self._next(), v=amount), amount)

    def end_turn(self, run: RunInternals) -> None:
        with run._lock:
            self._write(run, events.simple("e", self.worker, self._next()))

    def reset(self, run: RunInternals) -> None:
        limit = run.config.settings_for(None)["max_resets"]
        with run._lock:
            for _ in range(MAX_CONFLICTS):
                reachable = self._drive(self._reachable(run))  # first: the copy up to date
                if run.resets >= limit:
                    run._reset()  # raises the max_resets error
                event = events.simple("r", self.worker, self._next(), t=time.time())
                if not reachable:
                    break
                try:
                    reply = self._drive(
                        self._commit(run, [event], EXACT, -run._calls, -run._cost)
                    )
                except Exception as exc:
                    self._down(run, exc)
                    break
                if reply[0] == COMMITTED:
                    self.own.fold(event)
                    events.apply(run, event)
                    return
            if self.outage is None:
                self._down(run, TimeoutError(f"{MAX_CONFLICTS} commits lost to other processes"))
            assert self.outage is not None
            if not any(sent is event for sent in self.doubt):
                self.outage.tally.fold(event)
            self.own.fold(event)
            events.apply(run, event)

    def refresh(self, run: RunInternals) -> None:
        with run._lock:
            if self.outage is None and self.seq >= 0:
                try:
                    if self.queue:
                        self._drive(self._commit(run, [], APPEND))
                    else:
                        self._drive(self._load(run))
                except Exception as exc:
                    self._down(run, exc)
            else:
                self.retry_at = 0.0  # whoever reads the stats wants the run as it is: try now
                self._drive(self._reachable(run))

    def stats(self) -> dict[str, int]:
        return {"store_errors": self.errors, "store_outages": self.outages,
                "locally_judged": self.local_calls}

    def annotate(self, run: RunInternals, line: dict[str, Any]) -> None:
        """Traces of a shared run name the process (``worker``) and give each line's moment as
        seconds since the epoch (``at``): ``fuze replay --merge`` orders every process's lines by
        it, across resets, which restart ``ts``."""
        line["worker"] = self.worker
        ts = line.get("ts")
        if isinstance(ts, float):
            line["at"] = events.wall_of(run) + ts

    def close(self, run: RunInternals) -> None:
        """Write what waits to be written (during an outage: one more try, whenever the last
        was); the run stays in Redis for the other processes."""
        if not self.write_back(run):
            backlog.keep(self, run)

    def write_back(self, run: RunInternals) -> bool:
        """One more try (now, whenever the last was) at writing what waits to be written; True
        once nothing this process did is owed to the store."""
        with run._lock:
            self.retry_at = 0.0
            self._drive(self._flush(run))
            outage = self.outage
            return outage is None or (outage.tally.empty() and not self.doubt)

    def owed_summary(self) -> dict[str, Any]:
        """What this process did that the store does not hold, for the logs."""
        tally = self.outage.tally if self.outage is not None else events.Tally(0)
        return {"calls": tally.calls, "cost": tally.cost, "killed": tally.kill is not None,
                "in_doubt": len(self.doubt)}

    def end(self, run: RunInternals) -> None:
        """Delete the run from Redis for good; this copy starts afresh if used again."""
        with run._lock:
            self._drive(self._flush(run))
            end_run(self.url, self.namespace, run.name or "", self.ttl_ms / 1000, self.timeout)
            self.seq, self.epoch, self.snapseq, self.snap = -1, "", 0, None
            self.queue, self.queue_cost, self.doubt = [], 0.0, []
            self.own.clear()
            self.outage = self.owed = None
            run._clear()
            run.resets = 0
            run.id = os.urandom(6).hex()


def _redacted(record: CallRecord, plan: Plan, call: Call) -> CallRecord:
    """``record`` with its features redacted as a trace line of the call is (its secret-named
    argument values, and secret shapes): what the layers keep of a call's arguments (dedup's
    text of a failed attempt) or result is written to Redis. This process books it so too, so
    that every process holds the same record."""
    values = redactor(plan.settings.redact).secret_values(call.arguments,
                                                          unnamed=plan.binder.unnamed)
    features = record.features
    scrubbed = {name: scrub_leaves(value, values) for name, value in features.items()}
    if all(scrubbed[name] is value for name, value in features.items()):
        return record
    return dataclasses.replace(record, features=scrubbed)
