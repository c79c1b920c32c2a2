"""Replay: feed recorded trace lines through the same decision core, without executing anything.

Each line becomes the ``Call`` and ``CallRecord`` the live guard built: the recorded fingerprints
when present (they are those of the full, unredacted values), else the values fingerprinted the way
the live guard does. Each function's layers are resolved by name exactly as a live guard's plan is
(defaults < config file < ``[functions.NAME]`` < the guard's code settings recorded in the trace).
Time comes from the lines' ``ts``, so ``max_duration`` fires where it did live.

Rules: a missing ``result``/``error``/``cost``/``ts`` is unknown; after a kill the rest of that
run is not evaluated; a skipped call is not executed; every trace (and every run inside one trace
file) is an independent run.

A trace is data, never code: of the settings a trace records, replay applies only plain data
(``plain_data_key``: numbers, switches, action and layer names), validated as code settings are,
and ignores, with one notice per trace, those that may name code or files (``embed``, ``cost``,
``skip_value``, ``trace``). Layers are built-in names only.

One hostile line never ends a replay: every line is read with a bounded length, parsed with a
bounded depth, and checked field by field; whatever is wrong with it is reported once, with file
and line number, and the rest is replayed. A line glued to the fragment of a line a killed writer
left unfinished is recovered.

A gzip-compressed trace (``.jsonl.gz``, or any file or standard input that starts with gzip's
magic bytes) is read the same way: the bounds apply to the decompressed text, and a truncated or
corrupt archive is reported at the line where it broke, after every line before it is replayed.
"""

from __future__ import annotations

import gzip
import io
import json
import json.scanner
import math
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.schema import plain_data_key, schema
from fuzeguard._private.configuration.validation import validate_code_options
from fuzeguard._private.judging.completion import UNKNOWN, complete
from fuzeguard._private.judging.plan import Plan
from fuzeguard._private.judging.plan_cache import PlanCache
from fuzeguard._private.judging.watch import StreamWatch
from fuzeguard._private.meaning.kinds import KINDS
from fuzeguard._private.meaning.outcome import TEXT_ERROR
from fuzeguard._private.meaning.records import Call, Decision, Detection
from fuzeguard._private.meaning.values import TAG, decode_value
from fuzeguard._private.publish.events import Detected, RunKilled
from fuzeguard._private.runs.budget import BUDGETS
from fuzeguard._private.runs.exceptions import ConfigError, FuzeguardError
from fuzeguard._private.runs.run import Run

_scanner: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed types the context as the class
)
_NUMBER = (int, float)

# The longest line read (in characters). Lines are at most a few times trace_max_result_bytes
# long (64 KiB by default); a longer one is reported and skipped. If its end does not come within
# as many characters again, the input is taken for something that is not a trace (``fuze replay
# -`` reading /dev/zero) and the rest of it is not read.
MAX_LINE = 1 << 28
# The deepest nesting a line may have. The writer cuts values at 64 levels, and a tagged value
# takes at most three JSON levels per level of the value.
MAX_LINE_DEPTH = 200
# Positions tried when looking for a whole line glued to the fragment of a torn one.
_RECOVER_TRIES = 16
# Problems kept in a summary; all are counted and passed to ``on_problem``.
KEEP_PROBLEMS = 1000
# Runs of one trace file replayed at once. Runs sharing a file interleave, but only a few at a
# time; past this many, the run that started first is closed, so a trace of a million run ids
# replays in bounded memory.
MAX_OPEN_RUNS = 10_000
_LINE_START = '{"fn":'
# The files a directory given to replay stands for.
TRACE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")


@dataclass(frozen=True, slots=True)
class ReplayedDetection:
    """A detection found while replaying: where (trace, call number, line) and what.

    ``call`` is the 1-based index of the call in the trace: every non-blank line is one call, so
    for a trace of one run it is the live call index.
    """

    trace: str
    call: int
    line: int
    run: str | None
    detection: Detection

    def as_json(self) -> dict[str, Any]:
        """The ``fuze replay --format json`` object: exactly the eight documented keys."""
        d = self.detection
        return {
            "trace": self.trace,
            "call": self.call,
            "fn": d.fn,
            "layer": d.layer,
            "action": d.action,
            "count": d.count,
            "threshold": d.threshold,
            "message": d.message,
        }


@dataclass(frozen=True, slots=True)
class Problem:
    """A line that could not be replayed as written (it is skipped, or a field is unknown)."""

    trace: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.trace}:{self.line}: {self.message}"


@dataclass(slots=True)
class TraceSummary:
    """What replaying one trace found.

    ``detections`` holds the first ``Replayer.keep`` detections (all by default); ``detected``,
    ``by_layer`` and ``by_action`` count every one. ``problems`` holds the first ``KEEP_PROBLEMS``
    problems and ``problem_count`` counts them all. ``ignored_settings`` names the settings the
    trace recorded that replay ignored because they may name code or files.
    """

    trace: str
    calls: int = 0
    runs: int = 0
    # Lines that were calls (a JSON object with a "fn"); a file with lines and none of them is
    # not a trace.
    call_lines: int = 0
    detected: int = 0
    detections: list[ReplayedDetection] = field(default_factory=list)
    by_layer: dict[str, int] = field(default_factory=dict)
    by_action: dict[str, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    kills: list[ReplayedDetection] = field(default_factory=list)
    not_evaluated: int = 0
    problem_count: int = 0
    ignored_settings: set[str] = field(default_factory=set)

    @property
    def killed_runs(self) -> int:
        """How many runs were killed: a run resumed and killed again is one run killed more
        than once (``kills`` holds each kill)."""
        return len({kill.run for kill in self.kills})


class _Clock:
    """The replay clock: the run's time is whatever the last line's ``ts`` said."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _replayed(**arguments: Any) -> None:
    """Stands in for a traced function: replay binds nothing, ``args`` are already by name."""


_error_types: dict[str, type[Exception]] = {}
_MAX_ERROR_TYPES = 4096


def _error_object(text: str) -> Exception:
    """An exception of the recorded class name, for layers that look at the error.

    The class is made here (a plain ``Exception`` subclass with that name): nothing named by the
    trace is imported. A text that does not start with a class name names the class whole, and
    is its message too: every recorded message is kept (whether a failure says something is
    decided by what it says, ``dedup.bare_failure``, not by how the trace shaped it)."""
    name, _, message = text.partition(": ")
    if not name.isidentifier():
        name, message = text, text
    cls = _error_types.get(name)
    if cls is None:
        cls = type(name, (Exception,), {"__module__": "fuzeguard.replayed"})
        if len(_error_types) < _MAX_ERROR_TYPES:
            _error_types[name] = cls
    return cls(message)


def _finite(value: Any) -> float | None:
    """``value`` as a float if it is a finite JSON number, else None (a 400-digit integer too)."""
    if type(value) not in _NUMBER:
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _show(value: Any, limit: int = 60) -> str:
    """A short repr of a value read from a trace, for messages."""
    if type(value) is int and not -(10**40) < value < 10**40:
        return f"a {len(str(abs(value)))}-digit integer"
    try:
        text = repr(value)
    except ValueError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _too_deep(value: Any, limit: int) -> bool:
    """Whether a parsed line nests more than ``limit`` levels (walked without recursion)."""
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > limit:
            return True
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                push((child, depth + 1))
    return False


def _code_free(
    recorded: Mapping[Any, Any], summary: TraceSummary, note: Callable[[str], None]
) -> dict[str, Any]:
    """The recorded settings replay may apply: everything but keys that may name code or files,
    which are left out with a notice the first time a trace has them."""
    out: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in recorded.items():
        if type(key) is str and key in schema() and not plain_data_key(key):
            ignored.append(key)
        else:
            out[str(key)] = value
    new = sorted(k for k in ignored if k not in summary.ignored_settings)
    if new:
        summary.ignored_settings.update(new)
        note(
            f"settings recorded in the trace that can name code or files are ignored: "
            f"{', '.join(new)} (replay never imports, calls or writes anything a trace names; "
            "set them in the config given to replay)"
        )
    return out


class _Overlong:
    """Stands in for a line longer than the reader's limit; ``ended`` is False when no end of
    line came within twice the limit and reading stopped."""

    __slots__ = ("ended", "size")

    def __init__(self, size: int, ended: bool) -> None:
        self.size = size
        self.ended = ended


def bounded_lines(stream: IO[str], limit: int = MAX_LINE) -> Iterator[str | _Overlong]:
    """The lines of a text stream, each at most ``limit`` characters: a longer line is read
    through (without keeping it) and yielded as an ``_Overlong``. Memory stays bounded on any
    input, and endless input without newlines ends after twice the limit."""
    readline = stream.readline
    while True:
        line = readline(limit + 1)
        if len(line) <= limit or (len(line) == limit + 1 and line[-1] == "\n"):
            if not line:
                return
            yield line
            continue
        size = len(line)
        del line
        while True:
            piece = readline(min(limit, 1 << 20))
            size += len(piece)
            if not piece or piece[-1] == "\n":
                yield _Overlong(size - (piece[-1:] == "\n"), True)
                break
            if size > 2 * limit:
                yield _Overlong(size, False)
                return


class _Unreadable:
    """Marks where a compressed trace broke (truncated or corrupt): nothing after it is read."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


GZIP_MAGIC = b"\x1f\x8b"


def _decompressed(lines: Iterator[str | _Overlong]) -> Iterator[str | _Overlong | _Unreadable]:
    """The lines of a gzip stream; a truncated or corrupt archive ends them with an
    ``_Unreadable`` instead of an exception, so every line before the break is replayed."""
    try:
        yield from lines
    except EOFError:
        yield _Unreadable("the compressed trace ends early (truncated gzip); the rest is lost")
    except (gzip.BadGzipFile, zlib.error) as exc:
        yield _Unreadable(f"the compressed trace is corrupt ({_clip(str(exc))}); the rest is not read")


def open_trace(
    binary: io.BufferedReader, limit: int = MAX_LINE
) -> Iterator[str | _Overlong | _Unreadable]:
    """The bounded lines of a trace read from a binary stream, decompressed first when it starts
    with gzip's magic bytes. Bytes that are not UTF-8 are read as U+FFFD."""
    if binary.peek(2)[:2] == GZIP_MAGIC:
        unzipped = gzip.GzipFile(fileobj=binary, mode="rb")
        text = io.TextIOWrapper(unzipped, encoding="utf-8", errors="replace")
        return _decompressed(bounded_lines(text, limit))
    return bounded_lines(io.TextIOWrapper(binary, encoding="utf-8", errors="replace"), limit)


class ReplayRun(Run):
    """A run whose time is the trace's, without the standard subscribers: a replay never logs
    detections as live ones, calls hooks, touches spans or writes a trace."""

    _standard = False

    def __init__(self, name: str | None, config: Config, clock: Callable[[], float]) -> None:
        self._clock = clock
        super().__init__(name, config=_storeless(config))


# A replay never touches the shared run it replays (FUZE_STORE or the config may name one): its
# runs take their config with ``store`` unset, made once per config (each trace is a run).
_STORELESS: dict[int, tuple[Config, Config]] = {}
_STORELESS_REMEMBERED = 16


def _storeless(config: Config) -> Config:
    entry = _STORELESS.get(id(config))
    if entry is not None and entry[0] is config:
        return entry[1]
    made = config.with_values(validate_code_options({"store": None}, "replay", run_scope=True))
    if len(_STORELESS) >= _STORELESS_REMEMBERED:
        _STORELESS.clear()
    _STORELESS[id(config)] = (config, made)
    return made


class _Published:
    """What a replayed run published while it replayed a line: its decisions with detections, and
    the detection that killed it."""

    __slots__ = ("found", "killed")

    def __init__(self) -> None:
        self.found: list[Decision] = []
        self.killed: Detection | None = None

    def detected(self, event: Detected) -> None:
        self.found.append(event.decision)

    def run_killed(self, event: RunKilled) -> None:
        self.killed = event.detection


class _RunReplay:
    """One run being replayed: its ``Run`` (with the replay clock), its functions' plans, and
    where in the trace it is (for the detections it reports)."""

    __slots__ = (
        "clock", "code", "dead", "label", "line", "plans", "position", "published", "run",
        "shared", "summary",
    )

    def __init__(
        self, config: Config, info: Any, summary: TraceSummary, label: str | None, code: bool,
        problem: Callable[[str], None], replayer: Replayer,
    ) -> None:
        if code and isinstance(info, dict) and isinstance(info.get("settings"), dict):
            try:
                recorded = _code_free(info["settings"], summary, problem)
                values = validate_code_options(recorded, "trace run_info", run_scope=True)
                config = config.with_values(values, origin="code (recorded in the trace)")
            except (ConfigError, TypeError) as exc:
                problem(f"run settings recorded in the trace ignored: {exc}")
        name = info.get("name") if isinstance(info, dict) else None
        self.clock = _Clock()
        self.run = ReplayRun(name if isinstance(name, str) else label, config, self.clock)
        self.plans: dict[str, Plan] = {}
        self.shared = replayer.plans  # the replay's, across runs
        self.dead = False
        self.summary = summary
        self.label = label
        self.code = code
        self.position = 0
        self.line = 0
        # What the run publishes is collected here and reported by the replayer once the run
        # has done with the line (a report that fails, a closed pipe, is the replayer's to raise).
        # Collected apart from this object, which holds the run: no reference cycle, so a run
        # replayed to its end is freed at once, not by the garbage collector.
        self.published = _Published()
        self.run.subscribe(self.published.detected, Detected)
        self.run.subscribe(self.published.run_killed, RunKilled)
        if replayer.on_run is not None:
            replayer.on_run(self.run)

    def plan(self, fn: str, line: dict[str, Any], problem: Callable[[str], None]) -> Plan:
        from fuzeguard.layers import BUILTIN_LAYERS

        options: dict[str, Any] = {}
        layers: tuple[str, ...] | None = None
        recorded = line.get("guard")
        if self.code and isinstance(recorded, dict):
            raw = _code_free(recorded, self.summary, problem)
            names = raw.pop("layers", None)
            if isinstance(names, list):
                known = tuple(n for n in names if isinstance(n, str) and n in BUILTIN_LAYERS)
                unknown = [n for n in names if n not in known]
                if unknown:
                    problem(
                        f"`{fn}` used custom layers that replay cannot run: "
                        f"{', '.join(_show(n) for n in unknown)}"
                    )
                layers = known
            try:
                options = validate_code_options(raw, f"guard({fn}) recorded in the trace",
                                                run_scope=False)
            except (ConfigError, TypeError) as exc:
                problem(f"guard settings recorded for `{fn}` ignored: {exc}")
        try:
            plan = self.shared.plan(fn, self.run.config, options, layers)
        except ConfigError as exc:
            if not options and layers is None:
                raise
            problem(f"guard settings recorded for `{fn}` ignored: {exc}")
            plan = self.shared.plan(fn, self.run.config, {}, None)
        self.plans[fn] = plan
        return plan


class Replayer:
    """Replays traces under one configuration and reports detections as they are found.

    ``on_detection`` is called with each ``ReplayedDetection`` and ``on_problem`` with each
    ``Problem`` as soon as they are found (the CLI streams them). ``use_code_settings=False``
    ignores the settings the traced code passed to ``guard()``/``run()`` so that the config alone
    decides (for tuning keys that code sets). ``keep`` bounds how many detections each summary
    keeps (None: all), so that a huge trace full of detections replays in bounded memory.
    ``max_line`` is the longest line read, in characters (longer ones are reported and skipped).
    ``on_run`` is called with each run a replay starts, before its first call (``fuze report``
    subscribes its timeline there); ``on_line`` with each call's line and the run it belongs
    to, before it is replayed, also after the run was killed (``fuze report`` reads the outcome
    the trace records there).
    """

    def __init__(
        self,
        config: Config,
        *,
        on_detection: Callable[[ReplayedDetection], object] | None = None,
        on_problem: Callable[[Problem], object] | None = None,
        use_code_settings: bool = True,
        keep: int | None = None,
        max_line: int = MAX_LINE,
        on_run: Callable[[ReplayRun], object] | None = None,
        on_line: Callable[[ReplayRun, dict[str, Any]], object] | None = None,
    ) -> None:
        self.config = config
        self.on_run = on_run
        self.on_line = on_line
        self.on_detection = on_detection
        self.on_problem = on_problem
        self.use_code_settings = use_code_settings
        self.keep = keep
        self.max_line = max_line
        # Where each line of a merged replay comes from (file, line), for its problems.
        self._origins: list[tuple[str, int]] | None = None
        # The plans of every run this replayer replays, one per function configuration.
        self.plans = PlanCache(_replayed)

    def replay_file(
        self, path: str, *, progress: Callable[[int], object] | None = None
    ) -> TraceSummary:
        """Replay one trace file (``-`` reads standard input; a FIFO or another stream works as
        a path too). ``progress`` gets characters read.

        Bytes that are not UTF-8 are read as U+FFFD: such a line still replays if it is JSON.
        A gzip-compressed trace is decompressed as it is read (``progress`` then counts
        decompressed characters).
        """
        if path == "-":
            with open(sys.stdin.fileno(), "rb", closefd=False) as stdin:
                return self.replay_lines(open_trace(stdin, self.max_line), path, progress=progress)
        with open(path, "rb") as f:
            return self.replay_lines(open_trace(f, self.max_line), path, progress=progress)

    def replay_merged(self, paths: Iterable[str], label: str = "merged") -> TraceSummary:
        """Replay several traces as one stream, their lines ordered by time: the traces each
        process wrote of a run shared through a store (``at``, else ``ts``, orders them).

        Each file is read as ``replay_file`` reads one (bounded lines, bounded depth, checked
        numbers), and problems name the file and line they come from."""
        keyed: list[tuple[float, int, str | _Overlong | _Unreadable, str, int]] = []
        for path in paths:
            with open(path, "rb") as f:
                for lineno, line in enumerate(open_trace(f, self.max_line), start=1):
                    if type(line) is str and not line.strip():
                        continue
                    keyed.append((_moment(line), len(keyed), line, path, lineno))
        keyed.sort(key=lambda item: (item[0], item[1]))
        origins = [(path, lineno) for *_, path, lineno in keyed]
        self._origins = origins
        try:
            return self.replay_lines((item[2] for item in keyed), label)
        finally:
            self._origins = None

    def replay_lines(
        self,
        lines: Iterable[bytes | str | _Overlong | _Unreadable],
        label: str,
        *,
        progress: Callable[[int], object] | None = None,
    ) -> TraceSummary:
        """Replay an iterable of trace lines; ``label`` names the trace in reports.

        Whatever is wrong with a line is reported once (one ``Problem`` per line) and the rest
        of the trace is replayed.
        """
        summary = TraceSummary(label)
        runs: dict[str | None, _RunReplay] = {}
        scan = _scanner
        on_line = self.on_line
        position = 0
        done = 0
        lineno = 0
        notes: list[str] = []
        note = notes.append
        started = closed = call_lines = 0

        for lineno, raw in enumerate(lines, start=1):
            if type(raw) is str:
                line = raw
            elif type(raw) is _Overlong:
                position += 1
                if progress is not None:
                    done += raw.size
                if not raw.ended:  # the reader stops there: the last line of that input
                    self._problem(summary, lineno, f"no end of line in {raw.size:,} characters: "
                                  "this is not a trace; the rest of it is not read")
                    continue
                self._problem(summary, lineno, f"a line of {raw.size:,} characters, longer than "
                              f"the {self.max_line:,} a trace line may have; line skipped")
                continue
            elif type(raw) is _Unreadable:
                self._problem(summary, lineno, raw.why)
                break
            else:
                line = raw.decode("utf-8", "replace")  # type: ignore[union-attr]
            if progress is not None:
                done += len(line)
                if lineno & 0x3FFF == 0:
                    progress(done)
            obj: Any = None
            if line[:1] == "{":
                # The scanner json.loads uses, without its wrapper: the hot path of replay.
                try:
                    obj, end = scan(line, 0)
                    if end < len(line) and line[end:].strip():
                        obj = None
                except (ValueError, StopIteration, RecursionError):
                    obj = None
            elif not line.strip():
                continue
            position += 1
            if obj is None:
                obj, recovered = self._parse_bad(line, summary, lineno)
                if obj is None:
                    continue
                position += recovered  # the whole line after a torn one is a call of its own
            if type(obj) is not dict:
                self._problem(summary, lineno, "not a JSON object; line skipped")
                continue
            if (
                len(line) > 2 * MAX_LINE_DEPTH
                and line.count("[") + line.count("{") > MAX_LINE_DEPTH
                and _too_deep(obj, MAX_LINE_DEPTH)
            ):
                self._problem(summary, lineno, f"nested more than {MAX_LINE_DEPTH} levels deep "
                              "(a trace line never is); line skipped")
                continue
            fn = obj.get("fn")
            if type(fn) is not str or not fn:
                self._problem(summary, lineno, 'no "fn" (the function name is required); '
                                               "line skipped")
                continue
            call_lines += 1
            key = obj.get("run")
            if key is not None and type(key) is not str:
                note(f'"run" must be a string, got {_show(key)}; replayed in the run of the lines '
                     'without "run"')
                key = None
            try:
                state = runs.get(key)
                if state is None:
                    if len(runs) >= MAX_OPEN_RUNS:
                        if not closed:
                            note(f"more than {MAX_OPEN_RUNS:,} runs open at once: from here on "
                                 "the run that started first is closed when another starts (a "
                                 "later line of a closed run starts it afresh)")
                        del runs[next(iter(runs))]
                        closed += 1
                    started += 1
                    state = runs[key] = _RunReplay(
                        self.config, obj.get("run_info"), summary, key, self.use_code_settings,
                        note, self,
                    )
                if on_line is not None:
                    on_line(state.run, obj)
                if state.dead and "resumed" not in obj:
                    summary.not_evaluated += 1
                else:
                    try:
                        self._feed(state, obj, fn, line, position, lineno, summary, note)
                    finally:
                        if state.published.found or state.published.killed is not None:
                            self._report(state)
            except OSError:
                raise  # our own output failed (a closed pipe): not the trace's fault
            except Exception as exc:
                # Whatever a line holds, it must not end the replay of the others.
                note(f"could not be replayed ({type(exc).__name__}: {_clip(str(exc))}); "
                     "line skipped")
            if notes:
                self._problem(summary, lineno, "; ".join(notes))
                notes.clear()
        if progress is not None:
            progress(done)
        summary.calls = position
        summary.runs = started
        summary.call_lines = call_lines
        return summary

    def _parse_bad(self, line: str, summary: TraceSummary, lineno: int) -> tuple[Any, bool]:
        """Parse a line the fast path could not: report the JSON error, or recover a whole line
        glued to the fragment of a torn one (then True). None when nothing can be replayed."""
        try:
            return json.loads(line), False  # not a JSON object, or not starting with "{"
        except RecursionError:
            why = "nested too deeply to read"
        except ValueError as exc:
            why = f"not valid JSON ({_clip(str(exc))})"
        find = line.find
        start = 0
        for _ in range(_RECOVER_TRIES):
            start = find(_LINE_START, start + 1)
            if start < 0:
                break
            try:
                obj, end = _scanner(line, start)
            except (ValueError, StopIteration, RecursionError):
                continue
            if type(obj) is dict and not line[end:].strip():
                self._problem(
                    summary, lineno,
                    f"a torn line: its first {start:,} characters are what is left of a line "
                    "whose writer was killed while writing it (skipped); the whole line after "
                    "them is replayed",
                )
                return obj, True
        self._problem(summary, lineno, f"{why}; line skipped")
        return None, False

    def _problem(self, summary: TraceSummary, lineno: int, message: str) -> None:
        origins = self._origins
        trace, line = (summary.trace, lineno) if origins is None else origins[lineno - 1]
        problem = Problem(trace, line, message)
        summary.problem_count += 1
        if len(summary.problems) < KEEP_PROBLEMS:
            summary.problems.append(problem)
        if self.on_problem is not None:
            self.on_problem(problem)

    def _feed(
        self,
        state: _RunReplay,
        obj: dict[str, Any],
        fn: str,
        raw: str,
        position: int,
        lineno: int,
        summary: TraceSummary,
        problem: Callable[[str], None],
    ) -> None:
        plan = state.plans.get(fn)
        if plan is None:
            plan = state.plan(fn, obj, problem)
        if plan.off:
            return  # live, a guard switched off records nothing; nor does replay
        run = state.run
        get = obj.get

        # Parse everything before the run changes, so a bad line leaves no half-made call.
        ts = get("ts")
        if ts is not None:
            ts = _finite(ts)
            if ts is None:
                problem(f'"ts" must be a finite number of seconds, got {_show(get("ts"))}; '
                        "treated as unknown")
        tagged = TAG in raw
        args = get("args")
        if args is not None and type(args) is not dict:
            problem(f'"args" must be a JSON object, got {type(args).__name__}; treated as unknown')
            args = None
        if args is None:
            args = {}
        elif tagged:
            args = decode_value(args)
        try:
            hex_fp = get("args_fp")
            if hex_fp is not None:
                args_fp = bytes.fromhex(hex_fp)
            else:
                unbound = {k: v for k, v in args.items() if k not in plan.binder.excluded}
                args_fp = plan.fingerprint_args(unbound)
            hex_fp = get("result_fp")
            result_fp = bytes.fromhex(hex_fp) if hex_fp is not None else None
        except (TypeError, ValueError):
            problem("a fingerprint is not a hex string; line skipped")
            return
        cost = get("cost")
        if cost is not None:
            cost = _finite(cost)
            if cost is None:
                problem(f'"cost" must be a finite number, got {_show(get("cost"))}; treated as '
                        "unknown")
        duration = get("duration")
        if duration is not None:
            duration = _finite(duration)
            if duration is None:
                problem(f'"duration" must be a finite number of seconds, got '
                        f'{_show(get("duration"))}; treated as unknown')
        error = get("error")
        if error is not None and type(error) is not str:
            error = str(error)

        if "reset" in obj or "turn" in obj or "extra_cost" in obj or "resumed" in obj:
            self._run_events(state, obj, problem)
            if "resumed" in obj:  # new budgets: the plans are made again, as live
                plan = state.plans.get(fn) or state.plan(fn, obj, problem)
        if ts is not None:
            state.clock.now = ts

        state.position, state.line = position, lineno
        kind = get("kind")
        call, decision = run._decide(plan, args_fp, args, kind if kind in KINDS else None)
        action = decision.action
        if action == "kill" or action == "skip":
            return  # not executed (a kill was reported by the run's RunKilled event)
        if get("stream") and plan.watchers:
            chunks = obj.get("result")
            if tagged:
                chunks = decode_value(chunks)
            if not self._watch(state, plan, call, decision, chunks):
                return  # killed mid-stream
        if get("interrupted"):
            run._interrupted(plan, call, decision, ts if ts is not None else state.clock.now, None)
            return  # executed but never completed: no record, as live

        # The same completion as a live call's (completion.complete); what the trace left out
        # is unknown, and a recorded fingerprint or failed flag stands for it.
        result: Any = UNKNOWN
        if "result" in obj:
            result = obj.get("result")
            if tagged:
                result = decode_value(result)
        complete(
            run, plan, call, decision,
            start=ts if ts is not None else state.clock.now,
            duration=duration,
            cost=cost,
            result=result,
            error=_error_object(error) if error is not None else None,
            error_message=error,
            result_fp=result_fp,
            failed=TEXT_ERROR if get("failed") is True else None,
        )

    def _report(self, state: _RunReplay) -> None:
        """Report what the run published while it replayed a line: its detections, and a kill
        (the rest of that run is then not evaluated)."""
        summary = state.summary
        on_detection = self.on_detection
        keep = self.keep
        published = state.published
        found, published.found = published.found, []
        for decision in found:
            for detection in decision.detections:
                item = ReplayedDetection(summary.trace, state.position, state.line, state.label,
                                         detection)
                summary.detected += 1
                by_layer, by_action = summary.by_layer, summary.by_action
                by_layer[detection.layer] = by_layer.get(detection.layer, 0) + 1
                by_action[detection.action] = by_action.get(detection.action, 0) + 1
                if keep is None or len(summary.detections) < keep:
                    summary.detections.append(item)
                if on_detection is not None:
                    on_detection(item)
        killed, published.killed = published.killed, None
        if killed is not None:
            state.dead = True
            summary.kills.append(
                ReplayedDetection(summary.trace, state.position, state.line, state.label, killed)
            )

    @staticmethod
    def _watch(
        state: _RunReplay, plan: Plan, call: Call, decision: Decision, chunks: Any
    ) -> bool:
        """Feed a generator's recorded chunks to the layers that watch streams, as a live
        stream's are (``watch.StreamWatch``). False if the run was killed mid-stream."""
        if isinstance(chunks, str):  # a truncated stream: its head is all there is to watch
            chunks = [chunks]
        if not isinstance(chunks, list):
            return True
        watch = StreamWatch(state.run, plan, call, decision)
        for chunk in chunks:
            found = watch.feed(chunk)
            if found is None:
                continue
            if found.action == "kill":
                return False
            if found.action == "skip":
                return True  # live, the stream ended here; its recorded chunks end here too
        return True

    @staticmethod
    def _run_events(state: _RunReplay, obj: dict[str, Any], problem: Callable[[str], None]) -> None:
        """A reset, the end of a turn or cost added outside any call, marked on this line: made
        through the run's own controls, as live."""
        run = state.run
        reset = obj.get("reset")
        # A run shared by several processes has the same reset on each one's next line (merged
        # traces): it is the reset number that tells a new one.
        if reset is not None and not (type(reset) is int and reset == run.resets):
            state.clock.now = 0.0  # live, a reset restarts the run's clock: later "ts" count from it
            try:
                run.reset()
            except FuzeguardError as exc:
                problem(f"the run is reset here, which its config does not allow ({exc}); "
                        "replayed without the reset")
        turn = obj.get("turn")
        if type(turn) is int and turn != run.stats().turn:
            run.end_turn()
        resumed = obj.get("resumed")
        if resumed is not None:
            budgets: dict[str, Any] = {}
            if type(resumed) is dict and set(resumed) <= set(BUDGETS):
                try:
                    budgets = validate_code_options(resumed, "trace resumed", run_scope=True)
                except (ConfigError, TypeError) as exc:
                    problem(f'"resumed" budgets ignored: {exc}')
            else:
                problem(f'"resumed" must map budget keys ({", ".join(BUDGETS)}) to numbers, got '
                        f"{_show(resumed)}; the run resumes with its budgets")
            with run._lock:
                run._resumed(budgets, None)
            run._drain()
            state.dead = False  # the run was resumed live here: its next calls are judged
            state.plans.clear()  # under its new budgets, as the live guards' plans were
        extra = obj.get("extra_cost")
        amount = _finite(extra)
        if amount is not None:
            run._add_cost(amount)
        elif extra is not None:
            problem(f'"extra_cost" must be a finite number, got {_show(extra)}; ignored')


def _moment(line: str | _Overlong | _Unreadable) -> float:
    """When a trace line's call began, for merging traces (lines without a time, and lines that
    cannot be read, sort first). Parsed as replay parses a line: a hostile one is -inf."""
    if type(line) is not str or line[:1] != "{":
        return -math.inf
    try:
        obj, _ = _scanner(line, 0)
    except (ValueError, StopIteration, RecursionError):
        return -math.inf
    if type(obj) is not dict:
        return -math.inf
    for key in ("at", "ts"):
        value = obj.get(key)
        if value is not None and type(value) is not bool:
            moment = _finite(value)
            if moment is not None:
                return moment
    return -math.inf


def trace_files(paths: Iterable[str]) -> Iterator[str]:
    """Expand the command line's TRACE arguments: a directory stands for its ``*.jsonl`` files
    (and ``*.jsonl.gz``)."""
    for path in paths:
        if path != "-" and os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if name.endswith(TRACE_SUFFIXES) and os.path.isfile(full):
                    yield full
        else:
            yield path


def replay(
    paths: Iterable[str],
    config: Config | None = None,
    *,
    use_code_settings: bool = True,
) -> list[TraceSummary]:
    """Replay trace files (or directories of them) under ``config`` (default: discovered)."""
    replayer = Replayer(config or Config.load(), use_code_settings=use_code_settings)
    return [replayer.replay_file(path) for path in trace_files(paths)]


__all__ = [
    "MAX_LINE",
    "Problem",
    "ReplayedDetection",
    "Replayer",
    "TraceSummary",
    "replay",
    "trace_files",
]
