"""A shared run as a log of events, and a process's copy of its state kept from that log.

Every change to a shared run is one event: a call decided (``d``), a detection made mid-stream
(``f``), a call completed (``c``), cost added outside a call (``a``), a turn ended (``e``), a reset
(``r``), a subagent's call or cost counted toward this run's budgets (``p``), and what one process
did while the store was out of its reach, written back as one sum (``o``, see ``Tally``). Each process
applies the events, in the log's order, to its own ``Run`` through the same bookkeeping methods an
unshared run uses (``_count``, ``_count_flag``, ``_book``...), so that every process holds the
same state and the layers judge it exactly as they would in one process.

A snapshot is the whole state at one point of the log, for a process that joins late or fell
too far behind to catch up from the events the store still keeps.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from fuzeguard._private.meaning.fastinit import new_call, new_decision
from fuzeguard._private.meaning.records import IN_FLIGHT, Call, CallRecord, Decision
from fuzeguard._private.store import codec

if TYPE_CHECKING:
    from fuzeguard._private.protocols import RunInternals


def local_start(wall: float) -> float:
    """The moment ``wall`` (seconds since the epoch) on this process's monotonic clock."""
    return time.monotonic() - (time.time() - wall)


def wall_of(run: RunInternals) -> float:
    """The run's start (``run._start``, monotonic) as seconds since the epoch."""
    return time.time() - (time.monotonic() - run._start)


def decided(
    worker: str, number: int, call: Call, decision: Decision, let_go: list[int] | None = None
) -> dict[str, Any]:
    """A call decided. ``let_go``: the positions, among the decision's detections, of those a
    person answered "continue" to (``ask``): every process raises their bar (``_raise_bar``)."""
    event = {"k": "d", "w": worker, "n": number, "fn": call.fn, "fp": call.args_fp.hex(),
             "kind": call.kind, "x": codec.decision_out(decision), "t": time.time()}
    if let_go:
        event["b"] = let_go
    return event


def count(run: RunInternals, call: Call, decision: Decision, event: dict[str, Any]) -> None:
    """Book a decision (``run._count``). A shared run's clock (``max_duration``) starts at its
    first call, in whichever process, and again at the first call after a reset."""
    first = run._attempts == 0
    for i in event.get("b", ()):  # patterns a person let go on: every process raises their bar
        run._raise_bar(decision.detections[i])
    run._count(call, decision)
    if first and run._attempts == 1:
        run._start = local_start(event["t"])


def kill_change(sent: list[dict[str, Any]]) -> str:
    """What ``sent`` does to the run's kill, as the commit script reads it: "1" a decision or a
    flag kills it, "0" a reset lifts it, "" neither (the last one counts)."""
    change = ""
    for event in sent:
        kind = event["k"]
        if kind == "d" or kind == "f":
            action, _index, _best, detections, _extra = event["x"]
            if action == "kill" and detections:
                change = "1"
        elif kind == "r":
            change = "0"
    return change


def reindexed(call: Call, decision: Decision, index: int) -> tuple[Call, Decision]:
    """A call and its decision at ``index``: where the log put a decision made on a copy that
    other processes' calls had not reached yet."""
    return dataclasses.replace(call, index=index), _decision_at(decision, index)


def _decision_at(decision: Decision, index: int) -> Decision:
    """``decision`` (and its detections) at call ``index``."""
    if decision.detection is None and not decision.detections:
        return new_decision(decision.action, index)  # the common case: nothing detected
    detections = tuple(dataclasses.replace(d, call_index=index) for d in decision.detections)
    chosen = decision.detection
    if chosen is not None:
        chosen = next((d for d, old in zip(detections, decision.detections, strict=True)
                       if old is chosen), dataclasses.replace(chosen, call_index=index))
    return Decision(decision.action, index, chosen, detections)


def flagged(worker: str, number: int, decision: Decision) -> dict[str, Any]:
    return {"k": "f", "w": worker, "n": number, "x": codec.decision_out(decision)}


def completed(worker: str, number: int, record: CallRecord) -> dict[str, Any]:
    return {"k": "c", "w": worker, "n": number, "r": codec.record_out(record)}


def simple(kind: str, worker: str, number: int, **fields: Any) -> dict[str, Any]:
    return {"k": kind, "w": worker, "n": number, **fields}


# Records as a snapshot writes them, by id: each record is encoded once (when its event is made
# or read), not again at every snapshot. Entries are checked to be of the same record.
Encoded = dict[int, tuple[CallRecord, list[Any]]]


def apply(run: RunInternals, event: dict[str, Any], encoded: Encoded | None = None) -> None:
    """Book one event into ``run``'s state. Called with the run's lock held."""
    kind = event["k"]
    if kind == "d":
        decision = codec.decision_in(event["x"])
        call = new_call(event["fn"], run._attempts + 1, bytes.fromhex(event["fp"]), {},
                        event.get("kind", "other"))
        if decision.index != call.index:  # decided on a copy behind the log (``RELAXED``)
            decision = _decision_at(decision, call.index)
        if decision.action != "kill" or decision.detections:
            count(run, call, decision, event)
    elif kind == "c":
        record = codec.record_in(event["r"])
        if encoded is not None:
            encoded[id(record)] = (record, event["r"])
        run._book(record)
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
    elif kind == "o":
        merge(run, event)


class Tally:
    """What one process did to a shared run that the store does not hold yet, as sums: the form
    in which an outage is written back (``o`` events), bounded whatever the outage's length.

    ``fold`` adds one of this process's events. The sums are cumulative under one ``id``: the
    store applies only the part of them it has not applied before, so a write-back retried after
    a cut never counts twice.
    """

    def __init__(self, records: int) -> None:
        self.records: deque[list[Any]] = deque(maxlen=records)
        self.clear()

    def clear(self) -> None:
        self.calls = 0
        self.attempts = 0
        self.errors = 0
        self.turns = 0
        self.cost = 0.0
        self.fns: dict[str, int] = {}
        self.reset: float | None = None  # when this process reset the run, if it did
        self.records.clear()
        self.kill: list[Any] | None = None
        # The detections a person let go on (``ask`` answered "continue"): their bars.
        self.bars: list[list[Any]] = []

    def empty(self) -> bool:
        return not (self.attempts or self.turns or self.cost or self.reset is not None
                    or self.kill is not None or self.records or self.bars)

    def fold(self, event: dict[str, Any]) -> None:
        kind = event["k"]
        if kind == "d":
            action, _index, best, detections, _extra = event["x"]
            if action == "kill" and not detections:
                return
            self.attempts += 1
            self.bars.extend(detections[i] for i in event.get("b", ()))
            if action in ("call", "warn"):
                self.calls += 1
                self.fns[event["fn"]] = self.fns.get(event["fn"], 0) + 1
            elif action == "kill" and self.kill is None:
                self.kill = detections[best]
        elif kind == "c":
            record = event["r"]
            self.records.append(record)
            if record[4] is not None:
                self.errors += 1
            self.cost += record[5] or 0.0
        elif kind == "f":
            action, _index, best, detections, _extra = event["x"]
            if action == "kill" and detections and self.kill is None:
                self.kill = detections[best]
        elif kind == "a":
            self.cost += event["v"]
        elif kind == "e":
            self.turns += 1
        elif kind == "r":
            self.clear()
            self.reset = event["t"]

    def sums(self) -> str:
        """The sums, as the store's write-back script reads them."""
        return codec.dumps({"calls": self.calls, "attempts": self.attempts, "errors": self.errors,
                            "turns": self.turns, "cost": repr(self.cost), "fns": self.fns,
                            "reset": self.reset is not None, "t": self.reset or 0.0})


def merge(run: RunInternals, event: dict[str, Any]) -> None:
    """Book what one process did while the store was out of its reach (an ``o`` event: the
    part of its sums not booked before, its latest records and the kill it knew of)."""
    if event.get("reset"):
        run._restart()
        run._start = local_start(float(event["t"]))
    calls = int(event.get("calls", 0))
    run._attempts += int(event.get("attempts", 0))
    run._calls += calls
    run._turn_calls += calls
    for fn, n in (event.get("fns") or {}).items():
        run._calls_by_fn[fn] = run._calls_by_fn.get(fn, 0) + int(n)
    run._errors += int(event.get("errors", 0))
    run._cost += float(event.get("cost", 0.0))
    turns = int(event.get("turns", 0))
    if turns > 0:
        run._turn += turns - 1
        run._end_turn()
    records = event.get("records")
    if records:
        for record in json.loads(records):
            run._append(codec.record_in(record))
    for detection in json.loads(event.get("bars") or "[]"):  # patterns a person let go on
        run._raise_bar(codec.detection_in(detection))
    kill = event.get("kill")
    if kill and run._killed is None:
        detection = codec.detection_in(json.loads(kill))
        run._note(Decision("kill", detection.call_index, detection, (detection,)))
        run._killed = detection


def snapshot(run: RunInternals, encoded: Encoded | None = None) -> str:
    """The whole state of ``run`` (its lock held) as text. ``encoded``: records already encoded,
    kept to those still in the history."""
    history = []
    kept: Encoded = {}
    for record in run._history:
        if record.features is IN_FLIGHT:
            continue  # each ends with its own event, which records it
        entry = None if encoded is None else encoded.get(id(record))
        data = entry[1] if entry is not None and entry[0] is record else codec.record_out(record)
        kept[id(record)] = (record, data)
        history.append(data)
    if encoded is not None:
        encoded.clear()
        encoded.update(kept)
    state = {
        "attempts": run._attempts, "calls": run._calls, "skipped": run._skipped,
        "errors": run._errors, "consecutive_errors": run._consecutive_errors, "cost": run._cost,
        "turn": run._turn, "turn_calls": run._turn_calls, "resets": run.resets,
        "start": wall_of(run), "capacity": run._capacity,
        "calls_by_fn": run._calls_by_fn, "detections": run._detections,
        "detections_by_layer": run._detections_by_layer,
        "killed": None if run._killed is None else codec.detection_out(run._killed),
        "hits": [[codec.encode(key) if _encodable(key) else None, n] for key, n in run._hits.items()],
        "bars": [[codec.encode(key), step, bar] for key, (step, bar) in run._bars.items()
                 if _encodable(key)],
        "turns_marked": run._turns_marked,
        "hit_turns": [[codec.encode(key), turn] for key, turn in run._hit_turns.items()
                      if _encodable(key)],
        # What the model was told: the latest warning's call and turn, and the warnings given
        # about each pattern (graded evidence: docs/layers.md).
        "told": [run._told_at, run._told_turn],
        "warned": [[codec.encode(key), count, turn] for key, (count, turn) in run._warned.items()
                   if _encodable(key)],
        "kept": [codec.detection_out(d) for d in run._kept],
        "history": history,
    }
    return codec.dumps(state)


def _encodable(value: Any) -> bool:
    try:
        codec.encode(value)
    except codec.Unshareable:
        return False
    return True


def restore(run: RunInternals, text: str) -> None:
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
    run._bars = {_key(k): (step, bar) for k, step, bar in state.get("bars", ())}
    # Whether the ladder steps once per turn, and the turn each pattern last stepped in.
    run._turns_marked = state.get("turns_marked", False)
    run._hit_turns = {_key(k): turn for k, turn in state.get("hit_turns", ())}
    run._told_at, run._told_turn = state.get("told", (0, 0))
    run._warned = {_key(k): (count, turn) for k, count, turn in state.get("warned", ())}
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
