"""Canonical encoding and blake3 fingerprints of call arguments and results.

The encoding is deterministic across processes (it never uses ``hash()`` or ``id()`` in its output)
and never raises. Every value is written with a one-letter type tag, so ``1``, ``1.0``, ``True`` and
``"1"`` differ, while dict key order and set order do not matter.

Fallbacks, in order, for values that are not plain data:
dataclasses, attrs classes and pydantic models are encoded by their fields; enums by class and value;
numpy arrays by dtype, shape and bytes (of object dtype: by their items); other mappings, sequences
and sets as such; generators and coroutines by the function they run; objects with a ``__dict__``
or ``__slots__`` by class name and attributes; objects with their own ``__repr__`` by class name and
that repr, memory addresses (`` at 0x...``) left out; anything else ("opaque") by its class name
alone. No fingerprint ever depends on where a value sits in memory, so equal values fingerprint
alike in every process. Two opaque objects of the same
class therefore fingerprint alike: a loop over such arguments is still judged by the other arguments
and by results. A structure that contains itself is encoded with a back-reference marker; nesting
deeper than ``MAX_DEPTH`` is cut with a marker.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import json
import math
import re
import types
import uuid
from collections.abc import Iterable, Mapping, Set
from pathlib import PurePath
from typing import Any

from blake3 import blake3

FINGERPRINT_BYTES = 16
MAX_DEPTH = 64

_NO_KEYS: frozenset[str] = frozenset()
_OBJECT_REPR: Any = object.__repr__
# Payloads from this size on are hashed in place: copying a megabyte into a fresh buffer costs
# more than hashing it (page faults on every new large allocation).
_STREAM_FROM = 1 << 16
# Encodings of short mapping keys already seen (parameter names, common result keys), bounded.
_KEYS: dict[str, bytes] = {}
_MAX_KEYS = 4096


def fingerprint(value: Any, volatile_keys: frozenset[str] = _NO_KEYS, prefix: bytes = b"") -> bytes:
    """Return a 16-byte blake3 fingerprint of ``prefix`` + ``value``'s canonical encoding.

    Keys of mappings (at any depth) whose lower-cased name is in ``volatile_keys`` are left out.
    Large payloads are fed to the hash piece by piece rather than copied into one encoding.
    """
    # The two commonest values, inlined: bound arguments (a flat mapping) and a text result.
    t = type(value)
    if t is dict:
        flat = _flat_mapping(value, volatile_keys)
        if flat is not None:
            return blake3(prefix + flat if prefix else flat).digest(FINGERPRINT_BYTES)
    elif t is str and len(value) < _STREAM_FROM // 4:  # at most 4 UTF-8 bytes per character
        b = value.encode("utf-8", "surrogatepass")
        return blake3(b"%bs%d:%b" % (prefix, len(b), b)).digest(FINGERPRINT_BYTES)
    elif t is int:  # a number result: the bytes _pieces writes for it
        return blake3(b"%bi%x;" % (prefix, value)).digest(FINGERPRINT_BYTES)
    pieces = _pieces(value, volatile_keys)
    if len(pieces) == 1:
        data = pieces[0]
        if len(data) < _STREAM_FROM:
            return blake3(prefix + data if prefix else data).digest(FINGERPRINT_BYTES)
        hasher = blake3(prefix)
        hasher.update(data)
        return hasher.digest(FINGERPRINT_BYTES)
    if sum(map(len, pieces)) < _STREAM_FROM:
        return blake3(prefix + b"".join(pieces)).digest(FINGERPRINT_BYTES)
    hasher = blake3(prefix)
    for piece in pieces:
        hasher.update(piece)
    return hasher.digest(FINGERPRINT_BYTES)


def fingerprint_result(value: Any, volatile_keys: frozenset[str]) -> bytes:
    """Fingerprint a call's result, ignoring volatile fields.

    A string that holds a JSON object or array (a common tool return type) is parsed first, so that
    a fresh ``request_id`` inside the text does not make an unchanged answer look new.
    """
    if volatile_keys and type(value) is str and value[:1] in ("{", "["):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: the text
            pass
    return fingerprint(value, volatile_keys)


def fingerprint_error(error: BaseException) -> bytes:
    """Fingerprint an exception by its class and message."""
    try:
        message = str(error)
    except Exception:
        message = ""
    return fingerprint(("error", _qualname(type(error)), message))


def encode(value: Any, volatile_keys: frozenset[str] = _NO_KEYS) -> bytes:
    """Return the canonical encoding of ``value``; never raises."""
    pieces = _pieces(value, volatile_keys)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _pieces(value: Any, volatile_keys: frozenset[str]) -> list[bytes]:
    """The canonical encoding of ``value`` as a list of pieces, large payloads left uncopied."""
    # Fast paths for what tools are called with and return most: a string, a number, and a flat
    # mapping of names to plain values (the bound arguments of most tools). They write exactly
    # the bytes the general encoder writes, without its per-value method calls.
    t = type(value)
    if t is str:
        b = value.encode("utf-8", "surrogatepass")
        if len(b) < _STREAM_FROM:
            return [b"s%d:%b" % (len(b), b)]
        return [b"s%d:" % len(b), b]
    if t is dict:
        flat = _flat_mapping(value, volatile_keys)
        if flat is not None:
            return [flat]
    elif t is int:
        return [b"i%x;" % value]
    out: list[bytes] = []
    try:
        _Encoder(out, volatile_keys).encode(value, 0)
    except Exception:  # pragma: no cover - the encoder guards every step; this is the last net
        out = [b"!", _qualname(type(value)).encode()]
    return out


def _flat_mapping(m: dict[Any, Any], volatile: frozenset[str]) -> bytes | None:
    """Encode a dict of string keys and str/int/None/bool/float values; None for anything else
    (including strings long enough to be worth hashing without a copy).

    Keys are distinct strings, so sorting the concatenated key+value encodings orders the pairs
    exactly as the general encoder's sort of (key, value) pairs does: two key encodings of
    different strings differ within the shorter one's bytes.
    """
    parts: list[bytes] = []
    keys = _KEYS
    try:
        for k, v in m.items():
            if type(k) is not str:
                return None
            if volatile and k.lower() in volatile:
                continue
            kb = keys.get(k)
            if kb is None:
                kb = _key(k)
            t = type(v)
            if t is str:
                vb = v.encode("utf-8", "surrogatepass")
                if len(vb) >= _STREAM_FROM:
                    return None  # the general encoder keeps a large payload as its own piece
                parts.append(b"%bs%d:%b" % (kb, len(vb), vb))
            elif t is int:
                parts.append(b"%bi%x;" % (kb, v))
            elif v is None:
                parts.append(kb + b"N")
            elif t is bool:
                parts.append(kb + (b"T" if v else b"F"))
            elif t is float:
                f = b"nan" if v != v else v.hex().encode()
                parts.append(b"%bf%b;" % (kb, f))
            else:
                return None
    except RuntimeError:  # changed size during iteration (another thread): take the slow path
        return None
    parts.sort()
    return b"{%b}" % b"".join(parts)


def _key(k: str) -> bytes:
    """The encoding of string key ``k``, remembered: tools are called with the same names."""
    b = k.encode("utf-8", "surrogatepass")
    kb = b"s%d:%b" % (len(b), b)
    if len(_KEYS) < _MAX_KEYS and len(b) <= 64:
        _KEYS[k] = kb
    return kb


def _qualname(tp: type) -> str:
    return f"{getattr(tp, '__module__', '?')}.{getattr(tp, '__qualname__', tp.__name__)}"


def _str_bytes(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


class _Encoder:
    __slots__ = ("active", "out", "volatile")

    def __init__(self, out: list[bytes], volatile: frozenset[str]) -> None:
        self.out = out
        self.volatile = volatile
        self.active: set[int] = set()

    def encode(self, v: Any, depth: int) -> None:
        out = self.out
        t = type(v)
        if t is str:
            b = _str_bytes(v)
            out.append(b"s%d:" % len(b))
            out.append(b)
        elif t is int:
            out.append(b"i%x;" % v)
        elif v is None:
            out.append(b"N")
        elif t is bool:
            out.append(b"T" if v else b"F")
        elif t is float:
            out.append(b"f" + (b"nan" if math.isnan(v) else v.hex().encode()) + b";")
        elif depth >= MAX_DEPTH:
            out.append(b"~")
        elif t is dict:
            self._mapping(v, depth)
        elif t is list or t is tuple:
            self._sequence(v, b"[" if t is list else b"(", depth)
        else:
            self._other(v, t, depth)

    def _enter(self, v: Any) -> bool:
        key = id(v)
        if key in self.active:
            self.out.append(b"^")
            return False
        self.active.add(key)
        return True

    def _mapping(self, m: Mapping[Any, Any], depth: int, tag: bytes = b"{") -> None:
        if not self._enter(m):
            return
        volatile = self.volatile
        sub = self._sub
        pairs: list[tuple[bytes, ...]] = []
        for k, val in list(m.items()):
            # String keys and string or int values (nearly all of JSON-like data) are written
            # inline: the same bytes ``_sub`` would give, without a nested encoder pass.
            if type(k) is str:
                if volatile and k.lower() in volatile:
                    continue
                kb = k.encode("utf-8", "surrogatepass")
                kb = b"s%d:%b" % (len(kb), kb)
            else:
                kb = sub(k, depth)
            t = type(val)
            if t is str:
                vb = val.encode("utf-8", "surrogatepass")
                if len(vb) < _STREAM_FROM:
                    pairs.append((kb, b"s%d:%b" % (len(vb), vb)))
                else:  # header and payload apart: sorts the same, and the payload is not copied
                    pairs.append((kb, b"s%d:" % len(vb), vb))
            elif t is int:
                pairs.append((kb, b"i%x;" % val))
            else:
                pairs.append((kb, sub(val, depth)))
        pairs.sort()
        out = self.out
        out.append(tag)
        for pair in pairs:
            out.extend(pair)
        out.append(b"}")
        self.active.discard(id(m))

    def _sequence(self, seq: Iterable[Any], tag: bytes, depth: int) -> None:
        if not self._enter(seq):
            return
        out = self.out
        out.append(tag)
        for item in list(seq):
            self.encode(item, depth + 1)
        out.append(b"]")
        self.active.discard(id(seq))

    def _set(self, s: Iterable[Any], depth: int) -> None:
        if not self._enter(s):
            return
        parts = sorted(self._sub(item, depth) for item in list(s))
        self.out.append(b"<")
        self.out.extend(parts)
        self.out.append(b">")
        self.active.discard(id(s))

    def _sub(self, v: Any, depth: int) -> bytes:
        saved = self.out
        self.out = []
        try:
            self.encode(v, depth + 1)
            return b"".join(self.out)
        finally:
            self.out = saved

    def _tagged(self, tag: bytes, tp: type) -> None:
        self.out.append(tag + _str_bytes(_qualname(tp)) + b":")

    def _other(self, v: Any, t: type, depth: int) -> None:
        out = self.out
        try:
            if isinstance(v, (bytes, bytearray, memoryview)):
                b = bytes(v)
                out.append(b"b%d:" % len(b))
                out.append(b)
            elif isinstance(v, enum.Enum):
                self._tagged(b"E", t)
                self.encode(v.value, depth + 1)
            elif isinstance(v, str):
                self._tagged(b"S", t)
                self.encode(str.__str__(v), depth + 1)
            elif isinstance(v, (int, float)) and not _is_numpy(t):
                self._tagged(b"n", t)
                self.encode(int(v) if isinstance(v, int) else float(v), depth + 1)
            elif isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
                self._tagged(b"D", t)
                self.encode(v.isoformat(), depth + 1)
            elif isinstance(v, _dt.timedelta):
                out.append(b"d" + repr(v.total_seconds()).encode() + b";")
            elif isinstance(v, (decimal.Decimal, uuid.UUID, PurePath, complex)):
                self._tagged(b"V", t)
                self.encode(str(v), depth + 1)
            elif dataclasses.is_dataclass(v) and not isinstance(v, type):
                self._object(v, t, {f.name: getattr(v, f.name, None) for f in dataclasses.fields(v)}, depth)
            elif hasattr(t, "__attrs_attrs__"):
                attrs = t.__attrs_attrs__
                self._object(v, t, {a.name: getattr(v, a.name, None) for a in attrs}, depth)
            elif hasattr(t, "model_fields") and hasattr(v, "model_dump"):
                self._object(v, t, v.model_dump(), depth)
            elif _is_numpy(t):
                self._numpy(v, t, depth)
            elif isinstance(v, Mapping):
                self._mapping(v, depth, b"M" + _str_bytes(_qualname(t)) + b"{")
            elif isinstance(v, (Set, frozenset, set)):
                self._set(v, depth)
            elif isinstance(v, (list, tuple)):
                self._tagged(b"L", t)
                self._sequence(v, b"[", depth)
            elif isinstance(v, type):
                out.append(b"t" + _str_bytes(_qualname(v)) + b";")
            elif callable(v) and hasattr(v, "__qualname__"):
                out.append(b"c" + _str_bytes(f"{getattr(v, '__module__', '?')}.{v.__qualname__}") + b";")
            elif isinstance(v, _RUNNING_CODE):
                # A generator or coroutine: its content is not there until it runs; the function
                # it runs names it.
                self._tagged(b"G", t)
                self.encode(getattr(v, "__qualname__", ""), depth + 1)
            else:
                self._fallback(v, t, depth)
        except Exception:
            out.append(b"!" + _str_bytes(_qualname(t)) + b";")

    def _object(self, v: Any, t: type, fields: Mapping[str, Any], depth: int) -> None:
        if not self._enter(v):
            return
        self._tagged(b"C", t)
        self._mapping(fields, depth + 1)
        self.active.discard(id(v))

    def _numpy(self, v: Any, t: type, depth: int) -> None:
        if hasattr(v, "tobytes") and hasattr(v, "shape") and hasattr(v, "dtype"):
            if getattr(v, "ndim", 1) == 0:
                self._tagged(b"n", t)
                self.encode(v.item(), depth + 1)
                return
            if v.dtype.hasobject:  # object items: their content, never their pointers
                self._tagged(b"A", t)
                self.out.append(_str_bytes(f"{v.dtype.str}{tuple(v.shape)}"))
                self._sequence(v.tolist(), b"[", depth)
                return
            data = v.tobytes()
            self._tagged(b"A", t)
            self.out.append(_str_bytes(f"{v.dtype.str}{tuple(v.shape)}") + b"%d:" % len(data))
            self.out.append(data)
        else:
            self._fallback(v, t, depth)

    def _fallback(self, v: Any, t: type, depth: int) -> None:
        state = getattr(v, "__dict__", None)
        if isinstance(state, dict):
            self._object(v, t, state, depth)
            return
        slots = [s for k in t.__mro__ for s in _slot_names(k)]
        if slots:
            self._object(v, t, {s: getattr(v, s, None) for s in slots}, depth)
            return
        if isinstance(v, Iterable) and hasattr(v, "__len__"):
            self._tagged(b"L", t)
            self._sequence(v, b"[", depth)
            return
        if t.__repr__ is not _OBJECT_REPR:
            self._tagged(b"R", t)
            self.encode(_ADDRESS.sub("", repr(v)), depth + 1)
            return
        self._tagged(b"O", t)


# " at 0x7f3a..." in a repr (a lock, a socket, an object inside a container's repr): a memory
# address, different in every process and for every copy. Left out, so that the repr's content
# is all that is fingerprinted.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_RUNNING_CODE = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


def _slot_names(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    return tuple(s for s in slots if s not in ("__dict__", "__weakref__"))


def _is_numpy(t: type) -> bool:
    return getattr(t, "__module__", "").split(".", 1)[0] == "numpy"


# Fingerprints that give nothing away and that layers compare against by value (iterations'
# "returned None"): written as they are, so that replay reads them as the live layers saw them.
_PUBLIC_FPS = frozenset({fingerprint(None)})


def keyed(fp: bytes, key: bytes) -> bytes:
    """The form of fingerprint ``fp`` written to traces and logs: keyed blake3 under ``key`` (a
    run's random secret). Equal exactly when the fingerprints are, within one key; without the
    key, a guess at the hashed value (a redacted password) cannot be checked against it."""
    if fp in _PUBLIC_FPS:
        return fp
    return blake3(fp, key=key).digest(FINGERPRINT_BYTES)
