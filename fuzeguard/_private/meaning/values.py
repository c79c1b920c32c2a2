"""The value codec of traces: any Python value as JSON, and back.

``encode_value`` writes plain JSON as it is and anything else in a tagged form,
``{"$fuze": "<kind>", ...}``, that ``decode_value`` reads back; ``dumps`` is the compact JSON text
of an encoded value. With a redactor, secrets are left out as they are encoded (``secrets.py``).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import json.encoder
import math
import uuid
from collections.abc import Callable, Mapping, Set
from pathlib import PurePath
from typing import Any

from fuzeguard._private.meaning.secrets import REDACTED, Redactor, scrub

TAG = "$fuze"
MAX_DEPTH = 64
# Integers longer than this (about 3,900 decimal digits) are written in hex, tagged: Python
# refuses to write an int of more than 4,300 digits as decimal text (sys.int_info).
BIG_INT_BITS = 13_000


def _no_default(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _make_dumps() -> Callable[[Any], str]:
    """Compact JSON text of an already JSON-safe value.

    The C encoder is built once and reused: ``json.dumps`` builds a new one per call, which is a
    good part of its cost on lines this small. No circular-reference markers are needed because
    ``encode_value`` never returns a structure that contains itself.
    """
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None:  # pragma: no cover - CPython always has the C encoder
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    encode = c_make_encoder(
        None, _no_default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )

    def dumps(value: Any) -> str:
        return "".join(encode(value, 0))

    return dumps


dumps = _make_dumps()


def scrub_tree(value: Any, values: list[str], depth: int = 0) -> Any:
    """An encoded (JSON-safe) value with every string in it scrubbed of secrets (``scrub``).

    Applied after cutting, so that the work is bounded by the cap however big the value was. The
    encoder bounds nesting; anything deeper than that here is not written at all.
    """
    t = type(value)
    if t is str:
        return scrub(value, values)
    if depth > 4 * MAX_DEPTH:
        return REDACTED
    if t is list:
        return [scrub_tree(v, values, depth + 1) for v in value]
    if t is dict:  # keys too: a result may be keyed by a token
        return {scrub(k, values): scrub_tree(v, values, depth + 1) for k, v in value.items()}
    return value


def _qualname(tp: type) -> str:
    return f"{getattr(tp, '__module__', '?')}.{getattr(tp, '__qualname__', tp.__name__)}"


def encode_value(value: Any, redact: Redactor | None = None) -> Any:
    """A JSON-safe form of ``value``: plain JSON as is, anything else tagged (never raises).

    - strings, finite numbers, booleans, None, lists, and dicts with string keys: as they are;
    - ``{"$fuze": "float", "value": "nan" | "inf" | "-inf"}``;
    - ``{"$fuze": "int", "hex": "0x..."}`` for an integer too long to write in decimal;
    - ``{"$fuze": "tuple" | "set", "items": [...]}``;
    - ``{"$fuze": "dict", "items": [[key, value], ...]}`` for other keys (or a ``"$fuze"`` key);
    - ``{"$fuze": "bytes", "base64": "..."}``;
    - ``{"$fuze": "datetime" | "date" | "time" | "decimal" | "uuid" | "path", "value": "..."}``,
      ``{"$fuze": "timedelta", "seconds": ...}``;
    - ``{"$fuze": "enum", "type": "mod.Class", "value": ...}``;
    - ``{"$fuze": "object", "type": "mod.Class", "fields": {...}}`` for dataclasses, attrs
      classes and pydantic models; ``{"$fuze": "array", "dtype": ..., "items": [...]}`` for
      numpy arrays;
    - ``{"$fuze": "repr", "type": "mod.Class", "repr": "..."}`` for anything else (lossy);
    - ``{"$fuze": "cycle"}`` where a structure contains itself, ``{"$fuze": "deep"}`` past 64
      levels.

    With a ``redact`` redactor (``secrets.redactor()``), values under secret-named mapping keys
    (at any depth) become ``"[redacted]"`` and every string is scrubbed of secret-shaped text.
    """
    encoded = Encoder(redact).top(value)
    return encoded if redact is None else scrub_tree(encoded, [])


class Encoder:
    """Walks a value once; ``size`` estimates its JSON length (characters of text, plus a few per
    other item) so that small values need not be encoded twice to check them against the cap."""

    __slots__ = ("active", "redact", "size")

    def __init__(self, redact: Redactor | None) -> None:
        self.redact = redact
        self.active: set[int] = set()
        self.size = 0

    def top(self, value: Any) -> Any:
        try:
            return self.encode(value, 0)
        except Exception:
            return {TAG: "repr", "type": _qualname(type(value)), "repr": "<unencodable>"}

    def encode(self, v: Any, depth: int) -> Any:
        t = type(v)
        if t is str:
            self.size += len(v) + 3
            return v
        self.size += 4
        if t is int or t is bool or v is None:
            if t is int and (v > 10**15 or v < -(10**15)):
                if v.bit_length() > BIG_INT_BITS:
                    text = hex(v)
                    self.size += len(text)
                    return {TAG: "int", "hex": text}
                self.size += len(str(v))
            return v
        if t is float:
            if math.isfinite(v):
                return v
            return {TAG: "float", "value": "nan" if v != v else ("inf" if v > 0 else "-inf")}
        if depth >= MAX_DEPTH:
            return {TAG: "deep"}
        key = id(v)
        if key in self.active:
            return {TAG: "cycle"}
        self.active.add(key)
        try:
            return self._container(v, t, depth + 1)
        finally:
            self.active.discard(key)

    def _container(self, v: Any, t: type, depth: int) -> Any:
        enc = self.encode
        if t is list:
            return [enc(item, depth) for item in v]
        if t is dict or (isinstance(v, Mapping) and not _is_model(t)):
            return self._mapping(v, depth)
        if t is tuple:
            return {TAG: "tuple", "items": [enc(item, depth) for item in v]}
        if isinstance(v, (set, frozenset, Set)):
            items = [enc(item, depth) for item in v]
            try:
                items.sort(key=dumps)
            except Exception:
                pass
            return {TAG: "set", "items": items}
        if isinstance(v, (bytes, bytearray, memoryview)):
            text = base64.b64encode(bytes(v)).decode("ascii")
            self.size += len(text)
            return {TAG: "bytes", "base64": text}
        if isinstance(v, enum.Enum):
            return {TAG: "enum", "type": _qualname(t), "value": enc(v.value, depth)}
        if isinstance(v, str):
            self.size += len(v)
            return str.__str__(v)
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int) and not _is_numpy(t):
            return enc(int(v), depth)
        if isinstance(v, float) and not _is_numpy(t):
            return enc(float(v), depth)
        if isinstance(v, _dt.datetime):
            return {TAG: "datetime", "value": v.isoformat()}
        if isinstance(v, _dt.date):
            return {TAG: "date", "value": v.isoformat()}
        if isinstance(v, _dt.time):
            return {TAG: "time", "value": v.isoformat()}
        if isinstance(v, _dt.timedelta):
            return {TAG: "timedelta", "seconds": v.total_seconds()}
        if isinstance(v, decimal.Decimal):
            return {TAG: "decimal", "value": str(v)}
        if isinstance(v, uuid.UUID):
            return {TAG: "uuid", "value": str(v)}
        if isinstance(v, PurePath):
            return {TAG: "path", "value": str(v)}
        if isinstance(v, (list, tuple)):
            return [enc(item, depth) for item in v]
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            fields = {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}
            return self._object(t, fields, depth)
        if hasattr(t, "__attrs_attrs__"):
            return self._object(t, {a.name: getattr(v, a.name, None) for a in t.__attrs_attrs__},
                                depth)
        if _is_model(t):
            return self._object(t, v.model_dump(), depth)
        if _is_numpy(t) and hasattr(v, "tolist"):
            if getattr(v, "ndim", 1) == 0:
                return enc(v.item(), depth)
            return {TAG: "array", "dtype": str(getattr(v, "dtype", "")), "items": enc(v.tolist(), depth)}
        try:
            text = repr(v)
        except Exception:
            text = f"<{t.__name__}>"
        self.size += len(text)
        return {TAG: "repr", "type": _qualname(t), "repr": text}

    def _mapping(self, m: Mapping[Any, Any], depth: int) -> Any:
        redact = self.redact
        enc = self.encode
        if all(type(k) is str for k in m) and TAG not in m:
            out: dict[str, Any] = {}
            for k, val in m.items():
                out[k] = REDACTED if redact is not None and redact.is_secret(k) else enc(val, depth)
            return out
        items = []
        for k, val in m.items():
            hidden = redact is not None and isinstance(k, str) and redact.is_secret(k)
            items.append([enc(k, depth), REDACTED if hidden else enc(val, depth)])
        return {TAG: "dict", "items": items}

    def _object(self, t: type, fields: Mapping[str, Any], depth: int) -> Any:
        return {TAG: "object", "type": _qualname(t), "fields": self._mapping(fields, depth)}


def _is_model(t: type) -> bool:
    return hasattr(t, "model_fields") and hasattr(t, "model_dump")


def _is_numpy(t: type) -> bool:
    return getattr(t, "__module__", "").split(".", 1)[0] == "numpy"


def decode_value(value: Any) -> Any:
    """Read back what ``encode_value`` wrote: tagged forms become Python values again.

    ``object``, ``enum``, ``array`` and ``repr`` forms stay as their dicts (their classes may not
    exist where the trace is read). A truncated value becomes its head: the kept prefix of a
    string, or the kept prefix of the JSON text of anything else.
    """
    t = type(value)
    if t is list:
        return [decode_value(v) for v in value]
    if t is not dict:
        return value
    tag = value.get(TAG)
    if tag is None:
        return {k: decode_value(v) for k, v in value.items()}
    try:
        if tag == "tuple":
            return tuple(decode_value(v) for v in value["items"])
        if tag == "set":
            items = [decode_value(v) for v in value["items"]]
            try:
                return set(items)
            except TypeError:
                return items
        if tag == "dict":
            out = {}
            for k, v in value["items"]:
                key = decode_value(k)
                try:
                    out[key] = decode_value(v)
                except TypeError:
                    out[dumps(k)] = decode_value(v)
            return out
        if tag == "float":
            return float(value["value"])
        if tag == "int":
            return int(value["hex"], 16)
        if tag == "bytes":
            return base64.b64decode(value["base64"])
        if tag == "datetime":
            return _dt.datetime.fromisoformat(value["value"])
        if tag == "date":
            return _dt.date.fromisoformat(value["value"])
        if tag == "time":
            return _dt.time.fromisoformat(value["value"])
        if tag == "timedelta":
            return _dt.timedelta(seconds=value["seconds"])
        if tag == "decimal":
            return decimal.Decimal(value["value"])
        if tag == "uuid":
            return uuid.UUID(value["value"])
        if tag == "path":
            return PurePath(value["value"])
        if tag == "truncated":
            return value["head"]
    except (KeyError, TypeError, ValueError, decimal.InvalidOperation):
        pass
    return value
