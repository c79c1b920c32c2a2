"""Entry point of the ``fuze`` command: parse the command line and run the command it names."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from fuzeguard._private.cli.checking import check
from fuzeguard._private.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
)
from fuzeguard._private.cli.comparing import compare
from fuzeguard._private.cli.ending import end
from fuzeguard._private.cli.parser import _parser
from fuzeguard._private.cli.replaying import replay
from fuzeguard._private.cli.reporting import report


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
        # The demo parses its own options; its help (with examples) is the one below. Deferred
        # for start-up time, as each command's own imports: loaded by this command only.
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
        # Deferred for start-up time, as each command's own imports: loaded by this command only.
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
