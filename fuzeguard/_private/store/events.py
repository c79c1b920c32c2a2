"""A shared run as a log of events, and a process's copy of its state kept from that log.

Every change to a shared run is one event: a call decided (``d``), a detection made mid-stream
(``f``), a call completed (``c``), cost added outside a call (``a``), a turn ended (``e``), a reset
(``r``) and a subagent's call or cost counted toward this run's budgets (``p``). Each process
applies the events, in the log's order, to its own ``Run`` through the same bookkeeping methods an
unshared run uses (``_count``, ``_count_flag``, ``_book``...), so that every process holds the
same state and the layers judge it exactly as they would in one process.

A snapshot is the whole state at one point of the log, for a process that joins late or fell
too far behind to catch up from the events the store still keeps.
"""

from __future__ import annotations

import json
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from fuzeguard._private.records import IN_FLIGHT, Call, CallRecord, Decision
from fuzeguard._private.store import codec

if TYPE_CHECKING:
    from fuzeguard._private.run import Run


def local_start(wall: float) -> float:
    """The moment ``wall`` (seconds since the epoch) on this process's monotonic clock."""
    return time.monotonic() - (time.time() - wall)


def wall_of(run: Run) -> float:
    """The run's start (``run._start``, monotonic) as seconds since the epoch."""
    return time.time() - (time.monotonic() - run._start)


def decided(worker: str, number: int, call: Call, decision: Decision) -> dict[str, Any]:
    return {"k": "d", "w": worker, "n": number, "fn": call.fn, "fp": call.args_fp.hex(),
            "kind": call.kind, "x": codec.decision_out(decision), "t": time.time()}


def count(run: Run, call: Call, decision: Decision, event: dict[str, Any]) -> None:
    """Book a decision (``run._count``). A shared run's clock (``max_duration``) starts at its
    first call, in whichever process, and again at the first call after a reset."""
    first = run._attempts == 0
    run._count(call, decision)
    if first and run._attempts == 1:
        run._start = local_start(event["t"])


def flagged(worker: str, number: int, decision: Decision) -> dict[str, Any]:
    return {"k": "f", "w": worker, "n": number, "x": codec.decision_out(decision)}


def completed(worker: str, number: int, record: CallRecord) -> dict[str, Any]:
    return {"k": "c", "w": worker, "n": number, "r": codec.record_out(record)}


def simple(kind: str, worker: str, number: int, **fields: Any) -> dict[str, Any]:
    return {"k": kind, "w": worker, "n": number, **fields}


def apply(run: Run, event: dict[str, Any]) -> None:
    """Book one event into ``run``'s state. Called with the run's lock held."""
    kind = event["k"]
    if kind == "d":
        decision = codec.decision_in(event["x"])
        call = Call(event["fn"], run._attempts + 1, bytes.fromhex(event["fp"]),
                    kind=event.get("kind", "other"))
        if decision.action != "kill" or decision.detections:
            count(run, call, decision, event)
    elif kind == "c":
        run._book(codec.record_in(event["r"]))
    elif kind == "f":
        run._count_flag(codec.decision_in(event["x"]))
    elif kind == "x":
        run._drop(event["i"])
    elif kind == "a":
        run._cost += event["v"]
    elif kind == "e":
        run._end_turn()
    elif kind == "r":
        run._restart()
        run._start = local_start(event["t"])
    elif kind == "p":
        run._calls += event.get("calls", 0)
        run._cost += event.get("cost", 0.0)


def parse(raw: bytes | str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(raw)
    return value


def snapshot(run: Run) -> str:
    """The whole state of ``run`` (its lock held) as text."""
    state = {
        "attempts": run._attempts, "calls": run._calls, "skipped": run._skipped,
        "errors": run._errors, "consecutive_errors": run._consecutive_errors, "cost": run._cost,
        "turn": run._turn, "turn_calls": run._turn_calls, "resets": run.resets,
        "start": wall_of(run), "capacity": run._capacity,
        "calls_by_fn": run._calls_by_fn, "detections": run._detections,
        "detections_by_layer": run._detections_by_layer,
        "killed": None if run._killed is None else codec.detection_out(run._killed),
        "hits": [[codec.encode(key) if _encodable(key) else None, n] for key, n in run._hits.items()],
        "kept": [codec.detection_out(d) for d in run._kept],
        # Calls still in flight are left out: each ends with its own event, which records it.
        "history": [codec.record_out(r) for r in run._history if r.features is not IN_FLIGHT],
    }
    return codec.dumps(state)


def _encodable(value: Any) -> bool:
    try:
        codec.encode(value)
    except codec.Unshareable:
        return False
    return True


def restore(run: Run, text: str) -> None:
    """Make ``run``'s state (its lock held) the one ``snapshot`` wrote."""
    state = json.loads(text)
    run._capacity = max(run._capacity, state["capacity"])
    run._clear()
    run._attempts = state["attempts"]
    run._calls = state["calls"]
    run._skipped = state["skipped"]
    run._errors = state["errors"]
    run._cost = state["cost"]
    run._turn = state["turn"]
    run._turn_calls = state["turn_calls"]
    run.resets = state["resets"]
    run._start = local_start(state["start"])
    run._calls_by_fn = dict(state["calls_by_fn"])
    run._detections = state["detections"]
    run._detections_by_layer = dict(state["detections_by_layer"])
    run._killed = None if state["killed"] is None else codec.detection_in(state["killed"])
    run._hits = {_key(k): n for k, n in state["hits"] if k is not None}
    run._kept = deque((codec.detection_in(d) for d in state["kept"]), maxlen=run._kept.maxlen)
    for record in state["history"]:
        run._append(codec.record_in(record))
    # The counters are the snapshot's (history holds only the latest calls).
    run._errors = state["errors"]
    run._consecutive_errors = state["consecutive_errors"]
    run._cost = state["cost"]


def _key(data: Any) -> Any:
    value = codec.decode(data)
    return tuple(value) if isinstance(value, list) else value
