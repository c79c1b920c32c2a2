"""The names of the functions guarded in this process, and ``[functions.NAME]`` tables that name
none of them.

A table whose name matches no guarded function is silently ignored, so a typo
(``[functions.serach]``) would leave ``search`` on the defaults. Every ``Guard`` registers its
name; when a guard first resolves its settings under a config (once per guard and config, off
the hot path), the config's tables are checked against the names guarded so far, and each table
that matches none while a guarded name is close to it is logged once, as
``fuzeguard.unknown_function`` with the suggestion. Tools that an integration guards by name
appear when they are first called, so a table without a close guarded name is not reported here;
``fuze check --import MODULE`` reports every unmatched table once the tools are imported.
"""

from __future__ import annotations

from collections.abc import Iterable

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.suggest import suggest
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock

_guarded: set[str] = set()
_reported: set[tuple[tuple[str, ...], str]] = set()
_lock = new_lock()


def register(name: str) -> None:
    """Remember a guarded function's name (its ``[functions.NAME]``)."""
    _guarded.add(name)


def guarded() -> frozenset[str]:
    """The names guarded in this process so far."""
    return frozenset(_guarded)


def unmatched(config: Config, names: Iterable[str] | None = None) -> list[tuple[str, str | None]]:
    """Each ``[functions.NAME]`` table of ``config`` that names no guarded function, with the
    closest guarded name (or None)."""
    known = set(_guarded if names is None else names)
    return [(fn, suggest(fn, known) if known else None)
            for fn in config.functions if fn not in known]


def warn_unmatched(config: Config) -> None:
    """Log each table of ``config`` that matches no guarded function but is close to one (once
    per config file and table)."""
    if not config.functions:
        return
    for fn, best in unmatched(config):
        if best is None:
            continue
        key = (config.files, fn)
        with _lock:
            if key in _reported:
                continue
            _reported.add(key)
        where = ", ".join(config.files) or "the config"
        emit("warning", "fuzeguard.unknown_function", fn=fn, suggestion=best,
             message=f"[functions.{fn}] in {where} matches no guarded function, so its settings "
             f"apply to nothing; did you mean [functions.{best}]?")
