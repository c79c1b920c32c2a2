"""This process's copy of a shared run on Redis, and the round trips that keep it up to the log.

``Replica`` holds the copy's place in the log (its sequence number and epoch), the events of this
process not written yet, and what this process did since the run's last reset; its steps
(``drive.Steps``) load the run (``LOAD``), commit events to it (``COMMIT``) and write back what
is owed (``MERGE``), each applying what the other processes wrote meanwhile. ``outage.py``
builds on it what happens when Redis cannot be reached, ``redis.py`` the store itself (see its
docstring for the whole design).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

from fuzeguard._private.configuration.validation import masked_url
from fuzeguard._private.meaning.fingerprint import keyed
from fuzeguard._private.publish.log import emit
from fuzeguard._private.store import codec, events
from fuzeguard._private.store.clients import asyncio_script, client, next_number, worker_id
from fuzeguard._private.store.drive import ASK, Exchange, Steps, T
from fuzeguard._private.store.scripts import (
    APPEND,
    COMMIT,
    COMMITTED,
    LOAD,
    MERGE,
    MISSING,
    MOVED,
    NEW_EPOCH,
    Script,
    listed,
    run_keys,
)

if TYPE_CHECKING:
    from fuzeguard._private.protocols import RunInternals

SNAPSHOT_EVERY = 64
MAX_EVENTS = 4096  # events kept however far behind the last snapshot is


class Changed(Exception):
    """The run changed under a write-back (lost or ended again): the write-back is tried later."""


class Outage:
    """Redis out of reach: what this process does meanwhile, to write back when it is back."""

    def __init__(self, number: str, records: int) -> None:
        self.id = number
        self.tally = events.Tally(records)

    @property
    def pending(self) -> list[events.Tally]:
        """What waits to be written back: one sum, whatever the outage's length."""
        return [] if self.tally.empty() else [self.tally]


# Every copy of this process, so that a forked child becomes a new worker of each (``_forked``).
_replicas: weakref.WeakSet[Replica] = weakref.WeakSet()


def _fork_replicas() -> None:
    for replica in list(_replicas):
        replica._forked()


os.register_at_fork(after_in_child=_fork_replicas)


class Replica:
    """A shared run's copy in this process and its round trips (see the module docstring)."""

    def __init__(self, run: RunInternals, url: str, parent: RunInternals | str | None) -> None:
        from fuzeguard._private.runs.runstate import RunState as RunClass

        if not run.name:
            raise TypeError(
                "a shared run needs a name, the same in every process: "
                'fuzeguard.run("ticket-4711", store="redis://...")'
            )
        self.url = url
        values = run.config.settings_for(None)
        self.timeout: float = values["store_timeout"]
        self.ttl_ms = int(values["store_ttl"] * 1000)
        self.namespace: str | None = values["store_namespace"]
        self.limits = ("" if values["max_calls"] is None else str(values["max_calls"]),
                       "" if values["max_cost"] is None else repr(float(values["max_cost"])))
        self.keys = run_keys(run.name, self.namespace)
        self.ancestors: list[str] = []
        if parent is not None:
            if isinstance(parent, RunClass):
                store = parent._store
                if not isinstance(store, Replica) or store.url != url:
                    raise TypeError(
                        "a shared run's parent must be a run on the same store: open the parent "
                        f'with fuzeguard.run(name, store="{masked_url(url)}") or pass its name as '
                        "parent="
                    )
                self.ancestors = [parent.name or "", *store.ancestors]
                self.namespace = store.namespace
            else:
                self.ancestors = [str(parent)]
        self.chain = self.keys[:2]  # the run's hash and log, then each ancestor's
        for name in self.ancestors:
            self.chain += run_keys(name, self.namespace)[:2]
        self.seq = -1  # where this process's copy is in the log; -1: not loaded yet
        self.epoch = ""  # which life of the run the copy is of ("": not loaded yet)
        self.snapseq = 0  # the latest snapshot's place in the log, as last seen
        # Events of this process booked in the copy and not written yet: completions waiting for
        # the next commit, and the events of a commit whose answer never came.
        self.queue: list[dict[str, Any]] = []
        self.queue_cost = 0.0
        self.doubt: list[dict[str, Any]] = []
        self.encoded: events.Encoded = {}  # records as snapshots write them (``events.snapshot``)
        # A snapshot of the copy at a place in the log (place, text), made after a commit that
        # left the copy exactly as the log is there; sent with the next commit (``_commit``).
        self.snap: tuple[int, str] | None = None
        self.own = events.Tally(0)  # what this process did since the run's last reset
        self.owed: tuple[str, list[Any] | None] | None = None  # ``own``, to write back (``_owe``)
        self.outage: Outage | None = None  # Redis out of reach (``outage.py``)
        # Traces key fingerprints with a secret of the run (``Run.public_fp``): one for every
        # process, created with the run's state in Redis. Fingerprints written to Redis are keyed
        # with it too (``_key``).
        self.fp_key = run._fp_key
        self.worker = f"{worker_id()}/{os.urandom(2).hex()}"  # this process's hold on the run
        self._scripts: dict[str, Any] = {}
        # Per event loop: the lock that makes this process's asyncio decisions one at a time.
        self._locks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self.urgent = False  # a completion waits to be sent at once, by ``aflush``
        _replicas.add(self)

    def _forked(self) -> None:
        """In a child forked from this process: a new worker of the run, which would otherwise
        take its siblings' events for its own and skip them. What the parent has not written
        yet is the parent's to write; the child reloads the run at its first use."""
        self.worker = f"{worker_id()}/{os.urandom(2).hex()}"
        self.seq, self.snap = -1, None
        self.queue, self.queue_cost, self.doubt = [], 0.0, []
        self.own.clear()
        self.outage = self.owed = None
        self.urgent = False
        self._locks = {}

    def _script(self, source: str) -> Any:
        blocking = client(self.url, self.timeout)
        script = self._scripts.get(source)
        if script is None or script.registered_client is not blocking:
            script = self._scripts[source] = Script(blocking.register_script(source))
        return script

    def _drive(self, steps: Steps[T]) -> T:
        """Run ``steps`` with the blocking client (the run's lock held throughout, but while
        the ``ask`` callback is waited for: it may read the run, and other threads go on)."""
        exchange = Exchange(steps)
        for request in exchange:
            try:
                exchange.reply = (_asked(*request[1:]) if request[0] is ASK
                                  else self._script(request[0])(keys=request[1], args=request[2]))
            except Exception as exc:
                exchange.error = exc
        return exchange.result

    async def _adrive(self, run: RunInternals, steps: Steps[T]) -> T:
        """Run ``steps`` with the asyncio client: the run's lock is held while they judge and
        book, and released while a round trip is awaited."""
        exchange = Exchange(steps, run._lock)
        for request in exchange:
            try:
                exchange.reply = await (
                    asyncio.to_thread(request[1]._question, *request[2]) if request[0] is ASK
                    else asyncio_script(self.url, self.timeout, request[0])(
                        keys=request[1], args=request[2]))
            except BaseException as exc:  # a cancelled task too: its commit may be in doubt
                exchange.error = exc
        return exchange.result

    def _next(self) -> int:
        return next_number()

    def _key(self, fp: bytes) -> bytes:
        """A fingerprint as the shared run holds it: keyed with the run's secret, so that the
        store holds no fingerprint a guess at a (redacted) value can be checked against without
        the run's key."""
        return keyed(fp, self.fp_key)

    def _load(self, run: RunInternals) -> Steps[bool]:
        """Bring the copy up to the log (run lock held): creates the run on first use, reloads
        it from a new epoch, starts afresh after ``end()``. True when the copy was rebuilt from
        the snapshot: it no longer holds what this process did during an outage."""
        reply = yield (LOAD, self.keys, [
            self.ttl_ms, repr(time.time()), run.id, os.urandom(6).hex(), *self.limits, self.seq,
            self.fp_key.hex(), self.epoch, os.urandom(8).hex(), self.worker,
        ])
        (_created, seq, start, run_id, mine, snapseq, snap, fromsnap, calls, cost, key, epoch,
         ended, last) = reply
        epoch = epoch.decode()
        same = epoch == self.epoch
        if same:
            for event in self.doubt:  # a commit whose answer never came: did it get there?
                if event["n"] > int(last) and self.outage is not None:
                    self.outage.tally.fold(event)
        self.doubt = []
        self.snapseq = int(snapseq)
        if same and listed(mine):
            self._apply(run, mine, skip_own=True)
            self.seq = int(seq)
            yield from self._owe(run)
            return False
        if same:  # too far behind: from the snapshot; what waits to be written stays booked
            self._rebuild(run, snap, fromsnap, calls, cost)
            self.seq = int(seq)
            for event in self.queue:
                events.apply(run, event)
            yield from self._owe(run)
            return True
        lost = bool(self.epoch) and not ended
        # Never loaded before: the run was opened while Redis was out of reach, and what this
        # process did meanwhile is written back as after a loss.
        unseen = not self.epoch
        kill = (codec.detection_out(run._killed) if (lost or unseen) and run._killed is not None
                else None)
        if lost:
            emit("warning", "fuzeguard.store_lost_run", run_id=run.id, run_name=run.name,
                 message="the run's state was gone from the store (expired, or the server "
                 "restarted without its data): it goes on afresh, with what each process did "
                 "since its last reset written back")
        if lost or ended:
            self.queue, self.queue_cost = [], 0.0  # in ``own``, written back as sums
        if ended:
            self.own.clear()
        if self.outage is not None:
            self.outage.tally.clear()  # the write-back of a new epoch is ``own``
        run.id = run_id.decode()
        if key:
            self.fp_key = run._fp_key = bytes.fromhex(key.decode())
        self.epoch = epoch
        self._rebuild(run, snap, fromsnap, calls, cost, events.local_start(float(start)))
        self.seq = int(seq)
        self.owed = None
        if (lost or unseen) and (not self.own.empty() or kill is not None):
            self.owed = (f"{self.worker}:{epoch}", kill)
        yield from self._owe(run)
        return True

    def _owe(self, run: RunInternals) -> Steps[None]:
        """Write back what this process did since the run's last reset, owed to a run that Redis
        lost and started again; owed until written."""
        if self.owed is not None:
            number, kill = self.owed
            yield from self._merge(run, self.own, number, kill, mine=True)
            self.owed = None

    def _rebuild(
        self, run: RunInternals, snap: bytes | None, fromsnap: Any, calls: Any, cost: Any,
        start: float | None = None,
    ) -> None:
        self.snap = None  # of the copy before
        if snap:
            events.restore(run, snap.decode())
        else:
            run._clear()
            run.resets = 0
            if start is not None:
                run._start = start
        if listed(fromsnap):
            self._apply(run, fromsnap, skip_own=False)
        else:
            emit("warning", "fuzeguard.store_gap", run_id=run.id, run_name=run.name,
                 message="the store no longer holds every event since its last snapshot; this "
                 "process continues from the snapshot")
        # Calls and cost include what subagents counted toward this run: the store's counters
        # hold them even when their events are gone.
        run._calls = int(calls or 0)
        run._cost = float(cost or 0.0)

    def _apply(self, run: RunInternals, raw_events: bytes, skip_own: bool) -> int:
        """Book events from the log (a JSON array, as the scripts return them); ``skip_own``: not
        this process's own, already booked. Returns how many the log held."""
        found: list[dict[str, Any]] = json.loads(raw_events)
        for event in found:
            if skip_own and event.get("w") == self.worker:
                continue
            kind = event["k"]
            if kind == "r" or (kind == "o" and event.get("reset")):
                self.own.clear()
            events.apply(run, event, self.encoded)
        return len(found)

    def _commit(
        self, run: RunInternals, extra: list[dict[str, Any]], mode: str, calls: int = 0,
        cost: float = 0.0, retry: bool = True,
    ) -> Steps[list[Any]]:
        """One round trip: append the queued events and ``extra`` (with their budget counts) as
        ``mode`` allows (``EXACT``, ``RELAXED``, ``APPEND``). Applies what was missed; the caller
        books ``extra`` once it is appended."""
        sent = self.queue + extra
        total = cost + self.queue_cost
        at, snapshot = (0, "") if self.snap is None else self.snap
        last = sent[-1]["n"] if sent else 0
        args: list[Any] = [self.ttl_ms, MAX_EVENTS, self.worker, events.kill_change(sent),
                           self.epoch, self.seq, mode, calls, repr(total), snapshot, at, last,
                           len(sent), *map(codec.dumps, sent)]
        parent_event = ""
        if self.ancestors and (calls or total):
            parent_event = codec.dumps(events.simple("p", self.worker, last, calls=calls,
                                                     cost=total))
        for _ in self.ancestors:
            args += [parent_event, calls, repr(total)]
        try:
            reply: list[Any] = yield (COMMIT, self.chain, args)
        except BaseException:
            # Sent, with no answer: Redis may hold these events or not (``_load`` tells).
            self.doubt += sent
            self.queue, self.queue_cost = [], 0.0
            raise
        status, seq, missed = reply[0], int(reply[1]), reply[2]
        if status in (MISSING, NEW_EPOCH):
            if not retry:
                raise Changed("the run changed in the store again while it was reloaded")
            yield from self._load(run)  # the run is gone or new: reload it, then try again
            if mode != APPEND:  # judged again, on the run as it is now
                return [MOVED, self.seq, [], self.snapseq]
            return (yield from self._commit(run, extra, mode, calls, cost, retry=False))
        self.snapseq = max(self.snapseq, int(reply[3]))
        if self.snap is not None and (status == COMMITTED or self.snapseq >= self.snap[0]):
            self.snap = None  # taken, or another process's later one was
        queued = bool(self.queue)
        if status == COMMITTED:
            self.queue, self.queue_cost = [], 0.0
        if not listed(missed):
            yield from self._load(run)  # too far behind: from the snapshot (own events included)
            return reply
        moved = self._apply(run, missed, skip_own=True) > 0
        self.seq = seq
        if status == COMMITTED and (not moved or not queued):
            self._snapshot_due(run, seq, len(extra), len(sent))
        return reply

    def _snapshot_due(self, run: RunInternals, seq: int, extra: int, written: int) -> None:
        """After a commit of ``written`` events that brought the log to ``seq`` and left the copy
        exactly as the log is before the last ``extra`` of them (not booked yet), no event of this
        process booked ahead of the others' it just applied: make the snapshot of the log there
        if this commit's events crossed a multiple of
        ``SNAPSHOT_EVERY`` (one process per multiple, whichever wrote across it), or the latest
        snapshot is far behind. It travels with this process's next commit: a snapshot is made
        once per ``SNAPSHOT_EVERY`` events however many processes share the run, and none is
        made for a commit that another process's events would make useless."""
        at = seq - extra
        if seq // SNAPSHOT_EVERY > (seq - written) // SNAPSHOT_EVERY or (
                at - self.snapseq >= 4 * SNAPSHOT_EVERY):
            self.snap = (at, events.snapshot(run, self.encoded))

    def _merge(
        self, run: RunInternals, tally: events.Tally, number: str, kill: list[Any] | None, mine: bool
    ) -> Steps[None]:
        """Write ``tally`` back under ``number`` (one round trip, idempotent). ``mine``: the copy
        lacks it (rebuilt meanwhile), so the written event is booked here too."""
        reply = yield (MERGE, self.keys[:2], [
            self.ttl_ms, MAX_EVENTS, self.worker, self.epoch, number, tally.sums(),
            "" if kill is None else codec.dumps(kill),
            codec.dumps(list(tally.records)) if tally.records else "", self.seq, self._next(),
            "1" if mine else "0", codec.dumps(tally.bars) if tally.bars else "",
        ])
        status, seq, missed = reply[0], int(reply[1]), reply[2]
        if status != COMMITTED:
            raise Changed("the run changed in the store during a write-back")
        if listed(missed):
            self._apply(run, missed, skip_own=not mine)
            self.seq = seq
        else:
            self.seq = -2  # not a place in any log: the next ``_load`` rebuilds the copy
            yield from self._load(run)


def _asked(run: RunInternals, question: list[Any]) -> str:
    """The answer of ``run``'s ``ask`` callback to ``question`` (its call and decision), asked
    with the run's lock released: the callback may read the run, and other threads go on."""
    lock = run._lock
    lock.release()
    try:
        answer: str = run._question(*question)
    finally:
        lock.acquire()
    return answer
