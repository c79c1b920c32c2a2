"""The ``fuze`` command line: its commands, options and help (with examples)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

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
