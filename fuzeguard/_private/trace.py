"""Traces: every call of a run appended to a JSON Lines file as it happens.

One JSON object per call, written with a single ``write()`` as the call completes (or is killed,
skipped or interrupted), so a crash or a kill loses nothing that was already written and lines
from concurrent calls never interleave. A process killed in the middle of writing a very large
line can leave a fragment at the end of the file; the next writer starts on a fresh line, and
replay reports the fragment and reads every whole line. ``docs/tracing.md`` documents the format; in short::

    {"fn": "web_search", "args": {"query": "..."}, "result": "...", "args_fp": "<hex>",
     "result_fp": "<hex>", "cost": 0.002, "ts": 1.25, "duration": 0.3, "run": "<run id>"}

plus ``"error"`` for a failed call, ``"detections"`` and ``"action"`` when something fired,
``"interrupted": true`` for a call that began but never finished, ``"stream": true`` for a
generator's call (its result is the list of its chunks), ``"run_info"`` on a run's first
line, ``"guard"`` (the settings a guard sets in code) on a function's first line, and
``"reset"``, ``"turn"`` and ``"extra_cost"`` when ``run.reset()``, ``run.end_turn()`` or an
``add_cost()`` outside any call changed the run since the previous line.

Values that JSON cannot hold are written in a tagged form, ``{"$fuze": "<kind>", ...}``
(``encode_value``), that ``decode_value`` reads back; results and arguments larger than
``trace_max_result_bytes`` are cut to a ``{"$fuze": "truncated", ...}`` marker.

Secrets (``secrets.py``): values under secret-named keys are written as ``"[redacted]"``, and
secret-shaped text (and the redacted values themselves, wherever else they appear) is scrubbed in
arguments, results, JSON held in strings and error messages. Fingerprints are written keyed with
the run's random secret (``Run.public_fp``): equal exactly when the live ones are within the run,
so replay sees what the live guard saw, but useless for guessing a redacted value.

A trace that cannot be written (a path that is not writable, a full disk) logs one
``fuzeguard.trace_error`` event and the run goes on untraced: tracing never breaks a call.
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
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Set
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from fuzeguard._private.log import emit
from fuzeguard._private.records import Call, CallRecord, Decision
from fuzeguard._private.secrets import REDACTED, Redactor, redactor, scrub
from fuzeguard._private.settings import Settings

if TYPE_CHECKING:
    from fuzeguard._private.plan import Plan
    from fuzeguard._private.run import Run

FORMAT_VERSION = 1
TAG = "$fuze"
MAX_DEPTH = 64

# Paths whose last attempt failed: the error is logged once, not once per run, until a line
# is written there again.
_failing: set[str] = set()
_failing_lock = threading.Lock()


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


_dumps = _make_dumps()


def open_recorder(path: str, run: Run) -> TraceRecorder:
    """Open the trace for ``run``: the file ``path``, or a new file in the directory ``path``.

    A path ending in ``/`` or naming an existing directory is a directory: each run gets its own
    file there, named by its start time (UTC) and run id, such as
    ``20261122T085300Z-3f2a9c1b7d4e.jsonl``. Never raises; on failure the recorder is disabled.
    """
    target = path
    try:
        if path.endswith(("/", os.sep)) or os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(run.started_at))
            target = os.path.join(path, f"{stamp}-{run.id}.jsonl")
        else:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
        torn = _ends_mid_line(target)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(target, flags, 0o600)
    except OSError as exc:
        _failed(path, target, run, exc)
        return TraceRecorder(None, path, target, run)
    recorder = TraceRecorder(fd, path, target, run)
    recorder._torn = torn
    return recorder


def _ends_mid_line(path: str) -> bool:
    """Whether the file at ``path`` ends inside a line: a process killed while writing a big line
    left a fragment there. The next line then starts with a newline of its own, so that it is not
    glued to the fragment (replay reports the fragment and reads every whole line)."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            if end == 0:
                return False
            f.seek(end - 1)
            return f.read(1) != b"\n"
    except OSError:
        return False


def _failed(path: str, target: str, run: Run, exc: OSError) -> None:
    with _failing_lock:
        if path in _failing:
            return
        _failing.add(path)
    emit(
        "error",
        "fuzeguard.trace_error",
        path=target,
        run_id=run.id,
        run_name=run.name,
        error=exc.strerror or repr(exc),
        errno=exc.errno,
        message=(
            f"cannot write the trace {target}: {exc.strerror or exc}; this run goes on without a "
            "trace (lines already written stay valid). Check the trace setting or FUZE_TRACE, "
            "the directory's permissions and free disk space."
        ),
    )


class TraceRecorder:
    """Writes one run's calls to its trace; thread-safe. Built by ``open_recorder``."""

    __slots__ = (
        "_cost",
        "_fd",
        "_fns",
        "_lock",
        "_ok",
        "_resets",
        "_started",
        "_torn",
        "_turn",
        "path",
        "run",
        "target",
    )

    def __init__(self, fd: int | None, path: str, target: str, run: Run) -> None:
        self._fd = fd
        self.path = path
        self.target = target
        self.run = run
        self._lock = threading.Lock()
        self._fns: set[str] = set()
        self._started = False
        self._resets = run.resets
        self._turn = 1
        self._cost = 0.0
        self._ok = False
        self._torn = False

    @property
    def active(self) -> bool:
        """False once the trace could not be opened or written."""
        return self._fd is not None

    def write_call(
        self,
        plan: Plan,
        call: Call,
        record: CallRecord,
        decision: Decision,
        result: Any,
        error: BaseException | None,
        stream: bool = False,
    ) -> None:
        """Write a completed call: its arguments, result or error, cost and timing."""
        if self._fd is None:
            return
        s = plan.settings
        red = redactor(s.redact)
        values = red.secret_values(call.arguments)
        line: dict[str, Any] = {"fn": call.fn}
        if s.record_args:
            line["args"] = _args_value(call.arguments, s, red, values)
        if error is None:
            if s.record_results:
                line["result"] = _result_value(result, s.trace_max_result_bytes, red, values)
        else:
            line["error"] = _error_text(error, s, values)
        if error is None and record.error is not None:
            line["failed"] = True  # the result reads as an error: replay knows without the result
        if call.kind != plan.kind:
            line["kind"] = call.kind  # refined from the arguments: replay knows without them
        if stream:
            line["stream"] = True
        run = self.run
        line["args_fp"] = run.public_fp(call.args_fp).hex()
        if record.result_fp is not None:
            line["result_fp"] = run.public_fp(record.result_fp).hex()
        if record.cost is not None:
            line["cost"] = record.cost
        # Full precision: layers that measure rates (cost_velocity) see exactly the live times.
        line["ts"] = record.start
        if record.duration is not None:
            line["duration"] = record.duration
        _add_detections(line, decision)
        self._write(plan, line, record.cost)

    def write_refused(
        self,
        plan: Plan,
        call: Call,
        decision: Decision,
        start: float | None = None,
        chunks: list[Any] | None = None,
    ) -> None:
        """Write a call that left no record: killed, skipped, or interrupted while running.

        ``chunks`` are what a generator yielded before it was interrupted (or killed mid-stream).
        """
        if self._fd is None:
            return
        s = plan.settings
        red = redactor(s.redact)
        values = red.secret_values(call.arguments)
        line: dict[str, Any] = {"fn": call.fn}
        if s.record_args:
            line["args"] = _args_value(call.arguments, s, red, values)
        if chunks is not None:
            if s.record_results:
                line["result"] = _result_value(chunks, s.trace_max_result_bytes, red, values)
            line["stream"] = True
        line["args_fp"] = self.run.public_fp(call.args_fp).hex()
        if chunks is not None or decision.action in ("call", "warn"):
            line["interrupted"] = True
        line["ts"] = self.run.elapsed() if start is None else start
        _add_detections(line, decision)
        self._write(plan, line, None)

    def _write(self, plan: Plan, line: dict[str, Any], cost: float | None) -> None:
        run = self.run
        with self._lock:
            fd = self._fd
            if fd is None:
                return
            try:
                line["run"] = run.id
                store = run._store
                if store is not None:
                    store.annotate(run, line)
                if not self._started:
                    self._started = True
                    line["run_info"] = _run_info(run)
                if run.resets != self._resets:
                    self._resets = run.resets
                    self._cost = 0.0
                    line["reset"] = run.resets
                if run._turn != self._turn:
                    self._turn = run._turn
                    line["turn"] = run._turn
                fn = line["fn"]
                if fn not in self._fns:
                    self._fns.add(fn)
                    options = code_options(plan, run)
                    if options:
                        line["guard"] = options
                # Cost added with add_cost() outside any call reaches the run but no record.
                spent = run._cost if store is None else store.own_cost(run)
                expected = self._cost + (cost or 0.0)
                if abs(spent - expected) > 1e-9 * max(1.0, abs(expected)):
                    line["extra_cost"] = spent - expected
                self._cost = spent
                data = (_dumps(line) + "\n").encode("utf-8", "backslashreplace")
                if self._torn:
                    self._torn = False
                    data = b"\n" + data
                # One write() of the whole line to a file opened with O_APPEND: the line lands
                # whole after everything already there, even with other processes appending.
                # Only a kill in the middle of a very large write can cut it short.
                while data:
                    written = os.write(fd, data)
                    data = data[written:]
                if not self._ok:
                    self._ok = True
                    with _failing_lock:
                        _failing.discard(self.path)
            except OSError as exc:
                self._disable()
                _failed(self.path, self.target, run, exc)
            except Exception as exc:  # an encoding bug must not break the call, nor lose the trace
                emit("error", "fuzeguard.trace_error", path=self.target, run_id=run.id,
                     error=repr(exc), message=f"a call to {line.get('fn')} could not be written "
                     "to the trace")

    def _disable(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        """Close the file. Every line is already written; nothing is buffered."""
        with self._lock:
            self._disable()


def _add_detections(line: dict[str, Any], decision: Decision) -> None:
    if not decision.detections:
        return
    found = []
    for d in decision.detections:
        item: dict[str, Any] = {"layer": d.layer, "kind": d.kind, "action": d.action}
        if d.count is not None:
            item["count"] = d.count
        if d.threshold is not None:
            item["threshold"] = d.threshold
        if d.similarity is not None:
            item["similarity"] = d.similarity
        item["message"] = d.message
        found.append(item)
    line["detections"] = found
    # Observe mode lets the call through whatever its detections would have done.
    line["action"] = "observe" if decision.action == "call" else decision.action


def _run_info(run: Run) -> dict[str, Any]:
    info: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "name": run.name,
        "id": run.id,
        "started": _dt.datetime.fromtimestamp(run.started_at, _dt.timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
    }
    settings = {}
    config = run.config
    values = config.settings_for(None)
    from fuzeguard._private.config import plain_data_key, schema

    for key in schema():
        if plain_data_key(key) and config.origin_of(key) == "code" and _plain(values[key]):
            settings[key] = _as_json_setting(values[key])
    if settings:
        info["settings"] = settings
    return info


def code_options(plan: Plan, run: Run) -> dict[str, Any]:
    """The settings a guard resolved differently from its run's config: those set in code.

    Written on a function's first line so that replay applies them as the live guard did.
    Only plain data is written (``plain_data_key``): replay ignores keys that may hold code.
    """
    from fuzeguard._private.config import plain_data_key

    values = run.config.settings_for(plan.name)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        if not plain_data_key(f.name):
            continue
        value = getattr(plan.settings, f.name)
        if value != values.get(f.name) and _plain(value):
            out[f.name] = _as_json_setting(value)
    for layer in plan.layers:
        if dataclasses.is_dataclass(layer):
            for f in dataclasses.fields(layer):
                if f.name in values and f.name not in out and plain_data_key(f.name):
                    value = getattr(layer, f.name)
                    if value != values[f.name] and _plain(value):
                        out[f.name] = _as_json_setting(value)
    exempt = set(plan.settings.exempt_from)
    names = list(plan.requested)
    if names != [n for n in plan.settings.layers if n not in exempt]:
        out["layers"] = names
    return out


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return False


def _as_json_setting(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _args_value(
    arguments: Mapping[str, Any], s: Settings, red: Redactor, values: list[str]
) -> Any:
    """The arguments as written: redacted, and each one cut to the cap if too big."""
    cap = s.trace_max_result_bytes
    if not values and type(arguments) is dict and _small_plain(arguments, cap, red):
        return arguments  # the common case: a few short strings and numbers, written as they are
    encoder = _Encoder(red)
    encoded = encoder.top(arguments)
    if encoder.size * 6 <= cap or not isinstance(encoded, dict):
        return _scrub_tree(encoded, values)
    return {name: _scrub_tree(_cut(value, cap), values) for name, value in encoded.items()}


def _small_plain(arguments: dict[str, Any], cap: int, red: Redactor) -> bool:
    """Short plain values under names that are not secret, none of them secret-shaped."""
    size = 0
    for k, v in arguments.items():
        t = type(v)
        if t is str:
            size += len(v)
            if scrub(v) != v:
                return False
        elif not (t is int or t is bool or v is None):
            return False
        if type(k) is not str or red.is_secret(k):
            return False
    # JSON escapes can make a character up to six; under a sixth of the cap is always safe.
    return size * 6 <= cap


def _result_value(value: Any, cap: int, red: Redactor, values: list[str]) -> Any:
    """The result as written: redacted and scrubbed, tagged where JSON cannot hold it, cut to
    the cap if too big."""
    if type(value) is str:
        if len(value) * 6 <= cap:
            return scrub(value, values)
        return _scrub_tree(_cut(value, cap), values)
    encoder = _Encoder(red)
    encoded = encoder.top(value)
    if encoder.size * 6 <= cap:
        return _scrub_tree(encoded, values)
    return _scrub_tree(_cut(encoded, cap), values)


def _scrub_tree(value: Any, values: list[str], depth: int = 0) -> Any:
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
        return [_scrub_tree(v, values, depth + 1) for v in value]
    if t is dict:
        return {k: _scrub_tree(v, values, depth + 1) for k, v in value.items()}
    return value


def _cut(encoded: Any, cap: int) -> Any:
    """``encoded`` itself if its JSON text fits in ``cap`` bytes, else a truncation marker."""
    if isinstance(encoded, str):
        raw = encoded.encode("utf-8", "surrogatepass")
        if len(raw) <= cap:
            return encoded
        head = raw[:cap].decode("utf-8", "ignore")
        return {TAG: "truncated", "type": "str", "bytes": len(raw), "head": head}
    text = _dumps(encoded)
    size = len(text) if text.isascii() else len(text.encode("utf-8", "backslashreplace"))
    if size <= cap:
        return encoded
    return {TAG: "truncated", "type": "json", "bytes": size, "head": text[:cap]}


def _error_text(error: BaseException, s: Settings, values: list[str]) -> str:
    name = type(error).__name__
    if not s.record_results:
        return name
    try:
        message = str(error)
    except Exception:
        message = ""
    if not message:
        return name
    limit = s.trace_max_result_bytes
    if len(message) > limit:
        message = message[:limit] + "…"
    return f"{name}: {scrub(message, values)}"


# --------------------------------------------------------------------------- values


def _qualname(tp: type) -> str:
    return f"{getattr(tp, '__module__', '?')}.{getattr(tp, '__qualname__', tp.__name__)}"


def encode_value(value: Any, redact: Redactor | None = None) -> Any:
    """A JSON-safe form of ``value``: plain JSON as is, anything else tagged (never raises).

    - strings, finite numbers, booleans, None, lists, and dicts with string keys: as they are;
    - ``{"$fuze": "float", "value": "nan" | "inf" | "-inf"}``;
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
    encoded = _Encoder(redact).top(value)
    return encoded if redact is None else _scrub_tree(encoded, [])


class _Encoder:
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
                items.sort(key=_dumps)
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
            return int(v)
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
                    out[_dumps(k)] = decode_value(v)
            return out
        if tag == "float":
            return float(value["value"])
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
