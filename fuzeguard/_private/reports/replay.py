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

import json
import json.scanner
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.schema import plain_data_key, schema
from fuzeguard._private.configuration.validation import validate_code_options
from fuzeguard._private.judging.completion import UNKNOWN, complete
from fuzeguard._private.judging.plan import Plan
from fuzeguard._private.judging.plan_cache import PlanCache
from fuzeguard._private.judging.watch import StreamWatch
from fuzeguard._private.meaning.kinds import KINDS
from fuzeguard._private.meaning.outcome import TEXT_ERROR
from fuzeguard._private.meaning.records import Call, Decision
from fuzeguard._private.meaning.values import TAG, decode_value
from fuzeguard._private.publish.events import Detected, RunKilled
from fuzeguard._private.reports.replay_run import Published, ReplayClock, ReplayRun
from fuzeguard._private.reports.replayed import (
    KEEP_PROBLEMS,
    Problem,
    ReplayedDetection,
    TraceSummary,
)
from fuzeguard._private.reports.trace_reading import (
    MAX_LINE,
    MAX_LINE_DEPTH,
    _clip,
    _finite,
    _moment,
    _Overlong,
    _scanner,
    _show,
    _too_deep,
    _Unreadable,
    open_trace,
    trace_files,
)
from fuzeguard._private.runs.budget import BUDGETS
from fuzeguard._private.runs.exceptions import ConfigError, FuzeguardError
from fuzeguard.layers import BUILTIN_LAYERS

_RECOVER_TRIES = 16
# Runs of one trace file replayed at once. Runs sharing a file interleave, but only a few at a
# time; past this many, the run that started first is closed, so a trace of a million run ids
# replays in bounded memory.
MAX_OPEN_RUNS = 10_000
_LINE_START = '{"fn":'



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
        self.clock = ReplayClock()
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
        self.published = Published()
        self.run.subscribe(self.published.detected, Detected)
        self.run.subscribe(self.published.run_killed, RunKilled)
        if replayer.on_run is not None:
            replayer.on_run(self.run)

    def plan(self, fn: str, line: dict[str, Any], problem: Callable[[str], None]) -> Plan:
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


def replay(
    paths: Iterable[str],
    config: Config | None = None,
    *,
    use_code_settings: bool = True,
) -> list[TraceSummary]:
    """Replay trace files (or directories of them) under ``config`` (default: discovered)."""
    replayer = Replayer(config or Config.load(), use_code_settings=use_code_settings)
    return [replayer.replay_file(path) for path in trace_files(paths)]


__all__ = ["MAX_OPEN_RUNS", "Replayer", "replay"]
