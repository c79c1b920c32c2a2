"""How a shared run's events and state are written to a store and read back.

JSON with a few tagged forms, so that what the layers keep about a call (``CallRecord.features``:
frozensets of word pairs, tuples, the semantic layer's prepared texts) survives the trip with its
types: ``{"b": hex}`` bytes, ``{"t": [...]}`` a tuple, ``{"f": [...]}`` a frozenset, ``{"s": [...]}``
a set, ``{"d": [[k, v], ...]}`` a mapping, ``{"c": "module:Class", "v": [...]}`` a frozen dataclass
of fuzeguard's own; and two short forms for what records hold most, read back without a call per
item: ``{"T": [...]}`` a tuple of strings, ``{"F": [[...], ...]}`` a frozenset of such tuples (every
process that shares a run reads every record). Reading never imports a module or runs code named
by the data: a class is only rebuilt if it is a dataclass in an already imported ``fuzeguard``
module. A value outside
these forms is not shared (``Unshareable``): the record keeps ``None`` for that feature, which
every layer reads as "no evidence".
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Hashable, Mapping
from typing import Any

from fuzeguard._private.meaning.fastinit import new_decision, new_record
from fuzeguard._private.meaning.records import CallRecord, Decision, Detection


class Unshareable(ValueError):
    """A value the codec has no form for."""


def encode(value: Any, depth: int = 0) -> Any:
    if depth > 32:
        raise Unshareable("nested too deep")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    t = type(value)
    if t is bytes:
        return {"b": value.hex()}
    if t is tuple:
        if _strings(value):
            return {"T": list(value)}
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is list:
        return [encode(v, depth + 1) for v in value]
    if t is frozenset and all(type(v) is tuple and _strings(v) for v in value):
        return {"F": [list(v) for v in value]}
    if t is frozenset or t is set:
        items = [encode(v, depth + 1) for v in value]
        return {"f" if t is frozenset else "s": items}
    if isinstance(value, Mapping):
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type) \
            and t.__module__.startswith("fuzeguard."):
        fields = dataclasses.fields(value)
        return {"c": f"{t.__module__}:{t.__qualname__}",
                "v": [encode(getattr(value, f.name), depth + 1) for f in fields]}
    raise Unshareable(f"{t.__name__} values are not shared")


def _strings(items: tuple[Any, ...]) -> bool:
    return all(type(v) is str for v in items)


def decode(value: Any) -> Any:
    # Leaves (strings, numbers) are taken as they are without a call: a record's features hold
    # thousands of them, and every process sharing a run decodes every record.
    if type(value) is list:
        return [decode(v) if type(v) is list or type(v) is dict else v for v in value]
    if type(value) is not dict:
        return value
    if "F" in value:
        return frozenset(map(tuple, value["F"]))
    if "T" in value:
        return tuple(value["T"])
    if "t" in value:
        return tuple([decode(v) if type(v) is list or type(v) is dict else v
                      for v in value["t"]])
    if "f" in value:
        return frozenset([decode(v) if type(v) is list or type(v) is dict else v
                          for v in value["f"]])
    if "b" in value:
        return bytes.fromhex(value["b"])
    if "s" in value:
        return {decode(v) for v in value["s"]}
    if "d" in value:
        return {decode(k): decode(v) for k, v in value["d"]}
    if "c" in value:
        module_name, _, qualname = str(value["c"]).partition(":")
        module = sys.modules.get(module_name) if module_name.startswith("fuzeguard.") else None
        cls = getattr(module, qualname, None) if module is not None else None
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise Unshareable(f"unknown class {value['c']!r}")
        return cls(*(decode(v) for v in value["v"]))
    raise Unshareable(f"unknown form {sorted(value)!r}")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def record_out(record: CallRecord) -> list[Any]:
    features: dict[str, Any] = {}
    for name, feature in record.features.items():
        try:
            features[name] = encode(feature)
        except Unshareable:
            features[name] = None
    return [record.fn, record.index, record.args_fp.hex(),
            None if record.result_fp is None else record.result_fp.hex(),
            record.error, record.cost, record.start, record.duration, features, record.kind]


def record_in(data: list[Any], start_shift: float = 0.0) -> CallRecord:
    fn, index, args_fp, result_fp, error, cost, start, duration, features, kind = data
    kept: dict[str, Any] = {}
    for name, feature in features.items():
        try:
            kept[name] = decode(feature)
        except Unshareable:
            kept[name] = None
    return new_record(
        fn=fn, index=index, args_fp=bytes.fromhex(args_fp),
        result_fp=None if result_fp is None else bytes.fromhex(result_fp),
        error=error, cost=cost, start=start + start_shift, duration=duration, features=kept,
        kind=kind,
    )


def detection_out(d: Detection) -> list[Any]:
    return [d.layer, d.fn, d.message, d.count, d.threshold, d.similarity, d.kind,
            _pattern_out(d.pattern), d.run_id, d.call_index, d.action]


def detection_in(data: list[Any]) -> Detection:
    layer, fn, message, count, threshold, similarity, kind, pattern, run_id, index, action = data
    return Detection(layer=layer, fn=fn, message=message, count=count, threshold=threshold,
                     similarity=similarity, kind=kind, pattern=_pattern_in(pattern),
                     run_id=run_id, call_index=index, action=action)


def _pattern_out(pattern: Hashable) -> Any:
    try:
        return encode(pattern)
    except Unshareable:
        return {"r": repr(pattern)}  # still equal to itself across workers, which is what counts


def _pattern_in(data: Any) -> Hashable:
    if type(data) is dict and "r" in data:
        return ("repr", data["r"])
    value = decode(data)
    if isinstance(value, list):
        return tuple(value)
    result: Hashable = value
    return result


def decision_out(decision: Decision) -> list[Any]:
    best = -1
    for i, d in enumerate(decision.detections):
        if d is decision.detection:
            best = i
    detections = [detection_out(d) for d in decision.detections]
    if best < 0 and decision.detection is not None:
        detections.append(detection_out(decision.detection))
        best = len(detections) - 1
        return [decision.action, decision.index, best, detections, 1]
    return [decision.action, decision.index, best, detections, 0]


def decision_in(data: list[Any]) -> Decision:
    action, index, best, detections, extra = data
    if not detections:
        return new_decision(action, index)  # the common case: nothing detected
    found = [detection_in(d) for d in detections]
    chosen = found[best] if best >= 0 else None
    if extra:
        found.pop()
    return Decision(action, index, chosen, tuple(found))
