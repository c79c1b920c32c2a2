"""The ``fuze`` command: ``fuze demo``, ``fuze check``, ``fuze replay``, ``fuze report`` and
``fuze end``.

Exit status: 0 when the command ran (whatever it found), 1 when ``--fail-on-detect`` was given and
a replayed trace had detections or ``fuze end`` could not reach the store, 2 for usage and
configuration errors (and for ``fuze replay`` of input that is not a trace: a file none of whose
lines is a call, a directory without traces).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.schema import schema
from fuzeguard._private.reports.replay import (
    GZIP_MAGIC,
    Problem,
    ReplayedDetection,
    Replayer,
    TraceSummary,
    trace_files,
)
from fuzeguard._private.reports.replay_pool import WorkerLost, default_jobs, replay_files
from fuzeguard._private.reports.terminal import CONTROLS, printable
from fuzeguard._private.runs.exceptions import ConfigError

EXIT_OK = 0
EXIT_DETECTED = 1
EXIT_USAGE = 2

MAX_ROWS = 50
MAX_PROBLEMS = 20
PROGRESS_BYTES = 16 * 1024 * 1024
PROGRESS_TRACES = 10
# By default, traces of fewer characters than this in all are replayed in this process: their
# replay takes under a second, and starting and feeding worker processes would take most of what
# they save (forked workers start in tens of milliseconds).
PARALLEL_BYTES = 2 * 1024 * 1024


def _json_line(value: Any) -> str:
    """One JSON object as a line that shows as it is: control characters JSON leaves raw (C1,
    the bidirectional overrides) written as ``\\u`` escapes."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_MAIN_EPILOG = """\
examples:
  fuze demo                                     watch the guard stop a scripted agent
  fuze check                                    validate the discovered fuze.toml
  fuze check fuze.toml --env production         ... with fuze.production.toml over it
  fuze replay traces/ --config fuze.candidate.toml
                                                what a candidate config would have caught
  fuze replay traces/*.jsonl --format json --fail-on-detect
                                                a CI gate over recorded traces
  fuze report traces/run.jsonl --html run.html  why a run was stopped, with a picture
  eval "$(fuze completion bash)"                complete fuze's commands in bash

Record traces with trace = "traces/" in fuze.toml, FUZE_TRACE=traces/ or
fuzeguard.run(..., trace="traces/"). The documentation's pages on the fuze command,
tracing and tuning say more.
exit status: 0 ran, 1 detections with --fail-on-detect (or fuze end: store unreachable),
2 usage or config error, or input that is not a trace.
"""

_CHECK_EPILOG = """\
Prints every key's effective value and where it comes from: default, base file, env
file, or a [functions.NAME] table. Exits 2 with the error (file, key, line, suggestion)
when the file is not valid.

With --import MODULE (the modules that define your guarded tools), it also names each
[functions.NAME] table that matches no guarded function, with the closest name.

examples:
  fuze check                          the file discovery finds (FUZE_CONFIG, fuze.toml,
                                      [tool.fuzeguard] in pyproject.toml)
  fuze check config/fuze.toml --env production
  fuze check --import myagent.tools   ... and check [functions.NAME] against its tools
"""

_REPLAY_EPILOG = """\
Each trace line is one call; calls are fed through the layers in order, using the
recorded results and fingerprints, and nothing is executed. A killed run stops there;
a call the replay skips is treated as not executed; every trace (and every run in a
shared trace file) is an independent run. Malformed lines are reported on stderr as
FILE:LINE and skipped. A directory stands for the *.jsonl files in it; - is stdin.
A gzip-compressed trace (*.jsonl.gz) is read as it is.

--format json prints one object per detection and nothing else on stdout:
  {"trace": "traces/a.jsonl", "call": 7, "fn": "web_search", "layer": "dedup",
   "action": "kill", "count": 4, "threshold": 3, "message": "..."}
("call" is the 1-based index of the call in the trace.)

examples:
  fuze replay traces/                              under the discovered config
  fuze replay traces/ --config fuze.candidate.toml --env production
  fuze replay run.jsonl --format json | jq -r .layer | sort | uniq -c
  fuze replay traces/ --fail-on-detect             exit 1 if anything would fire
  fuze replay traces/ --compare fuze.toml fuze.candidate.toml
                                                   what each config does, side by side
"""


_REPORT_EPILOG = """\
For each run recorded in the traces: which layer stopped it and why, the repeated
calls with their arguments (redacted as traces are), calls and cost spent and saved,
and the fuze.toml lines that would change the outcome. The traces are replayed under
the config (as fuze replay does): nothing is executed.

--html PATH writes one self-contained page (no script, no network) with a timeline
picture of each run: calls along time, one lane per tool, warnings, skips, errors
and the kill marked, and each call linked to the earlier call it repeats.

examples:
  fuze report traces/20261124T040900Z-e5ff927b121d.jsonl
  fuze report traces/ --config fuze.toml --html report.html
"""


class _Version(argparse.Action):
    """``--version``: the installed version, read from the package's metadata only when asked
    (reading it costs every other command tens of milliseconds)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from fuzeguard import __version__

        sys.stdout.write(f"fuzeguard {__version__}\n")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="fuze",
        description="fuzeguard: stop AI agents from looping. Check configs, replay recorded "
        "traces through the detection layers, or watch a demo.",
        epilog=_MAIN_EPILOG,
        formatter_class=fmt,
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show the installed fuzeguard's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    demo = sub.add_parser(
        "demo",
        help="a scripted agent gets stuck and the guard catches it (no model, no network)",
        description="Run the demo: a scripted agent repeats a search until the guard answers for "
        "the tool, then falls into a web_search <-> web_fetch ping-pong until the run is killed. "
        "Every step, detection and action is printed. No model, no network, no API key.",
        epilog="examples:\n  fuze demo\n  fuze demo --no-color | less\n  python -m fuzeguard",
        formatter_class=fmt,
    )
    demo.add_argument("--no-color", action="store_true", help="plain output, no ANSI colours")
    check = sub.add_parser(
        "check",
        help="validate a config file and print the effective settings",
        description="Validate a fuze.toml (or the discovered config) and print the effective "
        "settings for an environment, with where each value comes from.",
        epilog=_CHECK_EPILOG,
        formatter_class=fmt,
    )
    check.add_argument("path", nargs="?", metavar="PATH",
                       help="config file (fuze.toml or pyproject.toml); default: discovered")
    check.add_argument("--env", metavar="NAME",
                       help="environment overlay fuze.NAME.toml (default: $FUZE_ENV)")
    check.add_argument("--import", dest="modules", metavar="MODULE", action="append", default=[],
                       help="import MODULE (from the current directory too) and check that each "
                       "[functions.NAME] table names a function it guards; repeatable")
    ender = sub.add_parser(
        "end",
        help="end a shared run for good: delete its state from the store",
        description="End the shared run NAME: its state is deleted from the store, and a process "
        "that opens (or goes on using) a run of that name starts a fresh one. The store and "
        "namespace default to the ones fuze.toml and FUZE_STORE set (docs/workers.md).",
        epilog="examples:\n  fuze end ticket-4711\n"
        "  fuze end ticket-4711 --store redis://localhost:6379/0 --namespace billing-agent",
        formatter_class=fmt,
    )
    ender.add_argument("name", metavar="NAME", help="the shared run's name")
    ender.add_argument("--store", metavar="URL", help="the Redis URL (default: configured)")
    ender.add_argument("--namespace", metavar="NS",
                       help="the store_namespace (default: configured)")
    rep = sub.add_parser(
        "replay",
        help="replay recorded traces through the layers and report what fires",
        description="Replay recorded traces through the configured layers without executing "
        "anything, and report every detection.",
        epilog=_REPLAY_EPILOG,
        formatter_class=fmt,
    )
    rep.add_argument("traces", nargs="+", metavar="TRACE",
                     help="trace files (JSON Lines, gzip-compressed or not), directories of them, "
                     "or - for stdin")
    rep.add_argument("--config", metavar="PATH",
                     help="config to replay under (default: the discovered one)")
    rep.add_argument("--env", metavar="NAME",
                     help="environment overlay fuze.NAME.toml (default: $FUZE_ENV)")
    rep.add_argument("--compare", nargs=2, metavar=("A.toml", "B.toml"),
                     help="replay under two configs and show, per trace, what each does and the "
                     "difference (instead of --config)")
    rep.add_argument("--format", choices=("text", "json"), default="text",
                     help="text (tables and a summary) or json (one object per detection)")
    rep.add_argument("--fail-on-detect", action="store_true",
                     help="exit 1 when anything was detected (for CI checks)")
    rep.add_argument("--merge", action="store_true",
                     help="replay all TRACEs as one stream ordered by time: the traces every "
                     "worker wrote of one shared run")
    rep.add_argument("--ignore-code-settings", action="store_true",
                     help="ignore settings the traced code passed to guard()/run(): "
                     "let the config alone decide")
    rep.add_argument("-j", "--jobs", type=_jobs, metavar="N",
                     help="replay the traces in N processes (default: one per core, for traces "
                     "of 2 MB or more; 1: in this process); the output is the same")
    rpt = sub.add_parser(
        "report",
        help="why recorded runs were stopped: the evidence and what to change (text, --html)",
        description="Replay recorded traces and report, for each run, why it was stopped.",
        epilog=_REPORT_EPILOG,
        formatter_class=fmt,
    )
    rpt.add_argument("traces", nargs="+", metavar="TRACE",
                     help="trace files (JSON Lines), directories of them, or - for stdin")
    rpt.add_argument("--config", metavar="PATH",
                     help="config to replay under (default: the discovered one)")
    rpt.add_argument("--env", metavar="NAME",
                     help="environment overlay fuze.NAME.toml (default: $FUZE_ENV)")
    rpt.add_argument("--html", metavar="PATH",
                     help="also write the report as one HTML page with a picture of each run")
    rpt.add_argument("--ignore-code-settings", action="store_true",
                     help="ignore settings the traced code passed to guard()/run()")
    comp = sub.add_parser(
        "completion",
        help="print a shell completion script for fuze (bash, zsh or fish)",
        description="Print a script that completes fuze's commands, options and files.",
        epilog='examples:\n  eval "$(fuze completion bash)"      in ~/.bashrc\n'
        '  eval "$(fuze completion zsh)"       in ~/.zshrc\n'
        "  fuze completion fish > ~/.config/fish/completions/fuze.fish",
        formatter_class=fmt,
    )
    comp.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell")
    progress = rep.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="always show the progress bar (on stderr)")
    progress.add_argument("--no-progress", dest="progress", action="store_false",
                          help="never show the progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fuze`` command; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (``fuze replay ... | head``): stop quietly, as shell tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if args_list and args_list[0] == "demo" and not {"-h", "--help"} & set(args_list[1:]):
        # The demo parses its own options; its help (with examples) is the one below.
        from fuzeguard._private.cli.demo import main as demo_main

        return demo_main(args_list[1:])
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "check":
        return check(args.path, env=args.env, modules=args.modules)
    if args.command == "end":
        return end(args.name, store=args.store, namespace=args.namespace)
    if args.command == "completion":
        from fuzeguard._private.cli.shell_completion import script

        sys.stdout.write(script(args.shell, parser))
        return EXIT_OK
    if args.command == "report":
        return report(args.traces, config_path=args.config, env=args.env, html=args.html,
                      use_code_settings=not args.ignore_code_settings)
    if args.compare is not None:
        if args.config is not None or args.merge or args.fail_on_detect:
            print("fuze replay: --compare takes the two configs itself and only reports: drop "
                  "--config, --merge and --fail-on-detect", file=sys.stderr)
            return EXIT_USAGE
        return compare(args.traces, args.compare[0], args.compare[1], env=args.env,
                       fmt=args.format, use_code_settings=not args.ignore_code_settings,
                       jobs=args.jobs)
    return replay(
        args.traces,
        config_path=args.config,
        env=args.env,
        fmt=args.format,
        fail_on_detect=args.fail_on_detect,
        use_code_settings=not args.ignore_code_settings,
        progress=args.progress,
        merge=args.merge,
        jobs=args.jobs,
    )


def _jobs(text: str) -> int:
    """``-j N``: a whole number of processes, at least 1."""
    try:
        jobs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of processes, such as 2, got {text!r}") from None
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (1 replays in this process), got {jobs}")
    return jobs


# --------------------------------------------------------------------------- check


def _toml_value(value: Any, unset: str = "off") -> str:
    if value is None:
        return f"(not set: {unset})"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}" if value == int(value) and abs(value) < 1e15 else repr(value)
    if callable(value):
        return f"<{getattr(value, '__name__', 'function')}>"
    return str(value)


def _origin_label(origin: str, config: Config) -> str:
    if origin == "code" or origin.startswith("default"):
        return origin
    prefix = ""
    if origin.startswith("[functions."):
        prefix, _, origin = origin.partition(" in ")
        prefix += " in "
    if config.env and Path(origin).name == f"fuze.{config.env}.toml":
        return f"{prefix}env file {origin}"
    return f"{prefix}base file {origin}"


def check(
    path: str | None, *, env: str | None = None, out: TextIO | None = None,
    err: TextIO | None = None, modules: Sequence[str] = (),
) -> int:
    """``fuze check``: validate a config and print the effective settings; returns the status.
    ``modules`` are imported, and each ``[functions.NAME]`` table that names none of the
    functions they guard is reported."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = Config.load(path, env=env)
    except ConfigError as exc:
        print(f"fuze check: {exc}", file=err)
        return EXIT_USAGE
    unmatched_tables: list[str] = []
    if modules:
        found = _check_function_tables(config, modules, err)
        if found is None:
            return EXIT_USAGE
        unmatched_tables = found
    env = config.env
    if config.files:
        print(f"{', '.join(config.files)}: valid", file=out)
    else:
        print("No config file found (FUZE_CONFIG, fuze.toml, or [tool.fuzeguard] in "
              "pyproject.toml, from here up): built-in defaults.", file=out)
    if env:
        # Config.load refuses an environment without its file, so the overlay is the last one.
        print(f"environment {env!r}: {config.files[-1]} over the base file", file=out)
    specs = schema()
    values = dict(config.settings_for(None))
    origins = {k: _origin_label(config.origin_of(k), config) for k in specs}
    for key, var in (("store", "FUZE_STORE"), ("trace", "FUZE_TRACE")):
        if os.environ.get(var):  # overrides the file, as it does for every run
            values[key] = os.environ[var]
            origins[key] = f"environment {var}"
    if values["store"] is not None:
        from fuzeguard._private.configuration.validation import masked_url
        from fuzeguard._private.store import store_problem

        problem = store_problem(config, values["store"], from_code=False)
        if problem is not None:
            print(f"fuze check: {problem}", file=err)
            return EXIT_USAGE
        values["store"] = masked_url(values["store"])
    for section in ("defaults", "loop_detection"):
        keys = [k for k, s in specs.items() if s.section == section]
        print(f"\n[{section}]", file=out)
        _print_rows(out, [(k, _toml_value(values[k], specs[k].unset), origins[k]) for k in keys])
    for fn in config.functions:
        fn_values = config.settings_for(fn)
        rows = []
        for key in specs:
            origin = config.origin_of(key, fn)
            if origin.startswith("[functions."):
                rows.append((key, _toml_value(fn_values[key], specs[key].unset),
                             _origin_label(origin, config)))
        print(f"\n[functions.{fn}]", file=out)
        _print_rows(out, rows)
    for line in unmatched_tables:
        print(line, file=out)
    return EXIT_OK


def _check_function_tables(config: Config, modules: Sequence[str], err: TextIO) -> list[str] | None:
    """Import ``modules`` and return the lines that name each table of ``config`` matching none
    of the functions guarded in this process (None: a module could not be imported)."""
    import importlib

    from fuzeguard._private.configuration.names import guarded, unmatched

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            print(f"fuze check: cannot import {module}: {type(exc).__name__}: {exc}", file=err)
            return None
    names = guarded()
    where = ", ".join(modules)
    lines = [f"\n{len(names)} guarded function{_s(len(names))} after importing {where}: "
             + (", ".join(sorted(names)) or "none")]
    for fn, best in unmatched(config, names):
        hint = f"; did you mean [functions.{best}]?" if best else ""
        lines.append(f"warning: [functions.{fn}] matches no function guarded by {where}: its "
                     f"settings apply to nothing{hint}")
    return lines


def _print_rows(out: TextIO, rows: list[tuple[str, str, str]]) -> None:
    if not rows:
        return
    key_w = max(len(r[0]) for r in rows)
    val_w = min(max(len(r[1]) for r in rows), 40)
    for key, value, origin in rows:
        print(f"{key:<{key_w}} = {value:<{val_w}}  # {origin}", file=out)


# --------------------------------------------------------------------------- end


def end(
    name: str, *, store: str | None, namespace: str | None, out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``fuze end``: delete the shared run ``name`` from its store; returns the status."""
    from fuzeguard._private.configuration.settings import store_url
    from fuzeguard._private.configuration.validation import masked_url
    from fuzeguard._private.store import store_problem

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = Config.load(None)
        values = config.settings_for(None)
        url = store or store_url(config)
        if url is None:
            raise ConfigError("no store to end the run in: give --store redis://... or set "
                              "store in fuze.toml or FUZE_STORE")
        problem = store_problem(config, url)
        if problem is not None:
            raise ConfigError(problem)
        if namespace is not None:
            check_value = Config.from_dict({"defaults": {"store_namespace": namespace}})
            namespace = check_value.settings_for(None)["store_namespace"]
        else:
            namespace = values["store_namespace"]
    except ConfigError as exc:
        print(f"fuze end: {exc}", file=err)
        return EXIT_USAGE
    from fuzeguard._private.store.redis import end_run

    where = masked_url(url) + (f" (namespace {namespace})" if namespace else "")
    try:
        ended = end_run(url, namespace, name, values["store_ttl"], max(values["store_timeout"], 5.0))
    except Exception as exc:
        print(f"fuze end: the store {where} cannot be reached: {type(exc).__name__}", file=err)
        return EXIT_DETECTED
    if ended:
        print(f"ended the shared run {name} on {where}", file=out)
    else:
        print(f"no shared run {name} on {where}: nothing to end", file=out)
    return EXIT_OK


# --------------------------------------------------------------------------- replay


class _Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, total_bytes: int, traces: int) -> None:
        self.stream = stream
        self.total = max(total_bytes, 1)
        self.traces = traces
        self.base = 0
        self.index = 0
        self.last = 0.0

    def start(self, index: int) -> None:
        self.index = index

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < 0.1:
            return
        self.last = now
        fraction = min((self.base + done) / self.total, 1.0)
        width = 30
        filled = int(fraction * width)
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(
            f"\r[{bar}] {fraction:6.1%}  {_size(self.base + done)}/{_size(self.total)}  "
            f"trace {self.index}/{self.traces} "
        )
        self.stream.flush()

    def finish_trace(self, size: int) -> None:
        self.base += size

    def close(self) -> None:
        self.update(0, force=True)
        self.stream.write("\r" + " " * 79 + "\r")
        self.stream.flush()


def _text_size(path: str) -> int:
    """How many characters replaying ``path`` reads, about: its size, or for a gzip trace the
    uncompressed size its trailer records (modulo 4 GiB), which the progress bar counts in."""
    size = os.path.getsize(path)
    if size < 18:
        return size
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC:
                return size
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little") or size
    except OSError:
        return size


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def replay(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    env: str | None = None,
    fmt: str = "text",
    fail_on_detect: bool = False,
    use_code_settings: bool = True,
    progress: bool | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    merge: bool = False,
    jobs: int | None = None,
) -> int:
    """``fuze replay``: replay traces and report detections; returns the exit status. ``jobs``:
    the processes the traces are split across (None: one per core, when they are large enough
    to gain from it)."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = Config.load(config_path, env=env)
    except ConfigError as exc:
        print(f"fuze replay: {exc}", file=err)
        return EXIT_USAGE
    files = list(trace_files(paths))
    # Not only regular files: a FIFO (``<(ssh host cat run.jsonl)``) or a device is read as a stream.
    missing = [p for p in files if p != "-" and (not os.path.exists(p) or os.path.isdir(p))]
    if missing:
        for p in missing:
            print(f"fuze replay: no such trace file: {p}", file=err)
        return EXIT_USAGE
    empty = [p for p in paths
             if os.path.isdir(p) and not any(f.startswith(os.path.join(p, "")) for f in files)]
    for p in empty:
        print(f"fuze replay: no traces in directory {p} (a directory stands for its *.jsonl and "
              "*.jsonl.gz files)", file=err)
    if empty:
        return EXIT_USAGE

    sizes = [_text_size(p) if p != "-" and os.path.isfile(p) else 0 for p in files]
    show = progress if progress is not None else (
        err.isatty() and (len(files) >= PROGRESS_TRACES or sum(sizes) >= PROGRESS_BYTES)
    )
    bar = _Progress(err, sum(sizes), len(files)) if show else None

    problems_shown: dict[str, int] = {}

    def on_problem(problem: Problem) -> None:
        shown = problems_shown.get(problem.trace, 0)
        problems_shown[problem.trace] = shown + 1
        if shown < MAX_PROBLEMS:
            if bar is not None:
                err.write("\r" + " " * 79 + "\r")
            print(f"fuze replay: {printable(str(problem))}", file=err)

    def on_json(found: ReplayedDetection) -> None:
        out.write(_json_line(found.as_json()) + "\n")

    replayer = Replayer(
        config,
        on_detection=on_json if fmt == "json" else None,
        on_problem=on_problem,
        use_code_settings=use_code_settings,
        keep=0 if fmt == "json" else MAX_ROWS,
    )
    total_calls = total_runs = total_detections = killed = problems = 0
    not_traces: list[str] = []
    by_layer: dict[str, int] = {}
    by_action: dict[str, int] = {}
    traces = list(zip(files, sizes, strict=True))
    if merge:  # one stream: every worker's trace of a shared run, ordered by time
        traces = [(f"{len(files)} traces merged", sum(sizes))]
    processes = _processes(jobs, len(traces), sum(sizes))
    if processes > 1:
        summaries = replay_files([replayer], [path for path, _ in traces], processes)
    for i, (path, size) in enumerate(traces, start=1):
        if bar is not None:
            bar.start(i)
            bar.update(0, force=True)
        try:
            if processes > 1:
                [summary] = next(summaries)
            elif merge:
                summary = replayer.replay_merged(files, path)
            else:
                summary = replayer.replay_file(path, progress=bar.update if bar else None)
        except BrokenPipeError:
            raise  # our reader left (``| head``), not the trace: main() ends quietly
        except (OSError, WorkerLost) as exc:
            return _unreplayable(path, exc, err)
        if bar is not None:
            bar.finish_trace(size)
        for name in files if merge else [path]:  # a merged replay's problems name their file
            extra = problems_shown.get(name, 0) - MAX_PROBLEMS
            if extra > 0:
                print(f"fuze replay: ... and {extra} more problem lines in {printable(name)}",
                      file=err)
        if not _is_trace("fuze replay", summary, err):
            not_traces.append(path)
        total_calls += summary.calls
        total_runs += summary.runs
        total_detections += summary.detected
        killed += summary.killed_runs
        problems += summary.problem_count
        for key, n in summary.by_layer.items():
            by_layer[key] = by_layer.get(key, 0) + n
        for key, n in summary.by_action.items():
            by_action[key] = by_action.get(key, 0) + n
        if fmt == "text":
            if bar is not None:
                err.write("\r" + " " * 79 + "\r")
            _print_trace(out, summary)
    if bar is not None:
        bar.close()
    out.flush()
    if fmt == "text":
        print(f"\nReplayed {len(files)} trace{_s(len(files))}: {total_calls:,} call{_s(total_calls)} in "
              f"{total_runs:,} run{_s(total_runs)}, under {config.described}.", file=out)
        if total_detections:
            layers = ", ".join(f"{k} {v}" for k, v in sorted(by_layer.items(), key=lambda kv: -kv[1]))
            actions = ", ".join(f"{k} {v}" for k, v in sorted(by_action.items(), key=lambda kv: -kv[1]))
            print(f"{total_detections:,} detection{_s(total_detections)} (by layer: {layers}; "
                  f"by action: {actions}); {killed} run{_s(killed)} killed.", file=out)
            print("(count: what the layer counted, such as identical calls or laps of a cycle, "
                  "over the threshold it counts against; limit: a budget's value.)", file=out)
        else:
            print("Nothing would have fired.", file=out)
        if problems:
            print(f"{problems} line{_s(problems)} could not be replayed as written (see stderr).",
                  file=out)
    if not_traces:
        return EXIT_USAGE
    if fail_on_detect and total_detections:
        return EXIT_DETECTED
    return EXIT_OK


def _is_trace(command: str, summary: TraceSummary, err: TextIO) -> bool:
    """Whether what was replayed is a trace: lines and none of them a call is not (said on
    ``err``); an empty file is one, with a warning."""
    path = printable(summary.trace)
    if summary.calls and not summary.call_lines:
        print(f"{command}: {path} is not a trace: none of its {summary.calls:,} "
              f"line{_s(summary.calls)} is a call (a JSON object with \"fn\", one per "
              "line, as fuzeguard records them)", file=err)
        return False
    if not summary.calls:
        print(f"{command}: warning: {path} holds no calls", file=err)
    return True


def _unreplayable(path: str, exc: Exception, err: TextIO) -> int:
    """Say why the replay stopped at ``path`` (it cannot be read, or a replay process died);
    the exit status."""
    if isinstance(exc, WorkerLost):
        # Every trace still in the workers' hands is lost with the pool: which one the process
        # that died was replaying is not known here.
        print(f"fuze replay: a replay process ended unexpectedly (out of memory? killed?) before "
              f"{printable(path)} was reported; nothing from it on is reported. Replay the traces "
              "from it on with -j 1 to see which one and why", file=err)
    else:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"fuze replay: cannot read {printable(path)}: {why}", file=err)
    return EXIT_USAGE


def _processes(jobs: int | None, traces: int, size: int) -> int:
    """How many processes replay ``traces`` traces of ``size`` characters in all: ``jobs``, or
    by default one per core when the traces are large enough to repay starting them."""
    if jobs is None:
        jobs = default_jobs() if size >= PARALLEL_BYTES else 1
    return max(1, min(jobs, traces))


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _print_trace(out: TextIO, summary: TraceSummary) -> None:
    found: list[ReplayedDetection] = summary.detections
    total = summary.detected
    head = (f"{printable(summary.trace)}: {summary.calls:,} call{_s(summary.calls)}, "
            f"{summary.runs} run{_s(summary.runs)}, {total:,} detection{_s(total)}")
    print(head, file=out)
    if found:
        rows = []
        for item in found[:MAX_ROWS]:
            d = item.detection
            count = "" if d.count is None else str(d.count)
            if d.threshold is not None:
                count += f"/{d.threshold:g}" if count else f"limit {d.threshold:g}"
            message = d.message if len(d.message) <= 70 else d.message[:69] + "…"
            rows.append((str(item.call), printable(d.fn), printable(d.layer), d.action, count,
                         printable(message)))
        widths = [max(len(r[i]) for r in [("call", "fn", "layer", "action", "count", ""), *rows])
                  for i in range(5)]
        header = ("call", "fn", "layer", "action", "count")
        print("  " + "  ".join(h.ljust(w) if i else h.rjust(w) for i, (h, w) in
                               enumerate(zip(header, widths, strict=True))) + "  message", file=out)
        for r in rows:
            cells = [r[0].rjust(widths[0])] + [r[i].ljust(widths[i]) for i in range(1, 5)]
            print("  " + "  ".join(cells) + "  " + r[5], file=out)
        if total > len(rows):
            print(f"  ... and {total - len(rows):,} more (--format json lists them all)",
                  file=out)
    for kill in summary.kills:
        run = f" (run {printable(kill.run)})" if summary.runs > 1 and kill.run else ""
        print(f"  run killed at call {kill.call}{run} by {printable(kill.detection.layer)}", file=out)
    if summary.not_evaluated:
        print(f"  {summary.not_evaluated:,} later call{_s(summary.not_evaluated)} not evaluated "
              "(their run was already killed)", file=out)


# --------------------------------------------------------------------------- report


def _configs_and_traces(
    command: str, config_paths: Sequence[str | None], env: str | None, paths: Sequence[str],
    err: TextIO, *, stdin: bool,
) -> tuple[list[Config], list[str]] | None:
    """The configs and trace files a command works on, or None once what is wrong is printed."""
    configs = []
    for path in config_paths:
        try:
            configs.append(Config.load(path, env=env))
        except ConfigError as exc:
            print(f"{command}: {exc}", file=err)
            return None
    files = list(trace_files(paths))
    bad = False
    for p in files:
        if p == "-" and not stdin:
            print(f"{command}: --compare reads each trace twice: give files, not -", file=err)
            bad = True
        elif p != "-" and (not os.path.exists(p) or os.path.isdir(p)):
            print(f"{command}: no such trace file: {p}", file=err)
            bad = True
    if not files:
        print(f"{command}: no .jsonl traces found in " + ", ".join(paths), file=err)
        bad = True
    return None if bad else (configs, files)


def report(
    paths: Sequence[str],
    *,
    config_path: str | None = None,
    env: str | None = None,
    html: str | None = None,
    use_code_settings: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``fuze report``: the stop report of each run in the traces; returns the exit status."""
    from fuzeguard._private.reports.report import trace_reports
    from fuzeguard._private.reports.report_html import page

    out = out or sys.stdout
    err = err or sys.stderr
    loaded = _configs_and_traces("fuze report", [config_path], env, paths, err, stdin=True)
    if loaded is None:
        return EXIT_USAGE
    [config], files = loaded

    def on_problem(problem: Problem) -> None:
        print(f"fuze report: {problem}", file=err)

    not_traces: list[str] = []

    def on_summary(summary: TraceSummary) -> None:
        if not _is_trace("fuze report", summary, err):
            not_traces.append(summary.trace)

    try:
        reports = trace_reports(files, config, use_code_settings=use_code_settings,
                                on_problem=on_problem, on_summary=on_summary)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"fuze report: cannot read a trace: {exc.strerror or exc}", file=err)
        return EXIT_USAGE
    for i, item in enumerate(reports):
        if i:
            out.write("\n")
        out.write("\n".join(map(printable, item.text().split("\n"))))
    if html is not None and reports:
        title = "fuzeguard report: " + ", ".join(files) if len(files) <= 3 else (
            f"fuzeguard report: {len(files)} traces")
        try:
            Path(html).write_text(page(reports, title), encoding="utf-8")
        except OSError as exc:
            print(f"fuze report: cannot write {html}: {exc.strerror or exc}", file=err)
            return EXIT_USAGE
        print(f"fuze report: wrote {html}", file=err)
    return EXIT_USAGE if not_traces else EXIT_OK


# --------------------------------------------------------------------------- compare


def _outcome(summary: TraceSummary) -> str:
    """What one config does to one trace, in a few words."""
    if summary.kills:
        first = summary.kills[0]
        d = first.detection
        text = (f"killed at call {first.call} by {d.layer}" if summary.runs == 1 else
                f"{summary.killed_runs} of {summary.runs} runs killed (first at call {first.call} "
                f"by {d.layer})")
    elif summary.detected:
        text = "not killed"
    else:
        return "nothing fires"
    actions = ", ".join(f"{summary.by_action[a]} {a}" for a in ("warn", "skip", "ask", "observe")
                        if summary.by_action.get(a))
    return f"{text}; {actions}" if actions else text


def _difference(a: TraceSummary, b: TraceSummary) -> str:
    """How B's outcome differs from A's, in a few words."""
    ka, kb = a.kills, b.kills
    if ka and kb:
        ca, cb = ka[0].call, kb[0].call
        if cb < ca:
            return f"B stops it {ca - cb} call{_s(ca - cb)} earlier"
        if cb > ca:
            return f"B stops it {cb - ca} call{_s(cb - ca)} later"
        if ka[0].detection.layer != kb[0].detection.layer:
            return "same call, another layer"
        if a.killed_runs != b.killed_runs:
            return f"B kills {b.killed_runs} runs, A {a.killed_runs}"
    elif ka:
        return "only A stops it"
    elif kb:
        return "only B stops it"
    if a.detected != b.detected:
        more = b.detected - a.detected
        return (f"B: {abs(more)} detection{_s(abs(more))} {'more' if more > 0 else 'fewer'}")
    return "same"


def compare(
    paths: Sequence[str],
    config_a: str,
    config_b: str,
    *,
    env: str | None = None,
    fmt: str = "text",
    use_code_settings: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
    jobs: int | None = None,
) -> int:
    """``fuze replay --compare A B``: each trace under both configs, side by side (in ``jobs``
    processes, as ``replay``)."""
    out = out or sys.stdout
    err = err or sys.stderr
    loaded = _configs_and_traces("fuze replay", [config_a, config_b], env, paths, err,
                                 stdin=False)
    if loaded is None:
        return EXIT_USAGE
    configs, files = loaded

    def on_problem(problem: Problem) -> None:
        print(f"fuze replay: {problem}", file=err)

    # Each problem once (from A's replay): both replays read the same lines.
    replayers = [Replayer(c, on_problem=on_problem if i == 0 else None,
                          use_code_settings=use_code_settings, keep=0)
                 for i, c in enumerate(configs)]
    rows: list[tuple[str, str, str, str]] = []
    size = sum(_text_size(p) if os.path.isfile(p) else 0 for p in files)
    replayed = replay_files(replayers, files, _processes(jobs, len(files), 2 * size))
    for path in files:
        try:
            a, b = next(replayed)
        except BrokenPipeError:
            raise
        except (OSError, WorkerLost) as exc:
            return _unreplayable(path, exc, err)
        if fmt == "json":
            out.write(json.dumps({"trace": path, "a": _as_json(a), "b": _as_json(b),
                                  "difference": _difference(a, b)}, ensure_ascii=False) + "\n")
        rows.append((path, _outcome(a), _outcome(b), _difference(a, b)))
    if fmt == "text":
        print(f"A: {config_a}\nB: {config_b}\n", file=out)
        header = ("trace", "A", "B", "difference")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        print("  ".join(h.ljust(w) for h, w in zip(header, [*widths, 0], strict=True)).rstrip(),
              file=out)
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, [*widths, 0], strict=True)).rstrip(),
                  file=out)
        changed = sum(1 for r in rows if r[3] != "same")
        print(f"\n{changed} of {len(rows)} trace{_s(len(rows))} differ.", file=out)
    return EXIT_OK


def _as_json(summary: TraceSummary) -> dict[str, Any]:
    kill = summary.kills[0] if summary.kills else None
    return {
        "calls": summary.calls,
        "runs": summary.runs,
        "detections": summary.detected,
        "by_action": dict(summary.by_action),
        "killed": summary.killed_runs,
        "first_kill": None if kill is None else {"call": kill.call, "layer": kill.detection.layer},
    }
