"""The Lua scripts of a shared run on Redis (``redis.py``) and how they are called.

Each change of a shared run is one script, run atomically by Redis: ``LOAD`` brings a process's
copy up to the log (creating the run on first use), ``COMMIT`` appends a process's events as the
log allows, ``MERGE`` writes back, idempotently, what a process did while Redis was out of reach,
and ``END`` deletes the run for good. Their keys and arguments are written above each; they
return a list of events as one JSON array (read in one ``json.loads``) or false when the log no
longer holds them. ``Script`` sends them on the blocking client packed here (``clients.py``
holds the clients).
"""

from __future__ import annotations

import itertools
from typing import Any

from fuzeguard._private.store.clients import client

# Statuses of the scripts' replies.
COMMITTED, MOVED, OVER_BUDGET, MISSING, NEW_EPOCH = 1, 0, 2, 3, 5
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
COMMIT = _MISSED + """
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
LOAD = _MISSED + """
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
MERGE = _MISSED + """
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
END = """
local epoch = redis.call('HGET', KEYS[1], 'epoch')
redis.call('DEL', KEYS[1], KEYS[2])
if epoch then redis.call('SET', KEYS[3], epoch, 'PX', ARGV[1]) return 1 end
return 0
"""


def run_keys(name: str, namespace: str | None) -> list[str]:
    """The Redis keys of the shared run ``name``: its hash, its log, its end mark."""
    prefix = f"fuzeguard:{namespace}:" if namespace else "fuzeguard:"
    return [f"{prefix}{{{name}}}:{part}" for part in ("m", "e", "x")]


def end_run(url: str, namespace: str | None, name: str, ttl: float, timeout: float) -> bool:
    """Delete the shared run ``name`` for good (``run.end()``, ``fuze end``); False if there was
    none. Processes still holding a copy of it start a fresh run of that name."""
    ended: int = client(url, timeout).register_script(END)(keys=run_keys(name, namespace),
                                                            args=[int(ttl * 1000)])
    return bool(ended)


def listed(value: Any) -> bool:
    """A script's list of events (an empty one included: the scripts join them in one JSON
    array, read in one ``json.loads``), as opposed to false: not kept."""
    return isinstance(value, bytes)


class Script:
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
