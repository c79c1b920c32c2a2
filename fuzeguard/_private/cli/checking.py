"""``fuze check``: every key's effective value and where it comes from, and ``[functions.NAME]``
tables that match no guarded function."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from fuzeguard._private.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    _config,
    _s,
)
from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.names import guarded, unmatched
from fuzeguard._private.configuration.schema import schema
from fuzeguard._private.configuration.validation import masked_url


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
    config = _config("fuze check", path, env, err)
    if config is None:
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
        # Deferred for start-up time: the store is loaded only when the config names one.
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
