"""``Config``: an effective configuration, loaded from the config file and its environment
overlay, and each function's settings resolved from it.

Precedence, lowest first: built-in defaults, the base file, the ``FUZE_ENV`` overlay file,
keyword settings given to ``fuzeguard.run()`` (run-wide), ``[functions.NAME]`` tables (more
specific, so they still win for their function), keyword arguments to ``guard()``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fuzeguard._private.configuration.config_file import Source, parse, read_toml
from fuzeguard._private.configuration.discovery import discover, overlay_path
from fuzeguard._private.configuration.schema import IMPORT_KEYS, defaults, schema
from fuzeguard._private.configuration.toml_lines import line_of
from fuzeguard._private.configuration.trust import file_distrust
from fuzeguard._private.configuration.validation import check_combination, derive, follows
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.exceptions import ConfigError


class Config:
    """An effective configuration: file values over built-in defaults, plus per-function tables.

    Build one with ``Config.load()`` (discovery, or a given path, with an optional environment
    overlay), ``Config.from_dict()`` (a TOML-shaped mapping) or ``Config()`` (built-in defaults).
    Configs are immutable; ``settings_for(name)`` gives a function's effective values.
    """

    __slots__ = ("_functions", "_origins", "_values", "env", "files")

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        functions: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        origins: Mapping[str, str] | None = None,
        files: tuple[str, ...] = (),
        env: str | None = None,
    ) -> None:
        self._values = dict(values or {})
        self._functions = {k: dict(v) for k, v in (functions or {}).items()}
        self._origins = dict(origins or {})
        self.files = files
        self.env = env
        self._check()

    def _check(self) -> None:
        for fn, table in [(None, {}), *self._functions.items()]:
            try:
                values = derive({**defaults(), **self._values, **table}, {*self._values, *table})
                check_combination(values)
            except ValueError as exc:
                raise self._combination_error(fn, table, str(exc)) from None

    def _combination_error(self, fn: str | None, table: Mapping[str, Any], message: str) -> ConfigError:
        """Point a cross-key error at the first key it names that a file set."""
        for key in re.findall(r"[a-z_]+", message):
            dotted = f"functions.{fn}.{key}" if fn and key in table else key
            origin = self._origins.get(dotted)
            if origin is None:
                continue
            section = schema()[key].section if key in schema() else ""
            full = dotted if fn and key in table else f"{section}.{key}"
            line = None
            if os.path.isfile(origin):
                line = line_of(Path(origin).read_text(encoding="utf-8"), full)
                if line is None:
                    line = line_of(Path(origin).read_text(encoding="utf-8"), "tool.fuzeguard." + full)
            return ConfigError(f"`{full}`: {message}", file=origin, key=full, line=line)
        return ConfigError(message, file=self.files[-1] if self.files else None)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, *, env: str | None = None) -> Config:
        """Load a config file (or discover one when ``path`` is None) and its environment overlay.

        ``env`` defaults to ``FUZE_ENV``; the overlay is ``fuze.<env>.toml`` beside the base file.
        """
        where = f"environment {env!r}"
        if env is None:
            env = os.environ.get("FUZE_ENV") or None
            where = f"FUZE_ENV={env!r}"
        prefix: str | None
        if path is None:
            base, prefix = discover()
        else:
            base = Path(path)
            prefix = "tool.fuzeguard" if base.name == "pyproject.toml" else None
            if not base.is_file():
                raise ConfigError("config file not found; check the path", file=str(base))
        values: dict[str, Any] = {}
        functions: dict[str, dict[str, Any]] = {}
        origins: dict[str, str] = {}
        files: list[str] = []
        layers: list[tuple[Path, str | None]] = []
        if base is not None:
            layers.append((base, prefix))
        if env:
            folder = base.parent if base is not None else Path.cwd()
            overlay = overlay_path(folder, env, base, where)
            why = file_distrust(overlay) if path is None else None
            if why is not None:  # found by discovery, so held to its rules
                raise ConfigError(
                    f"{where} names {overlay.name}, which was not read because {why}: another "
                    "user could have put it there or changed it. Move it to a folder you own "
                    "that only you can write, or name the base file with FUZE_CONFIG",
                    file=str(overlay),
                )
            layers.append((overlay, None))
        for file, pre in layers:
            data, text = read_toml(file)
            if pre:
                for part in pre.split("."):
                    if not isinstance(data, Mapping):
                        break
                    data = data.get(part, {})
                if not isinstance(data, Mapping):
                    raise ConfigError(
                        f"`{pre}` must be a table: write [{pre}] and its keys beneath it, or "
                        f"remove it (it is {type(data).__name__} {data!r})",
                        file=str(file), key=pre, line=line_of(text, pre),
                    )
            source = Source(str(file), text, pre + "." if pre else "")
            v, f = parse(data, source)
            _check_imports(file, source, v, f)
            values.update(v)
            origins.update({k: str(file) for k in v})
            for fn, table in f.items():
                functions.setdefault(fn, {}).update(table)
                origins.update({f"functions.{fn}.{k}": str(file) for k in table})
            files.append(str(file))
        return cls(values, functions, origins=origins, files=tuple(files), env=env)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> Config:
        """Build a config from a TOML-shaped mapping (``{"defaults": {...}, "functions": {...}}``)."""
        values, functions = parse(data, Source(source, None))
        origins = {k: source for k in values}
        origins.update({f"functions.{fn}.{k}": source for fn, t in functions.items() for k in t})
        return cls(values, functions, origins=origins, files=(source,))

    def with_values(self, values: Mapping[str, Any], *, origin: str = "code") -> Config:
        """A copy with run-level values replaced (already validated)."""
        origins = {**self._origins, **{k: origin for k in values}}
        return Config(
            {**self._values, **values}, self._functions, origins=origins, files=self.files, env=self.env
        )

    def settings_for(
        self, fn: str | None = None, *, overrides: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Every key's effective value for function ``fn`` (or for the run when None).

        ``overrides`` are a guard's validated code settings, applied last. Defaults that follow
        another key (an early warning and its limit) follow the values set here. Raises
        ConfigError when ``overrides`` contradict a value set elsewhere.
        """
        out = {**defaults(), **self._values}
        explicit = set(self._values)
        if fn is not None and fn in self._functions:
            table = self._functions[fn]
            out.update(table)
            explicit.update(table)
        if overrides:
            out.update(overrides)
            explicit.update(overrides)
        try:
            return derive(out, explicit)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def set_for(self, fn: str | None = None) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """The values this config sets itself (not left to defaults): run-wide, and in ``fn``'s
        ``[functions.NAME]`` table. With a guard's overrides they are all ``settings_for(fn)``
        depends on: two configs that set the same give the same settings."""
        table = self._functions.get(fn, {}) if fn is not None else {}
        return MappingProxyType(self._values), MappingProxyType(table)

    def origin_of(self, key: str, fn: str | None = None) -> str:
        """Where a key's effective value comes from: ``"default"``, a file path, or ``"code"``.

        A default that follows another key is ``"default, following KEY"`` when it does.
        """
        if fn is not None and f"functions.{fn}.{key}" in self._origins:
            return f"[functions.{fn}] in {self._origins[f'functions.{fn}.{key}']}"
        origin = self._origins.get(key, "default")
        other = follows(key)
        if (
            origin == "default"
            and other is not None
            and self.settings_for(fn)[key] != schema()[key].default
        ):
            return f"default, following {other}"
        return origin

    @property
    def functions(self) -> tuple[str, ...]:
        """Names of the functions that have their own table."""
        return tuple(self._functions)

    @property
    def described(self) -> str:
        """Where its values come from, in words: its files (or built-in defaults) and env."""
        files = ", ".join(self.files) or "built-in defaults"
        return f"{files} (env {self.env})" if self.env else files

    def __repr__(self) -> str:
        files = ", ".join(self.files) or "built-in defaults"
        env = f", env={self.env!r}" if self.env else ""
        return f"<Config {files}{env}>"


def _check_imports(
    file: Path, source: Source, values: Mapping[str, Any], functions: Mapping[str, Mapping[str, Any]]
) -> None:
    """Refuse a file that names code to import (``embed``) when another user could have written
    it: fuzeguard would run that code on every call's text."""
    named = [(k, k) for k in values if k in IMPORT_KEYS]
    named += [(f"functions.{fn}.{k}", k) for fn, t in functions.items() for k in t if k in IMPORT_KEYS]
    if not named:
        return
    why = file_distrust(file)
    if why is None:
        return
    dotted, key = named[0]
    full = dotted if dotted.startswith("functions.") else f"{schema()[key].section}.{key}"
    raise source.error(
        f"`{full}` names code to import, and {why}: fuzeguard imports code named only by a file "
        "that you or root own and that other users cannot write. Fix the file's owner or "
        f"permissions (chmod o-w), or pass {key}= in code", full,
    )


_cached: tuple[tuple[str, str, str], Config] | None = None


def discovered_config() -> Config:
    """The config found by discovery for the current directory and environment, cached."""
    global _cached
    key = (os.getcwd(), os.environ.get("FUZE_CONFIG", ""), os.environ.get("FUZE_ENV", ""))
    if _cached is None or _cached[0] != key:
        _cached = (key, Config.load())
    return _cached[1]


_config_errors_logged: set[str] = set()


def checked_discovered_config() -> Config:
    """``discovered_config()``, with a ``ConfigError`` logged at error level (once per message)
    before it is raised: a framework that catches the exceptions of a tool call (and shows the
    model "An error occurred") must not hide a broken fuze.toml."""
    try:
        return discovered_config()
    except ConfigError as exc:
        message = str(exc)
        if message not in _config_errors_logged:
            _config_errors_logged.add(message)
            emit("error", "fuzeguard.config_error", error=message,
                 message=f"fuzeguard cannot use its configuration: {message}")
        raise
