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
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import os
import socket
import time
import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar

from fuzeguard._private.configuration.validation import masked_url
from fuzeguard._private.meaning.fingerprint import keyed
from fuzeguard._private.meaning.records import Call, CallRecord, Decision, Detection
from fuzeguard._private.meaning.secrets import redactor, scrub_leaves
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.exceptions import StoreUnavailable
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.runstate import _REFUSED
from fuzeguard._private.store import backlog, codec, events
from fuzeguard._private.store.parent import limit_decision, parent_limit

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals as Run

SNAPSHOT_EVERY = 64
MAX_EVENTS = 4096  # events kept however far behind the last snapshot is
MAX_QUEUED = 32  # completions that wait for the next commit before they are sent on their own
RETRY_FIRST = 0.05  # seconds before the first new attempt to reach a store that failed...
RETRY_AFTER = 1.0  # ... doubling up to this
MAX_CONFLICTS = 1000  # commits lost to other processes before a call is judged locally

T = TypeVar("T")
# The store's work, written once for both clients: a generator that yields each round trip it
# needs, (script, keys, args), and is sent the reply (or thrown the error). ``_drive`` runs it
# with the blocking client, ``_adrive`` with the asyncio one. (ASK, run, [call, decision]) asks the
# run's ``ask`` callback instead, and is sent its answer: ``_adrive`` waits for it off the loop.
Steps: TypeAlias = Generator[tuple[Any, Any, list[Any]], Any, T]

# Statuses of the scripts' replies.
COMMITTED, MOVED, OVER_BUDGET, MISSING, NEW_EPOCH = 1, 0, 2, 3, 5
ASK = "ask"
# How a commit treats a log that moved on since the writer's copy: EXACT appends only if it did
# not (the decision was made on the state every earlier decision left); RELAXED appends anyway
# unless the run was killed or the call would go past the run's own budget (a decision made again
# after losing once: it was made on a copy at most one round trip old); APPEND always appends
# (completions, turns and costs, which need no judgement).
EXACT, RELAXED, APPEND = "1", "2", "0"

_MISSED = """
local function missed(e, expected, seq)
  local count = seq - expected
  if count <= 0 then return '[]' end
  if count > redis.call('LLEN', e) then return false end
  return '[' .. table.concat(redis.call('LRANGE', e, -count, -1), ',') .. ']'
end
local function trim(e, cap)
  if redis.call('LLEN', e) > cap then redis.call('LTRIM', e, -cap, -1) end
end
"""

# KEYS: m, e of the run, then of each ancestor. ARGV: 1 ttl (ms), 2 max events, 3 the writer,
# 4 the kill: "1" the events kill the run, "0" they reset it, "" neither, 5 the epoch the writer's
# copy is of, 6 the seq it is at, 7 the mode (EXACT, RELAXED or APPEND), 8 calls and 9 cost to add
# to the run's counters, 10 a snapshot ("" none) of the log at seq 11 (taken if it is later than
# the run's and every event after it is kept, whatever else moved the log), 12 the number of the
# writer's last event, 13 k, then k events; then per ancestor: event ("" none), calls, cost.
# Returns {status, seq, missed, snapshot seq} where missed holds the events after the writer's
# seq (false when they are no longer kept); status OVER_BUDGET adds the budget's owner (0: the
# run, i > 0: its i-th ancestor), "max_calls" or "max_cost", used, limit. The scripts return a
# list of events as one JSON array (``missed``): read in one ``json.loads``.
_COMMIT = _MISSED + """
local ttl, cap, me = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local n = #KEYS / 2
local function over(m)
  local w = redis.call('HMGET', m, 'calls', 'cost', 'max_calls', 'max_cost')
  local calls, cost = tonumber(w[1] or '0'), tonumber(w[2] or '0')
  if w[3] and w[3] ~= '' and calls >= tonumber(w[3]) then
    return {'max_calls', tostring(calls), w[3]}
  end
  if w[4] and w[4] ~= '' and cost >= tonumber(w[4]) then
    return {'max_cost', tostring(cost), w[4]}
  end
  return false
end
local v = redis.call('HMGET', KEYS[1], 'seq', 'killed', 'epoch', 'snapseq')
if not v[3] then return {3, 0, {}, 0} end
if v[3] ~= ARGV[5] then return {5, 0, {}, 0} end
local seq, snapseq = tonumber(v[1]), tonumber(v[4] or '0')
local expected, mode = tonumber(ARGV[6]), ARGV[7]
local moved = seq ~= expected
local gap = missed(KEYS[2], expected, seq)
if moved and mode == '1' then return {0, seq, gap, snapseq} end
local k = tonumber(ARGV[13])
local base = 13 + k
if moved and mode == '2' then
  -- not when the writer cannot catch up from the events returned (it reloads and judges again)
  if gap == false then return {0, seq, gap, snapseq} end
  if tonumber(ARGV[8]) > 0 then
    if v[2] then return {0, seq, gap, snapseq} end
    local o = over(KEYS[1])
    if o then return {2, seq, gap, snapseq, 0, o[1], o[2], o[3]} end
  end
end
for i = 2, n do
  local b = base + (i - 2) * 3
  if tonumber(ARGV[b + 2]) > 0 then
    local o = over(KEYS[2 * i - 1])
    if o then return {2, seq, gap, snapseq, i - 1, o[1], o[2], o[3]} end
  end
end
local out = {1, seq, gap, snapseq}
local m, e = KEYS[1], KEYS[2]
if k > 0 then
  seq = redis.call('HINCRBY', m, 'seq', k)
  redis.call('RPUSH', e, unpack(ARGV, 14, 13 + k))
  redis.call('HSET', m, 'w:' .. me, ARGV[12])
  out[2] = seq
end
if ARGV[4] == '1' then redis.call('HSET', m, 'killed', '1') end
if ARGV[4] == '0' then redis.call('HDEL', m, 'killed') end
local at = tonumber(ARGV[11])
if ARGV[10] ~= '' and at > snapseq and at <= seq and seq - at <= cap
    and redis.call('LLEN', e) >= seq - at then
  redis.call('HSET', m, 'snapseq', at, 'snap', ARGV[10])
  if seq == at then redis.call('DEL', e) else redis.call('LTRIM', e, at - seq, -1) end
  out[4] = at
end
trim(e, cap)
if tonumber(ARGV[8]) ~= 0 then redis.call('HINCRBY', m, 'calls', ARGV[8]) end
if tonumber(ARGV[9]) ~= 0 then redis.call('HINCRBYFLOAT', m, 'cost', ARGV[9]) end
redis.call('PEXPIRE', m, ttl)
redis.call('PEXPIRE', e, ttl)
for i = 2, n do
  local am, ae = KEYS[2 * i - 1], KEYS[2 * i]
  local b = base + (i - 2) * 3
  if ARGV[b + 1] ~= '' then
    redis.call('HINCRBY', am, 'seq', 1)
    redis.call('RPUSH', ae, ARGV[b + 1])
    trim(ae, cap)
  end
  if tonumber(ARGV[b + 2]) ~= 0 then redis.call('HINCRBY', am, 'calls', ARGV[b + 2]) end
  if tonumber(ARGV[b + 3]) ~= 0 then redis.call('HINCRBYFLOAT', am, 'cost', ARGV[b + 3]) end
  redis.call('PEXPIRE', am, ttl)
  redis.call('PEXPIRE', ae, ttl)
end
return out
"""

# KEYS: m, e, x. ARGV: 1 ttl (ms), 2 now (epoch seconds), 3 the run's id, 4 a fresh id, 5
# max_calls, 6 max_cost, 7 the seq the caller's copy is at (-1: none), 8 the fingerprint key,
# 9 the epoch of the caller's copy ("": none), 10 a new epoch, 11 the writer.
# Creates the run if it does not exist (with the caller's id, or the fresh one when the caller's
# run was ended). Returns {created, seq, start, id, events after the caller's seq (false: not
# kept, or another epoch), snapshot seq, snapshot or false, events after the snapshot or false,
# calls, cost, fingerprint key, epoch, ended (the caller's run was ended), the number of the
# writer's last event}.
_LOAD = _MISSED + """
local m, e, x = KEYS[1], KEYS[2], KEYS[3]
local created, ended = 0, 0
if ARGV[9] ~= '' and redis.call('GET', x) == ARGV[9] then ended = 1 end
if redis.call('HEXISTS', m, 'epoch') == 0 then
  local id = ARGV[3]
  if ended == 1 then id = ARGV[4] end
  redis.call('HSET', m, 'seq', 0, 'start', ARGV[2], 'id', id, 'max_calls', ARGV[5],
             'max_cost', ARGV[6], 'snapseq', 0, 'fpkey', ARGV[8], 'epoch', ARGV[10])
  redis.call('HDEL', m, 'snap')
  redis.call('HSETNX', m, 'calls', 0)
  redis.call('HSETNX', m, 'cost', 0)
  redis.call('DEL', e)
  created = 1
end
redis.call('PEXPIRE', m, ARGV[1])
redis.call('PEXPIRE', e, ARGV[1])
local v = redis.call('HMGET', m, 'seq', 'start', 'id', 'snapseq', 'snap', 'calls', 'cost', 'fpkey',
                     'epoch', 'w:' .. ARGV[11])
local seq, snapseq = tonumber(v[1]), tonumber(v[4] or '0')
local mine = false
if v[9] == ARGV[9] and tonumber(ARGV[7]) >= 0 then mine = missed(e, tonumber(ARGV[7]), seq) end
local fromsnap = false
if mine == false then fromsnap = missed(e, snapseq, seq) end
return {created, seq, v[2], v[3], mine, snapseq, v[5] or false, fromsnap, v[6], v[7], v[8] or '',
        v[9], ended, v[10] or '0'}
"""

# KEYS: m, e. ARGV: 1 ttl (ms), 2 max events, 3 the writer, 4 its epoch, 5 the write-back's id,
# 6 its sums (``Tally.sums``), 7 the kill ("" none), 8 the latest records ("" none), 9 the seq
# the writer's copy is at, 10 the number of this event, 11 "1" to return the written event too,
# 12 the detections a person let go on ("" none).
# Appends, as one ``o`` event, the part of the sums not appended under this id before (the
# kill, the records and the bars only the first time), and keeps the sums under the id: written
# twice, it counts once. Returns {status, seq, events after the writer's seq}.
_MERGE = _MISSED + """
local m, e = KEYS[1], KEYS[2]
local v = redis.call('HMGET', m, 'seq', 'epoch', 'o:' .. ARGV[5])
if not v[2] then return {3, 0, {}} end
if v[2] ~= ARGV[4] then return {5, 0, {}} end
local seq = tonumber(v[1])
local new = cjson.decode(ARGV[6])
local zero = {calls = 0, attempts = 0, errors = 0, turns = 0, cost = '0', fns = {}, reset = false,
              t = 0, killed = false}
local old = zero
if v[3] then old = cjson.decode(v[3]) end
local ev = {k = 'o', w = ARGV[3], n = tonumber(ARGV[10]), id = ARGV[5]}
local any = false
if new.reset and (not old.reset or old.t ~= new.t) then
  ev.reset = true
  ev.t = new.t
  any = true
  zero.killed = old.killed
  old = zero
end
for _, f in ipairs({'calls', 'attempts', 'errors', 'turns'}) do
  local d = new[f] - (old[f] or 0)
  if d ~= 0 then ev[f] = d; any = true end
end
local dcost = tonumber(new.cost) - tonumber(old.cost or '0')
if dcost ~= 0 then ev.cost = string.format('%.17g', dcost); any = true end
local fns, has = {}, false
for fn, c in pairs(new.fns) do
  local d = c - ((old.fns or {})[fn] or 0)
  if d ~= 0 then fns[fn] = d; has = true end
end
if has then ev.fns = fns; any = true end
new.killed = old.killed
if ARGV[7] ~= '' and not old.killed then ev.kill = ARGV[7]; new.killed = true; any = true end
if ARGV[8] ~= '' and not v[3] then ev.records = ARGV[8]; any = true end
if ARGV[12] ~= '' and not v[3] then ev.bars = ARGV[12]; any = true end
local expected, before = tonumber(ARGV[9]), seq
if any then
  seq = redis.call('HINCRBY', m, 'seq', 1)
  redis.call('RPUSH', e, cjson.encode(ev))
  trim(e, tonumber(ARGV[2]))
  if ev.reset then redis.call('HDEL', m, 'killed') end
  if ev.kill then redis.call('HSET', m, 'killed', '1') end
  if ev.reset then
    redis.call('HSET', m, 'calls', new.calls, 'cost', new.cost)
  else
    if ev.calls then redis.call('HINCRBY', m, 'calls', ev.calls) end
    if ev.cost then redis.call('HINCRBYFLOAT', m, 'cost', ev.cost) end
  end
end
redis.call('HSET', m, 'o:' .. ARGV[5], cjson.encode(new), 'w:' .. ARGV[3], ARGV[10])
redis.call('PEXPIRE', m, ARGV[1])
redis.call('PEXPIRE', e, ARGV[1])
local upto = before
if ARGV[11] == '1' then upto = seq end
return {1, seq, missed(e, expected, upto)}
"""

# KEYS: m, e, x. ARGV: ttl (ms). Deletes the run and remembers its epoch as ended, so that a
# process still holding a copy of it starts afresh instead of writing it back.
_END = """
local epoch = redis.call('HGET', KEYS[1], 'epoch')
redis.call('DEL', KEYS[1], KEYS[2])
if epoch then redis.call('SET', KEYS[3], epoch, 'PX', ARGV[1]) return 1 end
return 0
"""

_numbers = itertools.count(1)  # this process's events, so that Redis can tell which it holds
_clients: dict[tuple[str, float], Any] = {}
_clients_lock = new_lock()
_WORKER = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def worker_id() -> str:
    """This process, as traces name it: host, pid and a random tag (pids are reused)."""
    return _WORKER


def _refresh_worker() -> None:
    global _WORKER
    _WORKER = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
    with _clients_lock:
        _clients.clear()  # a forked child must not share its parent's sockets
    _aclients.clear()


os.register_at_fork(after_in_child=_refresh_worker)

# Every store of this process, so that a forked child becomes a new worker of each (``_forked``).
_stores: weakref.WeakSet[RedisStore] = weakref.WeakSet()


def _fork_stores() -> None:
    for store in list(_stores):
        store._forked()


os.register_at_fork(after_in_child=_fork_stores)


def _client(url: str, timeout: float) -> Any:
    key = (url, timeout)
    client = _clients.get(key)
    if client is None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = redis.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=timeout,
                    retry=Retry(NoBackoff(), 0), health_check_interval=0,
                )
                _clients[key] = client
    return client


_aclients: dict[int, tuple[asyncio.AbstractEventLoop, dict[Any, Any]]] = {}


def _per_loop(table: dict[int, tuple[asyncio.AbstractEventLoop, Any]], make: Any) -> Any:
    """``table``'s entry for the running event loop, made by ``make()`` the first time; the
    entries of loops that were closed meanwhile are dropped."""
    loop = asyncio.get_running_loop()
    entry = table.get(id(loop))
    if entry is None or entry[0] is not loop:
        for key, (other, _value) in list(table.items()):
            if other.is_closed():
                del table[key]
        entry = table[id(loop)] = (loop, make())
    return entry[1]


def asyncio_script(url: str, timeout: float, source: str) -> Any:
    """Script ``source`` on the asyncio client of ``url`` for the running event loop."""
    scripts: dict[Any, Any] = _per_loop(_aclients, dict)
    script = scripts.get((url, timeout, source))
    if script is None:
        client = scripts.get((url, timeout))
        if client is None:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            client = scripts[(url, timeout)] = redis.asyncio.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0), health_check_interval=0,
            )
        script = scripts[(url, timeout, source)] = client.register_script(source)
    return script


class _Script:
    """A script on the blocking client, called as redis-py's are: ``(keys=..., args=...)``."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.registered_client = script.registered_client

    def __call__(self, keys: list[str], args: list[Any]) -> Any:
        return _run_script(self.script, keys, args)


def _run_script(script: Any, keys: list[str], args: list[Any]) -> Any:
    """``script(keys=keys, args=args)`` on the blocking client it was registered on: the
    command packed here and sent on a connection of the client's pool. redis-py's own path adds
    to each command (its retries, which these clients have none of, its metrics and its packing
    of each argument) more CPU than the round trip itself takes, and a shared run makes one or
    two per call. A script Redis does not hold yet takes redis-py's path, which loads it."""
    client = script.registered_client
    pool = client.connection_pool
    encode = pool.get_encoder().encode
    parts = [b"EVALSHA", script.sha.encode(), b"%d" % len(keys)]
    for value in itertools.chain(keys, args):
        kind = type(value)
        parts.append(value.encode() if kind is str else b"%d" % value if kind is int
                     else encode(value))
    packed = b"".join([b"*%d\r\n" % len(parts),
                       *[b"$%d\r\n%b\r\n" % (len(part), part) for part in parts]])
    connection = pool.get_connection()
    try:
        connection.send_packed_command([packed], check_health=False)
        return connection.read_response()  # an error reply is raised; a broken link closed
    except _no_script():
        pass
    finally:
        pool.release(connection)
    return script(keys=keys, args=args)


def _no_script() -> type[Exception]:
    from redis.exceptions import NoScriptError

    return NoScriptError


def run_keys(name: str, namespace: str | None) -> list[str]:
    """The Redis keys of the shared run ``name``: its hash, its log, its end mark."""
    prefix = f"fuzeguard:{namespace}:" if namespace else "fuzeguard:"
    return [f"{prefix}{{{name}}}:{part}" for part in ("m", "e", "x")]


def end_run(url: str, namespace: str | None, name: str, ttl: float, timeout: float) -> bool:
    """Delete the shared run ``name`` for good (``run.end()``, ``fuze end``); False if there was
    none. Processes still holding a copy of it start a fresh run of that name."""
    client = _client(url, timeout)
    ended: int = client.register_script(_END)(keys=run_keys(name, namespace),
                                              args=[int(ttl * 1000)])
    return bool(ended)


class _Changed(Exception):
    """The run changed under a write-back (lost or ended again): the write-back is tried later."""


class _Outage:
    """Redis out of reach: what this process does meanwhile, to write back when it is back."""

    def __init__(self, number: str, records: int) -> None:
        self.id = number
        self.tally = events.Tally(records)

    @property
    def pending(self) -> list[events.Tally]:
        """What waits to be written back: one sum, whatever the outage's length."""
        return [] if self.tally.empty() else [self.tally]


class RedisStore:
    """A shared run's state on Redis (see the module docstring)."""

    asks: ClassVar[bool] = True  # ``_decide`` asks, waiting off the event loop in ``_adrive``

    def __init__(self, run: Run, url: str, parent: Run | str | None) -> None:
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
                if not isinstance(store, RedisStore) or store.url != url:
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
        self.outage: _Outage | None = None
        self.retry_at = 0.0
        self.backoff = RETRY_FIRST
        self.errors = 0
        self.outages = 0
        self.local_calls = 0
        self.fail_closed = False
        # Traces key fingerprints with a secret of the run (``Run.public_fp``): one for every
        # process, created with the run's state in Redis. Fingerprints written to Redis are keyed
        # with it too (``_key``).
        self.fp_key = run._fp_key
        self.worker = f"{worker_id()}/{os.urandom(2).hex()}"  # this process's hold on the run
        self._scripts: dict[str, Any] = {}
        # Per event loop: the lock that makes this process's asyncio decisions one at a time.
        self._locks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self.urgent = False  # a completion waits to be sent at once, by ``aflush``
        _stores.add(self)

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

    # ------------------------------------------------------------------ Redis round trips

    def _script(self, source: str) -> Any:
        client = _client(self.url, self.timeout)
        script = self._scripts.get(source)
        if script is None or script.registered_client is not client:
            script = self._scripts[source] = _Script(client.register_script(source))
        return script

    def _drive(self, steps: Steps[T]) -> T:
        """Run ``steps`` with the blocking client (the run's lock held throughout, but while
        the ``ask`` callback is waited for: it may read the run, and other threads go on)."""
        reply: Any = None
        error: BaseException | None = None
        while True:
            done, request = _advance(steps, reply, error)
            if done:
                result: T = request
                return result
            error = None
            try:
                if request[0] is ASK:
                    lock = request[1]._lock
                    lock.release()
                    try:
                        reply = request[1]._question(*request[2])
                    finally:
                        lock.acquire()
                else:
                    reply = self._script(request[0])(keys=request[1], args=request[2])
            except Exception as exc:
                error = exc

    async def _adrive(self, run: Run, steps: Steps[T]) -> T:
        """Run ``steps`` with the asyncio client: the run's lock is held while they judge and
        book, and released while a round trip is awaited."""
        reply: Any = None
        error: BaseException | None = None
        while True:
            with run._lock:
                done, request = _advance(steps, reply, error)
            if done:
                result: T = request
                return result
            error = None
            try:
                if request[0] is ASK:
                    reply = await asyncio.to_thread(request[1]._question, *request[2])
                else:
                    script = asyncio_script(self.url, self.timeout, request[0])
                    reply = await script(keys=request[1], args=request[2])
            except BaseException as exc:  # a cancelled task too: its commit may be in doubt
                error = exc

    def _next(self) -> int:
        return next(_numbers)

    def _key(self, fp: bytes) -> bytes:
        """A fingerprint as the shared run holds it: keyed with the run's secret, so that the
        store holds no fingerprint a guess at a (redacted) value can be checked against without
        the run's key."""
        return keyed(fp, self.fp_key)

    def _load(self, run: Run) -> Steps[bool]:
        """Bring the copy up to the log (run lock held): creates the run on first use, reloads
        it from a new epoch, starts afresh after ``end()``. True when the copy was rebuilt from
        the snapshot: it no longer holds what this process did during an outage."""
        reply = yield (_LOAD, self.keys, [
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
        if same and _listed(mine):
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

    def _owe(self, run: Run) -> Steps[None]:
        """Write back what this process did since the run's last reset, owed to a run that Redis
        lost and started again; owed until written."""
        if self.owed is not None:
            number, kill = self.owed
            yield from self._merge(run, self.own, number, kill, mine=True)
            self.owed = None

    def _rebuild(
        self, run: Run, snap: bytes | None, fromsnap: Any, calls: Any, cost: Any,
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
        if _listed(fromsnap):
            self._apply(run, fromsnap, skip_own=False)
        else:
            emit("warning", "fuzeguard.store_gap", run_id=run.id, run_name=run.name,
                 message="the store no longer holds every event since its last snapshot; this "
                 "process continues from the snapshot")
        # Calls and cost include what subagents counted toward this run: the store's counters
        # hold them even when their events are gone.
        run._calls = int(calls or 0)
        run._cost = float(cost or 0.0)

    def _apply(self, run: Run, raw_events: bytes, skip_own: bool) -> int:
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
        self, run: Run, extra: list[dict[str, Any]], mode: str, calls: int = 0,
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
            reply: list[Any] = yield (_COMMIT, self.chain, args)
        except BaseException:
            # Sent, with no answer: Redis may hold these events or not (``_load`` tells).
            self.doubt += sent
            self.queue, self.queue_cost = [], 0.0
            raise
        status, seq, missed = reply[0], int(reply[1]), reply[2]
        if status in (MISSING, NEW_EPOCH):
            if not retry:
                raise _Changed("the run changed in the store again while it was reloaded")
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
        if not _listed(missed):
            yield from self._load(run)  # too far behind: from the snapshot (own events included)
            return reply
        moved = self._apply(run, missed, skip_own=True) > 0
        self.seq = seq
        if status == COMMITTED and (not moved or not queued):
            self._snapshot_due(run, seq, len(extra), len(sent))
        return reply

    def _snapshot_due(self, run: Run, seq: int, extra: int, written: int) -> None:
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
        self, run: Run, tally: events.Tally, number: str, kill: list[Any] | None, mine: bool
    ) -> Steps[None]:
        """Write ``tally`` back under ``number`` (one round trip, idempotent). ``mine``: the copy
        lacks it (rebuilt meanwhile), so the written event is booked here too."""
        reply = yield (_MERGE, self.keys[:2], [
            self.ttl_ms, MAX_EVENTS, self.worker, self.epoch, number, tally.sums(),
            "" if kill is None else codec.dumps(kill),
            codec.dumps(list(tally.records)) if tally.records else "", self.seq, self._next(),
            "1" if mine else "0", codec.dumps(tally.bars) if tally.bars else "",
        ])
        status, seq, missed = reply[0], int(reply[1]), reply[2]
        if status != COMMITTED:
            raise _Changed("the run changed in the store during a write-back")
        if _listed(missed):
            self._apply(run, missed, skip_own=not mine)
            self.seq = seq
        else:
            self.seq = -2  # not a place in any log: the next ``_load`` rebuilds the copy
            yield from self._load(run)

    # ------------------------------------------------------------------ outages

    def _reachable(self, run: Run) -> Steps[bool]:
        """False while Redis is out and not yet due for another try (run lock held)."""
        if self.outage is None:
            if self.seq < 0:
                try:
                    yield from self._load(run)
                except Exception as exc:
                    self._down(run, exc)
                    return False
            return True
        if time.monotonic() < self.retry_at:
            return False
        try:
            try:
                yield from self._recover(run)
            except Exception as exc:
                if not _dropped(exc):
                    raise
                yield from self._recover(run)  # the outage left the connection dead: a new one
        except Exception as exc:
            self.errors += 1
            self.backoff = min(self.backoff * 2, RETRY_AFTER)
            self.retry_at = time.monotonic() + self.backoff
            if not _is_redis_error(exc):
                emit("error", "fuzeguard.internal_error", phase="store", error=repr(exc))
            return False
        return True

    def _down(self, run: Run, exc: BaseException) -> None:
        self.errors += 1
        if self.outage is None:
            self.outages += 1
            self.backoff = RETRY_FIRST
            self.outage = _Outage(f"{self.worker}:{self._next()}", run._capacity)
            emit(
                "warning", "fuzeguard.store_unavailable", run_id=run.id, run_name=run.name,
                store=masked_url(self.url), error=_masked_error(exc, self.url),
                message="the run's store cannot be reached: calls are judged in this process "
                "until it is back" + (" (fail_closed: calls are refused)" if self.fail_closed
                                      else ""),
            )
        self.retry_at = time.monotonic() + self.backoff

    def _recover(self, run: Run) -> Steps[None]:
        outage = self.outage
        assert outage is not None
        # Decides what was in doubt and brings the copy up to the log; a copy rebuilt from a
        # snapshot lacks what this process did meanwhile (its kill too): it books the write-back.
        rebuilt = yield from self._load(run)
        tally = outage.tally
        if not tally.empty():
            yield from self._merge(run, tally, outage.id, tally.kill, mine=rebuilt)
        self.outage = None
        emit("info", "fuzeguard.store_recovered", run_id=run.id, run_name=run.name,
             store=masked_url(self.url), calls=tally.calls)

    def _refuse(self, run: Run) -> None:
        raise StoreUnavailable(
            f"the store of run {run.name} cannot be reached and fail_closed is on, so the call "
            "was not made"
        )

    def _keep(self, run: Run, event: dict[str, Any], cost: float, send: bool) -> None:
        """An event of this process booked in the copy: kept to be written (run lock held)."""
        self.own.fold(event)
        if self.outage is not None:
            self.outage.tally.fold(event)
            return
        self.queue.append(event)
        self.queue_cost += cost
        if send or len(self.queue) >= MAX_QUEUED:
            if asyncio._get_running_loop() is not None:
                self.urgent = True  # not here, on the event loop: the guard awaits ``aflush``
            else:
                self._drive(self._flush(run))

    def _flush(self, run: Run) -> Steps[None]:
        """Write what waits to be written (run lock held)."""
        self.urgent = False
        if not self.queue and self.outage is None:
            return
        if not (yield from self._reachable(run)) or not self.queue:
            return
        try:
            yield from self._commit(run, [], APPEND)
        except Exception as exc:
            self._down(run, exc)

    # ------------------------------------------------------------------ the Store protocol

    def open(self, run: Run) -> None:
        backlog.settle(self.keys)
        with run._lock:
            self._drive(self._reachable(run))

    async def aopen(self, run: Run) -> None:
        if backlog.owed(self.keys):
            await asyncio.to_thread(backlog.settle, self.keys)
        await self._adrive(run, self._reachable(run))

    def decide(
        self, run: Run, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        with run._lock:
            return self._drive(self._decide(run, plan, args_fp, arguments, kind))

    async def adecide(
        self, run: Run, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        """``decide`` for a coroutine: its round trips are awaited on the asyncio client. This
        process's decisions in one event loop are made one at a time (each on the state the
        previous one left)."""
        async with self._turn():
            return await self._adrive(run, self._decide(run, plan, args_fp, arguments, kind))

    def _turn(self) -> asyncio.Lock:
        lock: asyncio.Lock = _per_loop(self._locks, asyncio.Lock)
        return lock

    async def aflush(self, run: Run, everything: bool = False) -> None:
        """Write what waits to be sent at once (a completion with a cost or an error), awaited;
        ``everything``: all that waits, and one more try during an outage (the run is left)."""
        if everything and (self.queue or self.outage is not None):
            self.retry_at = 0.0
            self.urgent = True
        if self.urgent:
            async with self._turn():
                await self._adrive(run, self._flush(run))

    def _decide(
        self, run: Run, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None
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
        self, run: Run, call: Call, decision: Decision, event: dict[str, Any],
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

    def _write(self, run: Run, event: dict[str, Any], cost: float = 0.0) -> None:
        """Book and write at once a change that needs no judgement (run lock held)."""
        self._drive(self._reachable(run))  # first: it may bring the copy up to date
        events.apply(run, event)
        self._keep(run, event, cost, send=True)

    def flag(self, run: Run, plan: Plan, call: Call, detection: Detection) -> Decision:
        with run._lock:
            decision = run._judge_flag(plan, call, detection)
            if decision.detections:
                self._write(run, events.flagged(self.worker, self._next(), decision))
            return decision

    def complete(self, run: Run, record: CallRecord, plan: Plan, call: Call) -> None:
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
            if len(self.encoded) > 4 * run._capacity + SNAPSHOT_EVERY:
                self.encoded = {id(r): e for r in run._history
                                if (e := self.encoded.get(id(r))) is not None and e[0] is r}
            run._book(record)
            # Cost and errors are budgets the other processes judge by: sent at once.
            self._keep(run, event, record.cost or 0.0,
                       send=bool(record.cost) or record.error is not None)

    def discard(self, run: Run, index: int) -> None:
        event = events.simple("x", self.worker, self._next(), i=index)
        with run._lock:
            run._drop(index)
            self._keep(run, event, 0.0, send=True)

    def add_cost(self, run: Run, amount: float) -> None:
        if not math.isfinite(amount):
            raise TypeError(f"add_cost() takes a finite number, got {amount!r}")
        with run._lock:
            self._write(run, events.simple("a", self.worker, self._next(), v=amount), amount)

    def end_turn(self, run: Run) -> None:
        with run._lock:
            self._write(run, events.simple("e", self.worker, self._next()))

    def reset(self, run: Run) -> None:
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

    def refresh(self, run: Run) -> None:
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

    def annotate(self, run: Run, line: dict[str, Any]) -> None:
        """Traces of a shared run name the process (``worker``) and give each line's moment as
        seconds since the epoch (``at``): ``fuze replay --merge`` orders every process's lines by
        it, across resets, which restart ``ts``."""
        line["worker"] = self.worker
        ts = line.get("ts")
        if isinstance(ts, float):
            line["at"] = events.wall_of(run) + ts

    def close(self, run: Run) -> None:
        """Write what waits to be written (during an outage: one more try, whenever the last
        was); the run stays in Redis for the other processes."""
        if not self.write_back(run):
            backlog.keep(self, run)

    def write_back(self, run: Run) -> bool:
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

    def end(self, run: Run) -> None:
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


def _advance(steps: Steps[Any], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Send ``steps`` the reply (or throw it the error): (False, its next request), or (True,
    its result) once it returned."""
    try:
        return False, steps.send(reply) if error is None else steps.throw(error)
    except StopIteration as stop:
        return True, stop.value


def _listed(value: Any) -> bool:
    """A script's list of events (an empty one included: the scripts join them in one JSON
    array, read in one ``json.loads``), as opposed to false: not kept."""
    return isinstance(value, bytes)


def _is_redis_error(exc: BaseException) -> bool:
    import redis

    return isinstance(exc, (redis.RedisError, OSError, _Changed))


def _dropped(exc: BaseException) -> bool:
    """The connection was dropped: a new one may well work at once."""
    import redis

    return isinstance(exc, redis.ConnectionError)


def _masked_error(exc: BaseException, url: str) -> str:
    """``repr(exc)`` with the store's password masked, should the error repeat the URL."""
    text = repr(exc)
    return text.replace(url, masked_url(url)) if url in text else text
