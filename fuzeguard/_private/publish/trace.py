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
``add_cost()`` outside any call changed the run since the previous line, and ``"resumed"`` (the
budgets raised, by key) on the first line after ``run.resume()``.

Values that JSON cannot hold are written in a tagged form, ``{"$fuze": "<kind>", ...}``
(``values.py``), that replay reads back; results and arguments larger than
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

import dataclasses
import datetime as _dt
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fuzeguard._private.configuration.schema import plain_data_key, schema
from fuzeguard._private.configuration.settings import Settings
from fuzeguard._private.meaning.records import Call, Decision
from fuzeguard._private.meaning.secrets import Redactor, hide_unnamed, redactor, scrub
from fuzeguard._private.meaning.values import TAG, Encoder, dumps, scrub_tree
from fuzeguard._private.publish.events import (
    CallCompleted,
    CallInterrupted,
    CallRefused,
    CostAdded,
    RunClosed,
    RunReset,
    RunResumed,
    TurnEnded,
)
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals

FORMAT_VERSION = 1

# Paths whose last attempt failed: the error is logged once, not once per run, until a line
# is written there again.
_failing: set[str] = set()
_failing_lock = new_lock()


def trace_path(plan: Plan, run: RunInternals) -> str | None:
    """Where a run's trace goes, decided by its first call: ``trace=`` set in code for the
    run or that call's guard, then ``FUZE_TRACE``, then the config file."""
    path = plan.settings.trace or run.config.settings_for(None)["trace"]
    if run.config.origin_of("trace") != "code":
        path = os.environ.get("FUZE_TRACE") or path
    return path or None


def _open(path: str, run: RunInternals) -> tuple[int | None, str, bool]:
    """Open the trace file for ``run``: the file ``path``, or a new file in the directory
    ``path`` (file descriptor, the file's path, whether it ends mid-line).

    A path ending in ``/`` or naming an existing directory is a directory: each run gets its own
    file there, named by its start time (UTC) and run id, such as
    ``20261122T085300Z-3f2a9c1b7d4e.jsonl``. Never raises; on failure the descriptor is None.
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
        return None, target, False
    return fd, target, torn


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


def _failed(path: str, target: str, run: RunInternals, exc: OSError) -> None:
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
    """Writes one run's calls to its trace: a subscriber of the run's events; thread-safe.

    Every live run has one (``sinks.attach_standard``). The file is opened when the run's first
    call ends or is refused, at the path ``trace_path`` gives for that call; a run with no trace
    stops listening to its calls until it is closed. A reset, the end of a turn and cost added
    outside any call are marked on the next line (``reset``, ``turn``, ``extra_cost``).
    """

    __slots__ = (
        "_calls_heard",
        "_extra",
        "_fd",
        "_fns",
        "_lock",
        "_ok",
        "_reset",
        "_resumed",
        "_settled",
        "_started",
        "_torn",
        "_turn",
        "path",
        "run",
        "target",
    )

    def __init__(self, run: RunInternals) -> None:
        self.run = run
        self._fd: int | None = None
        self.path: str | None = None
        self.target: str | None = None
        self._lock = new_lock()
        self._fns: set[str] = set()
        self._started = False
        self._settled = False
        self._reset: int | None = None
        self._turn: int | None = None
        self._extra = 0.0
        self._resumed: dict[str, Any] | None = None
        self._ok = False
        self._torn = False
        self._calls_heard: Callable[[], None] | None = None

    def attach(self) -> None:
        """Subscribe to the run's events."""
        subscribe = self.run.subscribe
        subscribe(self._marked, TurnEnded, RunReset, CostAdded, RunResumed)
        subscribe(self._closed, RunClosed)
        self._hear_calls()

    def _hear_calls(self) -> None:
        self._calls_heard = self.run.subscribe(
            self._call_event, CallCompleted, CallRefused, CallInterrupted
        )

    @property
    def active(self) -> bool:
        """True while the trace is open and writable."""
        return self._fd is not None

    def _settle(self, plan: Plan) -> bool:
        """Open the trace on the run's first call (the lock is held); False: no trace. Other
        threads see ``_settled`` only once the file is open."""
        path = trace_path(plan, self.run)
        if path is None:
            unsubscribe, self._calls_heard = self._calls_heard, None
            if unsubscribe is not None:
                unsubscribe()  # nothing to write: the run's calls are not this recorder's business
            self._settled = True
            return False
        self.path = path
        self._fd, self.target, self._torn = _open(path, self.run)
        self._started = False
        self._fns.clear()
        self._settled = True
        return self._fd is not None

    def _call_event(self, event: CallCompleted | CallRefused | CallInterrupted) -> None:
        if not self._settled:
            with self._lock:
                if not self._settled and not self._settle(event.plan):
                    return
        if self._fd is None:
            return
        if type(event) is CallCompleted:
            self.write_call(event)
        elif type(event) is CallRefused:  # killed, skipped, or its run was already killed
            self.write_refused(event.plan, event.call, event.decision, None, None)
        else:
            assert type(event) is CallInterrupted
            self.write_refused(event.plan, event.call, event.decision, event.start, event.chunks)

    def _marked(self, event: TurnEnded | RunReset | CostAdded | RunResumed) -> None:
        with self._lock:
            if type(event) is RunResumed:
                self._resumed = dict(event.budgets)
            elif type(event) is TurnEnded:
                self._turn = event.turn
            elif type(event) is RunReset:
                self._reset = event.resets
                self._extra = 0.0  # cost added before the reset went with it
            else:
                assert type(event) is CostAdded
                self._extra += event.amount

    def _closed(self, event: RunClosed) -> None:
        """The run was closed: close the file; a later call opens the trace again."""
        with self._lock:
            self._disable()
            self._settled = False
            if self._calls_heard is None:
                self._hear_calls()

    def write_call(self, event: CallCompleted) -> None:
        """Write a completed call: its arguments, result or error, cost and timing."""
        plan, call, record, error = event.plan, event.call, event.record, event.error
        s = plan.settings
        red = redactor(s.redact)
        unnamed = plan.binder.unnamed
        values = red.secret_values(call.arguments, unnamed=unnamed)
        line: dict[str, Any] = {"fn": call.fn}
        if s.record_args:
            line["args"] = _args_value(hide_unnamed(call.arguments, unnamed), s, red, values)
        if error is None:
            if s.record_results:
                line["result"] = _result_value(event.result, s.trace_max_result_bytes, red, values)
        else:
            line["error"] = _error_text(error, s, values)
        if error is None and record.error is not None:
            line["failed"] = True  # the result reads as an error: replay knows without the result
        if call.kind != plan.kind:
            line["kind"] = call.kind  # refined from the arguments: replay knows without them
        if event.stream:
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
        _add_detections(line, event.decision)
        self._write(plan, line)

    def write_refused(
        self,
        plan: Plan,
        call: Call,
        decision: Decision,
        start: float | None,
        chunks: list[Any] | None,
    ) -> None:
        """Write a call that left no record: killed, skipped, or interrupted while running.

        ``chunks`` are what a generator yielded before it was interrupted (or killed mid-stream).
        """
        s = plan.settings
        red = redactor(s.redact)
        unnamed = plan.binder.unnamed
        values = red.secret_values(call.arguments, unnamed=unnamed)
        line: dict[str, Any] = {"fn": call.fn}
        if s.record_args:
            line["args"] = _args_value(hide_unnamed(call.arguments, unnamed), s, red, values)
        if chunks is not None:
            if s.record_results:
                line["result"] = _result_value(chunks, s.trace_max_result_bytes, red, values)
            line["stream"] = True
        line["args_fp"] = self.run.public_fp(call.args_fp).hex()
        if chunks is not None or decision.action in ("call", "warn"):
            line["interrupted"] = True
        line["ts"] = self.run.elapsed() if start is None else start
        _add_detections(line, decision)
        if not decision.detections and decision.action == "kill":
            line["action"] = "kill"  # refused because its run was already killed
        self._write(plan, line)

    def _write(self, plan: Plan, line: dict[str, Any]) -> None:
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
                if self._reset is not None:
                    line["reset"] = self._reset
                    self._reset = None
                if self._turn is not None:
                    line["turn"] = self._turn
                    self._turn = None
                if self._resumed is not None:
                    line["resumed"] = self._resumed
                    self._resumed = None
                fn = line["fn"]
                if fn not in self._fns:
                    self._fns.add(fn)
                    options = code_options(plan, run)
                    if options:
                        line["guard"] = options
                if self._extra:
                    line["extra_cost"] = self._extra
                    self._extra = 0.0
                data = (_dumps_line(line) + "\n").encode("utf-8", "backslashreplace")
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
                _failed(self.path or "", self.target or "", run, exc)
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


def _dumps_line(line: dict[str, Any]) -> str:
    """A line's JSON text; a field JSON cannot hold (an infinite number that got past the checks
    where values enter) is written as ``{"$fuze": "unwritable", "type": ...}``, so that the call
    still has its line."""
    try:
        return dumps(line)
    except (ValueError, TypeError):
        pass
    safe: dict[str, Any] = {}
    for key, value in line.items():
        try:
            dumps(value)
        except (ValueError, TypeError):
            value = {TAG: "unwritable", "type": type(value).__name__}
        safe[key] = value
    return dumps(safe)


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


def _run_info(run: RunInternals) -> dict[str, Any]:
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
    for key in schema():
        if plain_data_key(key) and config.origin_of(key) == "code" and _plain(values[key]):
            settings[key] = _as_json_setting(values[key])
    if settings:
        info["settings"] = settings
    return info


def code_options(plan: Plan, run: RunInternals) -> dict[str, Any]:
    """The settings a guard resolved differently from its run's config: those set in code.

    Written on a function's first line so that replay applies them as the live guard did.
    Only plain data is written (``plain_data_key``): replay ignores keys that may hold code.
    """
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
    encoder = Encoder(red)
    encoded = encoder.top(arguments)
    if encoder.size * 6 <= cap or not isinstance(encoded, dict):
        return scrub_tree(encoded, values)
    return {name: scrub_tree(_cut(value, cap), values) for name, value in encoded.items()}


def _small_plain(arguments: dict[str, Any], cap: int, red: Redactor) -> bool:
    """Short plain values under names that are not secret, none of them secret-shaped."""
    size = 0
    for k, v in arguments.items():
        t = type(v)
        if t is str:
            size += len(v)
            if scrub(v) != v:
                return False
        elif t is int:
            if v > 10**15 or v < -(10**15):
                return False  # the encoder measures it, and writes a very long one in hex
        elif not (t is bool or v is None):
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
        return scrub_tree(_cut(value, cap), values)
    encoder = Encoder(red)
    encoded = encoder.top(value)
    if encoder.size * 6 <= cap:
        return scrub_tree(encoded, values)
    return scrub_tree(_cut(encoded, cap), values)


def _cut(encoded: Any, cap: int) -> Any:
    """``encoded`` itself if its JSON text fits in ``cap`` bytes, else a truncation marker."""
    if isinstance(encoded, str):
        raw = encoded.encode("utf-8", "surrogatepass")
        if len(raw) <= cap:
            return encoded
        head = raw[:cap].decode("utf-8", "ignore")
        return {TAG: "truncated", "type": "str", "bytes": len(raw), "head": head}
    text = dumps(encoded)
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
