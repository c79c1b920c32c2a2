"""A run shared by every process that opens it on one Redis server.

The run is a log of events (``events.py``) kept in Redis under two keys, ``fuzeguard:{NAME}:m``
(a hash: the log's sequence number, the start time, the run id, a snapshot, and the call and cost
counters a subagent's budget check reads) and ``fuzeguard:{NAME}:e`` (a list: the events after the
snapshot). Each process keeps a copy of the state, applied from the log.

A call is decided on the copy and committed by one Lua script, in one round trip, only if the log
has not moved since the copy was taken; if it has, the script returns the events the process
missed, the process applies them and decides again. So every decision is made on the state
every earlier decision left, exactly as in one process, whichever process makes it. A completed
call, cost, turn and reset are events too; the same script appends them and hands back anything
missed first.

Every script renews the keys' time to live (``store_ttl``). A snapshot is written every
``SNAPSHOT_EVERY`` events and the events before it are dropped, so the keys hold the windows the
layers read and not the run's whole past. The process that created the state deletes it when
it closes the run.

When Redis cannot be reached, errs, or does not answer within ``store_timeout``, the call is judged
on this process's copy and goes ahead (or, with ``fail_closed = true``, is refused); the outage is
logged once, counted in ``run.stats()``, and the changes made meanwhile are kept and written to the
log when Redis is back (a change whose commit timed out is written only if the log does not
already hold it). If Redis lost the run (restarted without persistence), this process's copy
becomes the run's state again.
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fuzeguard._private.log import emit
from fuzeguard._private.records import Call, CallRecord, Decision, Detection
from fuzeguard._private.runstate import _REFUSED
from fuzeguard._private.store import StoreUnavailable, codec, events
from fuzeguard._private.store.parent import limit_decision, parent_limit

if TYPE_CHECKING:
    from fuzeguard._private.plan import Plan
    from fuzeguard._private.run import Run

SNAPSHOT_EVERY = 64
MAX_EVENTS = 4096  # events kept however far behind the last snapshot is
RETRY_AFTER = 1.0  # seconds between attempts to reach a store that failed
MAX_CONFLICTS = 1000  # commits lost to other processes before a call is judged locally
LEASE_AFTER = 2  # commits lost in a row before a process asks for the run's lease
LEASE_MS = 20  # how long the lease holds at most (a holder that stalls loses it)
WAIT = 0.0002  # seconds between tries while another process holds the lease
MAX_WAITS = 5000

# KEYS: m, e of the run, then of each ancestor. ARGV: ttl (ms), max events, the writer (worker),
# "1" to take the run's lease if the commit loses, the lease (ms), then per key: expected seq,
# conditional ("1": only if the log is still at expected seq), event ("" for none), calls to
# count, cost to add (for subagents' budgets).
# Returns {status, seq, missed} where status 1 = committed, 0 = the log moved on (missed holds
# the events after expected; false when they are no longer kept), 2 = an ancestor's budget is
# used up (then also: ancestor position, "max_calls" or "max_cost", used, limit), 3 = the run
# is gone from Redis (deleted, expired, or Redis restarted without its data), 4 = another
# process holds the lease: try again in a moment.
# The lease keeps a process that keeps losing to the others from starving: once it holds it, no
# other process can write until its next commit (or the lease's end).
_COMMIT = """
local ttl, cap, me = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local n = #KEYS / 2
local function missed(m, e, expected, seq)
  local count = seq - expected
  if count <= 0 then return {} end
  if count > redis.call('LLEN', e) then return false end
  return redis.call('LRANGE', e, -count, -1)
end
if redis.call('HEXISTS', KEYS[1], 'seq') == 0 then return {3, 0, {}} end
local v = redis.call('HMGET', KEYS[1], 'seq', 'lease')
local seq = tonumber(v[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = false
if v[2] then
  local holder, deadline = string.match(v[2], '^(.*)|(%d+)$')
  if holder == me then
    mine = true
  elseif tonumber(deadline) > now then
    return {4, seq, {}}
  end
end
local expected = tonumber(ARGV[6])
if ARGV[7] == '1' and seq ~= expected then
  if ARGV[4] == '1' then
    redis.call('HSET', KEYS[1], 'lease', me .. '|' .. (now + tonumber(ARGV[5])))
  end
  return {0, seq, missed(KEYS[1], KEYS[2], expected, seq)}
end
for i = 2, n do
  local m = KEYS[2 * i - 1]
  local base = 6 + (i - 1) * 5
  if tonumber(ARGV[base + 3]) > 0 then
    local w = redis.call('HMGET', m, 'calls', 'cost', 'max_calls', 'max_cost')
    local calls, cost = tonumber(w[1] or '0'), tonumber(w[2] or '0')
    if w[3] and w[3] ~= '' and calls >= tonumber(w[3]) then
      return {2, seq, missed(KEYS[1], KEYS[2], expected, seq), i - 1, 'max_calls', tostring(calls), w[3]}
    end
    if w[4] and w[4] ~= '' and cost >= tonumber(w[4]) then
      return {2, seq, missed(KEYS[1], KEYS[2], expected, seq), i - 1, 'max_cost', tostring(cost), w[4]}
    end
  end
end
if v[2] then redis.call('HDEL', KEYS[1], 'lease') end
local out = {1, seq, missed(KEYS[1], KEYS[2], expected, seq)}
for i = 1, n do
  local m, e = KEYS[2 * i - 1], KEYS[2 * i]
  local base = 6 + (i - 1) * 5
  if ARGV[base + 2] ~= '' then
    local s = redis.call('HINCRBY', m, 'seq', 1)
    if i == 1 then out[2] = s end
    redis.call('RPUSH', e, ARGV[base + 2])
    if redis.call('LLEN', e) > cap then redis.call('LTRIM', e, -cap, -1) end
  end
  if tonumber(ARGV[base + 3]) ~= 0 then redis.call('HINCRBY', m, 'calls', ARGV[base + 3]) end
  if tonumber(ARGV[base + 4]) ~= 0 then redis.call('HINCRBYFLOAT', m, 'cost', ARGV[base + 4]) end
  redis.call('PEXPIRE', m, ttl)
  redis.call('PEXPIRE', e, ttl)
end
return out
"""

# KEYS: m, e. ARGV: ttl (ms), now (epoch seconds), run id, max_calls, max_cost, the seq the
# caller's copy is at (-1: none). Creates the run if it does not exist. Returns {created, seq,
# start, id, events after the caller's seq or false, snapshot seq, snapshot or false, events
# after the snapshot or false, calls, cost, fingerprint key}. ARGV[7]: the fingerprint key of
# a run created here (traces key fingerprints with it, so every process's traces match).
_LOAD = """
local m, e = KEYS[1], KEYS[2]
local created = 0
if redis.call('HEXISTS', m, 'seq') == 0 then
  redis.call('HSET', m, 'seq', 0, 'start', ARGV[2], 'id', ARGV[3], 'max_calls', ARGV[4],
             'max_cost', ARGV[5], 'snapseq', 0, 'fpkey', ARGV[7])
  redis.call('HSETNX', m, 'calls', 0)
  redis.call('HSETNX', m, 'cost', 0)
  redis.call('DEL', e)
  created = 1
end
redis.call('PEXPIRE', m, ARGV[1])
redis.call('PEXPIRE', e, ARGV[1])
local v = redis.call('HMGET', m, 'seq', 'start', 'id', 'snapseq', 'snap', 'calls', 'cost', 'fpkey')
local seq, snapseq = tonumber(v[1]), tonumber(v[4] or '0')
local len = redis.call('LLEN', e)
local function after(from)
  local count = seq - from
  if count <= 0 then return {} end
  if count > len then return false end
  return redis.call('LRANGE', e, -count, -1)
end
local mine = false
if tonumber(ARGV[6]) >= 0 then mine = after(tonumber(ARGV[6])) end
local fromsnap = false
if mine == false then fromsnap = after(snapseq) end
return {created, seq, v[2], v[3], mine, snapseq, v[5] or false, fromsnap, v[6], v[7], v[8] or ''}
"""

# KEYS: m, e. ARGV: seq, snapshot. Keeps the snapshot if it is newer and drops the events
# it covers.
_SNAPSHOT = """
local m, e = KEYS[1], KEYS[2]
local seq = tonumber(redis.call('HGET', m, 'seq') or '-1')
local at = tonumber(ARGV[1])
if seq < at or at <= tonumber(redis.call('HGET', m, 'snapseq') or '0') then return 0 end
redis.call('HSET', m, 'snapseq', at, 'snap', ARGV[2])
local keep = seq - at
if keep == 0 then redis.call('DEL', e) else redis.call('LTRIM', e, -keep, -1) end
return 1
"""

# KEYS: m, e. ARGV: ttl, seq, snapshot, calls, cost, start, id, max_calls, max_cost, fingerprint
# key. Makes a
# process's copy the run's state again after Redis lost it (only while the log is empty).
_SEED = """
local m, e = KEYS[1], KEYS[2]
if tonumber(redis.call('HGET', m, 'seq') or '0') ~= 0 then return 0 end
redis.call('HSET', m, 'seq', ARGV[2], 'snapseq', ARGV[2], 'snap', ARGV[3], 'calls', ARGV[4],
           'cost', ARGV[5], 'start', ARGV[6], 'id', ARGV[7], 'max_calls', ARGV[8],
           'max_cost', ARGV[9], 'fpkey', ARGV[10])
redis.call('DEL', e)
redis.call('PEXPIRE', m, ARGV[1])
return 1
"""

_numbers = itertools.count(1)  # this process's events, so that it can tell its own in the log
_clients: dict[tuple[str, float], Any] = {}
_clients_lock = threading.Lock()
_WORKER = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def worker_id() -> str:
    """This process, as traces name it: host, pid and a random tag (pids are reused)."""
    return _WORKER


def _refresh_worker() -> None:
    global _WORKER
    _WORKER = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
    with _clients_lock:
        _clients.clear()  # a forked child must not share its parent's sockets



os.register_at_fork(after_in_child=_refresh_worker)


def _client(url: str, timeout: float) -> Any:
    key = (url, timeout)
    client = _clients.get(key)
    if client is None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:  # pragma: no cover - the test extras install redis
            raise StoreUnavailable(
                "a run with store=\"redis://...\" needs the redis package: "
                "pip install 'fuzeguard[redis]'"
            ) from None
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = redis.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=timeout,
                    retry=Retry(NoBackoff(), 0), health_check_interval=0,
                )
                _clients[key] = client
    return client


@dataclass
class _Pending:
    """A change made while Redis was out of reach, to write to the log when it is back."""

    event: dict[str, Any]
    calls: int = 0
    cost: float = 0.0
    in_doubt: bool = False  # its commit timed out: Redis may have it already


@dataclass
class _Outage:
    snapshot: str  # the copy as it was when Redis was last reached
    seq: int
    pending: list[_Pending] = field(default_factory=list)


class RedisStore:
    """A shared run's state on Redis (see the module docstring)."""

    def __init__(self, run: Run, url: str, parent: Run | str | None) -> None:
        from fuzeguard._private.run import Run as RunClass
        from fuzeguard._private.validation import check_store_url

        try:
            check_store_url(url)
        except ValueError as exc:
            raise StoreUnavailable(f"store: {exc}") from None
        if not run.name:
            raise TypeError(
                "a shared run needs a name, the same in every process: "
                'fuzeguard.run("ticket-4711", store="redis://...")'
            )
        self.url = url
        values = run.config.settings_for(None)
        self.timeout: float = values["store_timeout"]
        self.ttl_ms = int(values["store_ttl"] * 1000)
        self.limits = ("" if values["max_calls"] is None else str(values["max_calls"]),
                       "" if values["max_cost"] is None else repr(float(values["max_cost"])))
        self.keys = [f"fuzeguard:{{{run.name}}}:m", f"fuzeguard:{{{run.name}}}:e"]
        self.ancestors: list[str] = []
        if parent is not None:
            if isinstance(parent, RunClass):
                store = parent._store
                if not isinstance(store, RedisStore) or store.url != url:
                    raise TypeError(
                        "a shared run's parent must be a run on the same store: open the parent "
                        f'with fuzeguard.run(name, store="{url}") or pass its name as parent='
                    )
                self.ancestors = [parent.name or "", *store.ancestors]
            else:
                self.ancestors = [str(parent)]
        for name in self.ancestors:
            self.keys += [f"fuzeguard:{{{name}}}:m", f"fuzeguard:{{{name}}}:e"]
        self.seq = -1  # where this process's copy is in the log; -1: not loaded yet
        self.created = False
        self.outage: _Outage | None = None
        self.retry_at = 0.0
        self.errors = 0
        self.outages = 0
        self.local_calls = 0
        self.fail_closed = False
        self.losses = 0  # commits lost to other processes in a row
        self.lease_ms = LEASE_MS
        # Traces key fingerprints with a secret of the run (``Run.public_fp``): one for every
        # process, created with the run's state in Redis.
        self.fp_key = run._fp_key.hex()
        self.worker = f"{worker_id()}/{os.urandom(2).hex()}"  # this process's hold on the run
        self._scripts: dict[str, Any] = {}

    # ------------------------------------------------------------------ Redis round trips

    def _script(self, source: str) -> Any:
        client = _client(self.url, self.timeout)
        script = self._scripts.get(source)
        if script is None or script.registered_client is not client:
            script = self._scripts[source] = client.register_script(source)
        return script

    def _next(self) -> int:
        return next(_numbers)

    def _load(self, run: Run) -> None:
        """Bring the copy up to the log (run lock held); creates the run on first use."""
        reply = self._script(_LOAD)(
            keys=self.keys[:2],
            args=[self.ttl_ms, repr(time.time()), run.id, *self.limits, self.seq, self.fp_key],
        )
        created, seq, start, run_id, mine, _snapseq, snap, fromsnap, calls, cost, key = reply
        if self.seq < 0:
            self.created = bool(created)
            run.id = run_id.decode()
            self._adopt_key(run, key)
            run._start = events.local_start(float(start))
        if _listed(mine) and self.seq >= 0:
            self._apply(run, mine)
        else:
            self._rebuild(run, snap, fromsnap, calls, cost)
        self.seq = int(seq)

    def _adopt_key(self, run: Run, key: bytes) -> None:
        """Key fingerprints in traces and logs with the run's shared secret."""
        if key:
            self.fp_key = key.decode()
            run._fp_key = bytes.fromhex(self.fp_key)

    def _rebuild(self, run: Run, snap: bytes | None, fromsnap: Any, calls: Any, cost: Any) -> None:
        start = run._start
        if snap:
            events.restore(run, snap.decode())
        else:
            run._clear()
            run.resets = 0
            run._start = start
        if _listed(fromsnap):
            self._apply(run, fromsnap)
        else:
            emit("warning", "fuzeguard.store_gap", run_id=run.id, run_name=run.name,
                 message="the store no longer holds every event since its last snapshot; this "
                 "process continues from the snapshot")
        # Calls and cost include what subagents counted toward this run: the store's counters
        # hold them even when their events are gone.
        run._calls = int(calls or 0)
        run._cost = float(cost or 0.0)

    def _apply(self, run: Run, raw_events: list[bytes]) -> None:
        for raw in raw_events:
            event = events.parse(raw)
            events.apply(run, event)

    def _commit(
        self, run: Run, event: dict[str, Any], conditional: bool, calls: int = 0, cost: float = 0.0,
        book: Callable[[], object] | None = None,
    ) -> list[Any]:
        """One round trip: append ``event`` (with its budget counts) unless, ``conditional``, the
        log moved on. Applies what was missed, then, once appended, ``event`` itself (``book``,
        or ``events.apply``)."""
        payload = codec.dumps(event)
        lease = "1" if conditional and self.losses >= LEASE_AFTER else "0"
        args: list[Any] = [self.ttl_ms, MAX_EVENTS, self.worker, lease, self.lease_ms,
                           self.seq, "1" if conditional else "0", payload, calls, repr(cost)]
        parent_event = ""
        if self.ancestors and (calls or cost):
            parent_event = codec.dumps(events.simple("p", self.worker, event["n"], calls=calls,
                                                     cost=cost))
        for _ in self.ancestors:
            args += [-1, "0", parent_event, calls, repr(cost)]
        script = self._script(_COMMIT)
        reply: list[Any] = script(keys=self.keys, args=args)
        waits = 0
        while reply[0] == 4:  # another process holds the lease for a moment
            waits += 1
            if waits > MAX_WAITS:
                raise TimeoutError("another process kept the run's lease")
            time.sleep(WAIT)
            reply = script(keys=self.keys, args=args)
        status, seq, missed = reply[0], int(reply[1]), reply[2]
        self.losses = self.losses + 1 if status == 0 else 0
        if status == 3:
            emit("warning", "fuzeguard.store_lost_run", run_id=run.id, run_name=run.name,
                 message="the run's state was gone from the store (deleted, expired, or the "
                 "server restarted without its data): this process's copy is written back")
            self._seed(run, self.seq)
            return self._commit(run, event, conditional, calls, cost, book)
        if not _listed(missed):
            self._load_after_gap(run)  # too far behind: from the snapshot (own event included)
            return reply
        self._apply(run, missed)
        self.seq = seq
        if status == 1:
            if book is None:
                events.apply(run, event)
            else:
                book()
        return reply

    def _load_after_gap(self, run: Run) -> None:
        reply = self._script(_LOAD)(
            keys=self.keys[:2],
            args=[self.ttl_ms, repr(time.time()), run.id, *self.limits, -1, self.fp_key],
        )
        _created, seq, _start, _id, _mine, _snapseq, snap, fromsnap, calls, cost, _key = reply
        self._rebuild(run, snap, fromsnap, calls, cost)
        self.seq = int(seq)

    def _snapshot(self, run: Run) -> None:
        if self.seq > 0 and self.seq % SNAPSHOT_EVERY == 0:
            self._script(_SNAPSHOT)(keys=self.keys[:2], args=[self.seq, events.snapshot(run)])

    # ------------------------------------------------------------------ outages

    def _reachable(self, run: Run) -> bool:
        """False while Redis is out and not yet due for another try (run lock held)."""
        if self.outage is None:
            if self.seq < 0:
                try:
                    self._load(run)
                except Exception as exc:
                    self._down(run, exc)
                    return False
            return True
        if time.monotonic() < self.retry_at:
            return False
        try:
            self._recover(run)
        except Exception as exc:
            self.errors += 1
            self.retry_at = time.monotonic() + RETRY_AFTER
            if not _is_redis_error(exc):
                emit("error", "fuzeguard.internal_error", phase="store", error=repr(exc))
            return False
        return True

    def _down(self, run: Run, exc: BaseException, pending: _Pending | None = None) -> None:
        self.errors += 1
        self.retry_at = time.monotonic() + RETRY_AFTER
        if self.outage is None:
            self.outages += 1
            self.outage = _Outage(events.snapshot(run), self.seq)
            emit(
                "warning", "fuzeguard.store_unavailable", run_id=run.id, run_name=run.name,
                store=_safe_url(self.url), error=repr(exc),
                message="the run's store cannot be reached: calls are judged in this process "
                "until it is back" + (" (fail_closed: calls are refused)" if self.fail_closed
                                      else ""),
            )
        if pending is not None:
            self.outage.pending.append(pending)

    def _recover(self, run: Run) -> None:
        outage = self.outage
        assert outage is not None
        local_now = events.snapshot(run)
        # Back to the copy as Redis last saw it, then the log since, then what happened here.
        events.restore(run, outage.snapshot)
        self.seq = outage.seq
        reply = self._script(_LOAD)(
            keys=self.keys[:2],
            args=[self.ttl_ms, repr(time.time()), run.id, *self.limits, max(self.seq, 0), self.fp_key],
        )
        created, seq, start, run_id, mine, _snapseq, snap, fromsnap, calls, cost, key = reply
        if outage.seq < 0:  # Redis was out from the start: now the run is loaded for the first time
            self.created = bool(created)
            run.id = run_id.decode()
            self._adopt_key(run, key)
            run._start = events.local_start(float(start))
        if outage.seq > 0 and int(seq) < outage.seq:
            # Redis lost the run (restarted without its data): this process's copy, with what
            # happened here meanwhile, is the run's state again.
            events.restore(run, local_now)
            self._seed(run, outage.seq + len(outage.pending))
        else:
            applied: set[Any] = set()
            if _listed(mine):
                for raw in mine:
                    event = events.parse(raw)
                    applied.add((event.get("w"), event.get("n")))
                    events.apply(run, event)
            else:
                self._rebuild(run, snap, fromsnap, calls, cost)
            self.seq = int(seq)
            for pending in outage.pending:
                event = pending.event
                if pending.in_doubt and (event.get("w"), event.get("n")) in applied:
                    continue
                self._commit(run, event, False, pending.calls, pending.cost)
        self.outage = None
        emit("info", "fuzeguard.store_recovered", run_id=run.id, run_name=run.name,
             store=_safe_url(self.url), written=len(outage.pending))

    def _seed(self, run: Run, seq: int) -> None:
        """Make this process's copy the run's state in Redis, at ``seq`` (run lock held)."""
        self._script(_SEED)(keys=self.keys[:2], args=[
            self.ttl_ms, max(seq, 1), events.snapshot(run), run._calls, repr(run._cost),
            repr(events.wall_of(run)), run.id, *self.limits, self.fp_key,
        ])
        self.seq = max(seq, 1)
        self.created = True

    def _refuse(self, run: Run) -> None:
        raise StoreUnavailable(
            f"the store of run {run.name} cannot be reached and fail_closed is on, so the call "
            "was not made"
        )

    # ------------------------------------------------------------------ the Store protocol

    def open(self, run: Run) -> None:
        with run._lock:
            self._reachable(run)

    def decide(
        self, run: Run, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        self.fail_closed = plan.settings.fail_closed
        with run._lock:
            conflicts = 0
            over: tuple[str, str, float, float] | None = None  # a parent's budget, used up
            while True:
                reachable = self._reachable(run)  # first: it may bring the copy up to date
                call, decision = run._judge(plan, args_fp, arguments, kind)
                if decision is _REFUSED or (decision.action == "kill" and not decision.detections):
                    return call, decision  # refused (failing layer, or killed): nothing to write
                if over is not None and decision.action in ("call", "warn"):
                    decision = limit_decision(plan, call, parent_limit(*over, call, run.id))
                counts = 1 if decision.action in ("call", "warn") else 0
                event = events.decided(self.worker, self._next(), call, decision)
                if not reachable:
                    return self._locally(run, plan, call, decision, event, counts, None)
                book = functools.partial(events.count, run, call, decision, event)
                try:
                    reply = self._commit(run, event, True, counts, book=book)
                except Exception as exc:
                    # The judgement stands: it was made on the state as last seen.
                    return self._locally(run, plan, call, decision, event, counts, exc)
                status = reply[0]
                if status == 1:
                    self._after_write(run)
                    return call, decision
                if status == 2:  # decided again, on the state the script handed back
                    over = (self.ancestors[int(reply[3]) - 1], reply[4].decode(),
                            float(reply[5]), float(reply[6]))
                    continue
                conflicts += 1
                if conflicts >= MAX_CONFLICTS:  # judged here, on the state as last seen
                    lost = TimeoutError(f"{conflicts} commits lost to other processes")
                    call, decision = run._judge(plan, args_fp, arguments, kind)
                    if decision is _REFUSED or (
                        decision.action == "kill" and not decision.detections
                    ):
                        return call, decision
                    counts = 1 if decision.action in ("call", "warn") else 0
                    event = events.decided(self.worker, self._next(), call, decision)
                    return self._locally(run, plan, call, decision, event, counts, lost)

    def _locally(
        self, run: Run, plan: Plan, call: Call, decision: Decision, event: dict[str, Any],
        counts: int, exc: BaseException | None,
    ) -> tuple[Call, Decision]:
        pending = _Pending(event, counts, 0.0, in_doubt=exc is not None and _in_doubt(exc))
        if exc is not None:
            self._down(run, exc, None)
        if self.fail_closed:
            self._refuse(run)
        assert self.outage is not None
        self.outage.pending.append(pending)
        self.local_calls += 1
        events.count(run, call, decision, event)
        return call, decision

    def _write(self, run: Run, event: dict[str, Any], calls: int = 0, cost: float = 0.0) -> None:
        """Append a change that needs no judgement (run lock held) and book it here."""
        if self._reachable(run):
            try:
                self._commit(run, event, False, calls, cost)
            except Exception as exc:
                self._down(run, exc, _Pending(event, calls, cost, in_doubt=_in_doubt(exc)))
            else:
                self._after_write(run)
                return
        else:
            assert self.outage is not None
            self.outage.pending.append(_Pending(event, calls, cost))
        events.apply(run, event)

    def _after_write(self, run: Run) -> None:
        try:
            self._snapshot(run)
        except Exception as exc:
            self._down(run, exc)

    def flag(self, run: Run, plan: Plan, call: Call, detection: Detection) -> Decision:
        with run._lock:
            decision = run._judge_flag(plan, call, detection)
            if decision.detections:
                self._write(run, events.flagged(self.worker, self._next(), decision))
            return decision

    def complete(self, run: Run, record: CallRecord) -> None:
        with run._lock:
            self._write(run, events.completed(self.worker, self._next(), record),
                        cost=record.cost or 0.0)

    def discard(self, run: Run, index: int) -> None:
        with run._lock:
            self._write(run, events.simple("x", self.worker, self._next(), i=index))

    def add_cost(self, run: Run, amount: float) -> None:
        with run._lock:
            self._write(run, events.simple("a", self.worker, self._next(), v=amount), cost=amount)

    def end_turn(self, run: Run) -> None:
        with run._lock:
            self._write(run, events.simple("e", self.worker, self._next()))

    def reset(self, run: Run) -> None:
        limit = run.config.settings_for(None)["max_resets"]
        with run._lock:
            for _ in range(MAX_CONFLICTS):
                reachable = self._reachable(run)  # first: it may bring the copy up to date
                if run.resets >= limit:
                    run._reset()  # raises the max_resets error
                event = events.simple("r", self.worker, self._next(), t=time.time())
                if not reachable:
                    break
                try:
                    reply = self._commit(run, event, True, -run._calls, -run._cost)
                except Exception as exc:
                    self._down(run, exc, _Pending(event, -run._calls, -run._cost,
                                                  in_doubt=_in_doubt(exc)))
                    events.apply(run, event)
                    return
                if reply[0] == 1:
                    return
            if self.outage is None:
                self._down(run, TimeoutError(f"{MAX_CONFLICTS} commits lost to other processes"))
            assert self.outage is not None
            self.outage.pending.append(_Pending(event, -run._calls, -run._cost))
            events.apply(run, event)

    def refresh(self, run: Run) -> None:
        with run._lock:
            if self.outage is None and self.seq >= 0:
                try:
                    self._load(run)
                except Exception as exc:
                    self._down(run, exc)
            else:
                self._reachable(run)

    def stats(self) -> dict[str, int]:
        return {"store_errors": self.errors, "store_outages": self.outages,
                "locally_judged": self.local_calls}

    def annotate(self, run: Run, line: dict[str, Any]) -> None:
        """Traces of a shared run name the process (``worker``) and give each line's moment as
        seconds since the epoch (``at``): ``fuze replay --merge`` orders every process's lines by
        it, across resets, which restart ``ts``."""
        line["worker"] = self.worker
        ts = line.get("ts")
        if isinstance(ts, float):
            line["at"] = events.wall_of(run) + ts

    def close(self, run: Run) -> None:
        with run._lock:
            if self.outage is not None:
                self._reachable(run)
            if self.created and self.outage is None:
                try:
                    _client(self.url, self.timeout).delete(*self.keys[:2])
                except Exception as exc:
                    self._down(run, exc)
            self.created = False
            self.seq = -1


def _listed(value: Any) -> bool:
    """A script's list of events (an empty one included), as opposed to false: not kept."""
    return isinstance(value, list)


def _is_redis_error(exc: BaseException) -> bool:
    import redis

    return isinstance(exc, (redis.RedisError, OSError))


def _in_doubt(exc: BaseException) -> bool:
    """True when a command may have reached Redis although no answer came back."""
    import redis

    return isinstance(exc, redis.TimeoutError)


def _safe_url(url: str) -> str:
    """The URL without a password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
