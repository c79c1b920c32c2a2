"""Configuration: the schema built from the settings dataclasses, fuze.toml discovery and loading,
strict validation with helpful errors, and per-function resolution.

Precedence, lowest first: built-in defaults, the base file, the ``FUZE_ENV`` overlay file,
keyword settings given to ``fuzeguard.run()`` (run-wide), ``[functions.NAME]`` tables (more
specific, so they still win for their function), keyword arguments to ``guard()``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
from collections.abc import Container, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from fuzeguard._private.exceptions import ConfigError
from fuzeguard._private.settings import Settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ACTIONS = ("kill", "warn", "skip")
SECTIONS = ("defaults", "loop_detection")
_ALIASES = {"kill_on_loop": "on_loop"}
# Settings that code may give as a callable as well as a plain value.
_CALLABLE_OK = frozenset({"cost", "skip_value", "embed"})
# The largest whole number any key accepts: far above any real window or limit, and small enough
# that no window size, count or buffer derived from it overflows.
MAX_INT = 2**31 - 1
# "package.module:function", absolute (importlib needs a package to resolve ".module").
_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """One configuration key: where it lives, its type and bounds, its default and its story."""

    key: str
    owners: tuple[type, ...]
    section: str
    scope: str
    type: str
    default: Any
    doc: str
    origin: str
    minimum: float | None
    maximum: float | None
    optional: bool
    unset: str = "off"


def _setting_classes() -> list[type]:
    from fuzeguard.layers import BUILTIN_LAYERS

    return [Settings, *BUILTIN_LAYERS.values()]


@cache
def schema() -> Mapping[str, FieldSpec]:
    """Every configuration key, from ``Settings`` and the built-in layers' fields."""
    specs: dict[str, FieldSpec] = {}
    for cls in _setting_classes():
        for f in dataclasses.fields(cls):
            meta = f.metadata
            if "type" not in meta:
                continue
            spec = FieldSpec(
                key=f.name,
                owners=(cls,),
                section=meta["section"] or getattr(cls, "section", "loop_detection"),
                scope=meta["scope"] or getattr(cls, "scope", "function"),
                type=meta["type"],
                default=f.default,
                doc=meta["doc"],
                origin=meta["origin"],
                minimum=meta["minimum"],
                maximum=meta["maximum"],
                optional=meta["optional"],
                unset=meta["unset"],
            )
            if f.name in specs:
                # A key shared by several layers (such as result_aware) sets all of them.
                spec = dataclasses.replace(specs[f.name], owners=(*specs[f.name].owners, cls))
            specs[f.name] = spec
    return specs


def defaults() -> dict[str, Any]:
    """The built-in value of every key."""
    return {key: spec.default for key, spec in schema().items()}


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a mistyped name, if any is close enough."""
    from rapidfuzz import fuzz, process

    found = process.extractOne(word, list(candidates), scorer=fuzz.WRatio, score_cutoff=72)
    return None if found is None else str(found[0])


def _did_you_mean(word: str, candidates: Iterable[str]) -> str:
    best = suggest(word, candidates)
    return f"; did you mean `{best}`?" if best else ""


# --------------------------------------------------------------------------- value coercion

_DURATION_PART = re.compile(
    r"(\d+(?:\.\d+)?)\s*(ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d)(?![a-z])\s*"
)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# No real duration is longer than this ("1d 23h 59m 59.999s" is 18); a longer text is refused
# before any parsing, so a hostile value costs nothing.
MAX_DURATION_TEXT = 64


def parse_duration(text: str) -> float:
    """Seconds in a duration string such as ``"90s"``, ``"30m"``, ``"1h30m"`` or ``"1.5h"``.

    Linear in the length of the text: each part is matched where the previous one ended.
    """
    compact = text.strip().lower()
    if len(compact) > MAX_DURATION_TEXT:
        raise ValueError(
            f"cannot read a {len(compact):,}-character text as a duration; write seconds or a "
            'short duration such as "90s", "30m", "1h30m"'
        )
    pos, total = 0, 0.0
    match = _DURATION_PART.match
    while pos < len(compact):
        m = match(compact, pos)
        if m is None:
            break
        unit = m.group(2)
        total += float(m.group(1)) * _DURATION_UNITS["ms" if unit == "ms" else unit[0]]
        pos = m.end()
    if pos == 0 or pos < len(compact):
        raise ValueError(f'cannot read "{text}" as a duration; write seconds or "90s", "30m", "1h30m"')
    if not math.isfinite(total):
        raise ValueError(f'"{text}" is too long a duration to count in seconds')
    return total


def _type_error(value: Any, expected: str) -> ValueError:
    return ValueError(f"expected {expected}, got {type(value).__name__} {value!r}")


def coerce(spec: FieldSpec, value: Any, *, from_code: bool) -> Any:
    """Check one value against its spec and return it normalized; raise ValueError if it is wrong."""
    if value is None and spec.optional and from_code:
        return None
    if from_code and spec.key in _CALLABLE_OK and callable(value):
        return value
    t = spec.type
    if t == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise _type_error(value, "a whole number")
        out: Any = value
    elif t == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            raise _type_error(value, "a number")
        out = float(value)
    elif t == "duration":
        if isinstance(value, str):
            out = parse_duration(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                out = float(value)
            except OverflowError:
                raise ValueError(f"{value!r} seconds is too long a duration") from None
            if math.isnan(out):
                raise _type_error(value, 'seconds or a duration string such as "30m"')
        else:
            raise _type_error(value, 'seconds or a duration string such as "30m"')
    elif t == "bool":
        if not isinstance(value, bool):
            raise _type_error(value, "true or false")
        out = value
    elif t == "enabled":
        if not isinstance(value, bool) and value != "observe":
            raise _type_error(value, 'true, false or "observe"')
        out = value
    elif t == "kind":
        from fuzeguard._private.kinds import AUTO, KINDS

        if value != AUTO and value not in KINDS:
            raise ValueError(
                f"unknown kind {value!r}; use one of \"auto\", "
                + ", ".join(f'"{k}"' for k in KINDS)
                + _did_you_mean(str(value), (AUTO, *KINDS)).replace("`", '"')
            )
        out = value
    elif t == "str":
        if not isinstance(value, str):
            raise _type_error(value, "a string")
        if spec.key in _CALLABLE_OK and not _IMPORT_PATH.fullmatch(value):
            raise ValueError(
                f'expected an import path "package.module:function", got {value!r} (relative '
                "imports cannot be resolved; write the module's full dotted name)"
            )
        out = value
    elif t == "path":
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str) or not value:
            raise _type_error(value, "a file or directory path")
        out = value
    elif t == "store":
        out = check_store_url(value)
    elif t == "strs":
        if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
            raise _type_error(value, 'a list of strings, such as ["a", "b"]')
        if not all(isinstance(v, str) for v in value):
            raise ValueError(f"every item must be a string, got {list(value)!r}")
        out = tuple(value)
    elif t == "actions":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise _type_error(value, '"kill", "warn", "skip" or a list of them')
        for item in items:
            if item not in ACTIONS:
                raise ValueError(
                    f"unknown action {item!r}; use one of \"kill\", \"warn\", \"skip\""
                    + _did_you_mean(str(item), ACTIONS).replace("`", '"')
                )
        out = tuple(items)
    else:
        out = value
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        if spec.minimum is not None and out < spec.minimum:
            raise ValueError(f"must be at least {spec.minimum:g}, got {out!r}")
        if spec.maximum is not None and out > spec.maximum:
            raise ValueError(f"must be at most {spec.maximum:g}, got {out!r}")
        if t == "int" and out > MAX_INT:
            raise ValueError(f"must be at most {MAX_INT:,} (2**31 - 1), got {out:,}")
    return out


def plain_data_key(key: str) -> bool:
    """Whether ``key`` holds plain data that a trace may record and replay may apply: a known key
    that can hold neither code nor the name of code (``embed``, ``cost``, ``skip_value``) nor a
    path that replaying would write to (``trace``) nor a server it would connect to (``store``)."""
    key = _ALIASES.get(key, key)
    spec = schema().get(key)
    return spec is not None and key not in _CALLABLE_OK and spec.type not in ("path", "store", "any")


STORE_SCHEMES = ("redis://", "rediss://", "unix://")


def check_store_url(value: Any) -> str:
    """A store setting: a Redis URL (``redis://``, ``rediss://`` or ``unix://``)."""
    if not isinstance(value, str) or not value.startswith(STORE_SCHEMES):
        raise ValueError(
            f'expected a Redis URL such as "redis://localhost:6379/0" (redis://, rediss:// or '
            f"unix://), got {value!r}"
        )
    return value


def check_layer_names(names: Iterable[Any]) -> None:
    from fuzeguard.layers import BUILTIN_LAYERS

    for name in names:
        if isinstance(name, str) and name not in BUILTIN_LAYERS:
            raise ValueError(
                f"unknown layer {name!r}; known layers: {', '.join(BUILTIN_LAYERS)}"
                + _did_you_mean(name, BUILTIN_LAYERS)
            )


def check_combination(values: Mapping[str, Any]) -> None:
    """Check what single keys cannot: construct every layer, which validates its own fields."""
    for cls in _setting_classes():
        try:
            cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})
        except ValueError:
            raise
        except Exception as exc:  # such as an embed module that fails to import
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
    check_layer_names(values.get("layers", ()))
    check_layer_names(values.get("exempt_from", ()))


# Early warnings and the limits they come before. A value the user did not write follows the one
# they did: lowering a limit below the built-in warning lowers the warning with it (and a warning
# set above the built-in limit raises the limit), so only two values the user wrote can
# contradict each other.
WARNS_BEFORE = {
    "repeat_warn_threshold": "repeat_threshold",
    "progress_warn_window": "progress_window",
    "cycle_warn_repeats": "cycle_repeats",
}


def derive(values: dict[str, Any], explicit: Container[str]) -> dict[str, Any]:
    """Make the early-warning keys of ``values`` follow their limits where the user (``explicit``:
    the keys they set) left one of the pair to its default; return ``values``, changed in place.

    Raises ValueError, saying exactly what to change, when the user set both and the warning
    would come after the limit.
    """
    for warn, limit in WARNS_BEFORE.items():
        w, h = values.get(warn), values.get(limit)
        if type(w) is not int or type(h) is not int or w <= h:
            continue
        if warn not in explicit:
            values[warn] = h
        elif limit not in explicit:
            values[limit] = w
        else:
            raise ValueError(
                f"{warn} ({w}) is above {limit} ({h}), so the warning would come after the loop "
                f"is stopped: set {warn} to at most {h} (0 turns the early warning off), or "
                f"raise {limit} to at least {w}"
            )
    return values


def follows(key: str) -> str | None:
    """The key whose value a default of ``key`` follows (see ``WARNS_BEFORE``), if any."""
    if key in WARNS_BEFORE:
        return WARNS_BEFORE[key]
    for warn, limit in WARNS_BEFORE.items():
        if limit == key:
            return warn
    return None


# --------------------------------------------------------------------------- documents


def _line_of(text: str | None, dotted: str) -> int | None:
    """The line where a dotted key (or table) is written, found by a light scan of the TOML text."""
    if not text:
        return None
    table = ""
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    keyline = re.compile(r'^\s*("[^"]*"|\'[^\']*\'|[A-Za-z0-9_.\-]+)\s*=')
    for number, line in enumerate(text.splitlines(), start=1):
        h = header.match(line)
        if h:
            table = _unquote_dotted(h.group(1))
            if table == dotted:
                return number
            continue
        k = keyline.match(line)
        if k:
            key = _unquote_dotted(k.group(1))
            full = f"{table}.{key}" if table else key
            if full == dotted or full.startswith(dotted + "."):
                return number
    return None


def _unquote_dotted(raw: str) -> str:
    parts = [p.strip().strip("\"'") for p in re.split(r"\.(?=(?:[^\"']*[\"'][^\"']*[\"'])*[^\"']*$)", raw)]
    return ".".join(parts)


class _Source:
    """A parsed document and how to point at places in it."""

    def __init__(self, label: str, text: str | None, prefix: str = "") -> None:
        self.label = label
        self.text = text
        self.prefix = prefix  # "tool.fuzeguard." inside pyproject.toml

    def error(self, message: str, key: str) -> ConfigError:
        return ConfigError(
            message, file=self.label, key=key, line=_line_of(self.text, self.prefix + key)
        )


def _read_toml(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", file=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError("the config file is not UTF-8 text", file=str(path)) from exc
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise ConfigError(
            f"not valid TOML: {exc}", file=str(path), line=int(m.group(1)) if m else None
        ) from exc
    except RecursionError:
        raise ConfigError(
            "not valid TOML for fuzeguard: arrays or tables nested too deeply to read (no "
            "setting nests more than one level)", file=str(path)
        ) from None


def _parse(
    data: Mapping[str, Any], source: _Source
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Validate a TOML-shaped mapping; return (values, functions). Raises ConfigError."""
    specs = schema()
    values: dict[str, Any] = {}
    functions: dict[str, dict[str, Any]] = {}
    tables = (*SECTIONS, "functions")
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"a config must be a mapping of tables such as {{\"defaults\": {{...}}}}, got "
            f"{type(data).__name__}", file=source.label
        )
    for table, body in data.items():
        if not isinstance(table, str):
            raise ConfigError(f"table names must be strings, got {table!r}", file=source.label)
        if table not in tables:
            if table in specs:
                raise source.error(
                    f"`{table}` must be inside a table: put it under [{specs[table].section}]", table
                )
            raise source.error(
                f"unknown table `[{table}]`; known tables: [defaults], [loop_detection], "
                "[functions.NAME]" + _did_you_mean(table, tables).replace("`", "", 1).replace("`", "", 1)
                .replace("mean ", "mean [").replace("?", "]?"), table
            )
        if not isinstance(body, Mapping):
            raise source.error(f"`{table}` must be a table, like [{table}]", table)
        if table == "functions":
            for fn, fn_body in body.items():
                if not isinstance(fn, str):
                    raise ConfigError(
                        f"function names under `functions` must be strings, got {fn!r}",
                        file=source.label,
                    )
                if not isinstance(fn_body, Mapping):
                    raise source.error(
                        f"`functions.{fn}` must be a table: write [functions.{fn}] and its keys "
                        "beneath it", f"functions.{fn}"
                    )
                functions[fn] = _parse_table(fn_body, f"functions.{fn}", None, source)
        else:
            values.update(_parse_table(body, table, table, source))
    return values, functions


def _parse_table(
    body: Mapping[str, Any], where: str, section: str | None, source: _Source
) -> dict[str, Any]:
    specs = schema()
    if "kill_on_loop" in body and "on_loop" in body:
        raise source.error(
            f"`{where}` sets both kill_on_loop and on_loop; keep one (kill_on_loop = true is "
            'on_loop = "kill", false is "warn")', f"{where}.kill_on_loop"
        )
    out: dict[str, Any] = {}
    for raw_key, value in body.items():
        if not isinstance(raw_key, str):
            raise source.error(f"keys of `{where}` must be strings, got {raw_key!r}", where)
        dotted = f"{where}.{raw_key}"
        key = _ALIASES.get(raw_key, raw_key)
        spec = specs.get(key)
        if spec is None:
            pool = [k for k, s in specs.items() if section is None or s.section == section]
            raise source.error(
                f"unknown key `{dotted}`" + _did_you_mean(raw_key, [*pool, *_ALIASES]), dotted
            )
        if section is not None and spec.section != section:
            raise source.error(f"`{dotted}` belongs in [{spec.section}], not [{section}]", dotted)
        if section is None and spec.scope == "run":
            raise source.error(
                f"`{dotted}` is a run-wide setting and cannot be set per function; put it in "
                f"[{spec.section}]", dotted
            )
        if raw_key == "kill_on_loop":
            if not isinstance(value, bool):
                raise source.error(f"`{dotted}`: expected true or false, got {value!r}", dotted)
            value = "kill" if value else "warn"
        try:
            out[key] = coerce(spec, value, from_code=False)
            if key in ("layers", "exempt_from"):
                check_layer_names(out[key])
        except ValueError as exc:
            raise source.error(f"`{dotted}`: {exc}", dotted) from None
    return out


def validate_code_options(options: Mapping[str, Any], where: str, *, run_scope: bool) -> dict[str, Any]:
    """Validate keyword options given in code (``guard(...)``, ``run(...)``)."""
    specs = schema()
    out: dict[str, Any] = {}
    options = dict(options)
    if "kill_on_loop" in options:
        if "on_loop" in options:
            raise TypeError(f"{where}: pass on_loop= or kill_on_loop=, not both")
        kill = options.pop("kill_on_loop")
        if not isinstance(kill, bool):
            raise ConfigError(
                f"{where}: kill_on_loop: expected True or False, got {kill!r}", key="kill_on_loop"
            )
        options["on_loop"] = "kill" if kill else "warn"
    for key, value in options.items():
        spec = specs.get(key)
        if spec is None:
            raise TypeError(
                f"{where} got an unexpected keyword argument {key!r}"
                + _did_you_mean(key, [*specs, *_ALIASES]).replace("`", "'")
            )
        if not run_scope and spec.scope == "run":
            raise TypeError(
                f"{where}: {key} is a run-wide setting; pass it to fuzeguard.run({key}=...) or set "
                f"it in [{spec.section}]"
            )
        if key == "layers" and not isinstance(value, str) and isinstance(value, Iterable):
            items = tuple(value)
            check = [v for v in items if isinstance(v, str)]
            try:
                check_layer_names(check)
            except ValueError as exc:
                raise ConfigError(f"{where}: {key}: {exc}", key=key) from None
            out[key] = items
            continue
        try:
            out[key] = coerce(spec, value, from_code=True)
            if key == "exempt_from":
                check_layer_names(out[key])
        except ValueError as exc:
            raise ConfigError(f"{where}: {key}: {exc}", key=key) from None
    try:
        derive(dict(out), out)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return out


# --------------------------------------------------------------------------- discovery


def _walk_up(start: Path) -> Iterable[Path]:
    yield start
    yield from start.parents


def discover(
    cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path | None, str | None]:
    """Find the config file: ``FUZE_CONFIG``, the nearest fuze.toml, or the nearest pyproject.toml
    with a ``[tool.fuzeguard]`` table. Returns (path, prefix) with prefix ``"tool.fuzeguard"`` for a
    pyproject file, or (None, None) for built-in defaults."""
    env = os.environ if environ is None else environ
    explicit = env.get("FUZE_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(
                "FUZE_CONFIG points to a file that does not exist; fix the path or unset it",
                file=explicit,
            )
        return path, ("tool.fuzeguard" if path.name == "pyproject.toml" else None)
    start = (cwd or Path.cwd()).resolve()
    for folder in _walk_up(start):
        candidate = folder / "fuze.toml"
        if candidate.is_file():
            return candidate, None
    for folder in _walk_up(start):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            data, _ = _read_toml(candidate)
            if isinstance(data.get("tool"), Mapping) and "fuzeguard" in data["tool"]:
                return candidate, "tool.fuzeguard"
            return None, None
    return None, None


_ENV_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def overlay_path(folder: Path, env: str, base: Path | None, where: str) -> Path:
    """The overlay file ``fuze.<env>.toml`` in ``folder``, the base file's folder.

    Raises ConfigError for a name that could reach outside that folder (a path separator, ``..``)
    and for a name with no file, listing the environments that do have one.
    """
    if not _ENV_NAME.fullmatch(env) or ".." in env:
        raise ConfigError(
            f"{where} is not an environment name: use letters, digits, '_', '-' and '.', such as "
            "production or staging-eu (the overlay is fuze.NAME.toml beside the base file; a "
            "path cannot be given here)"
        )
    overlay = folder / f"fuze.{env}.toml"
    if not overlay.is_file():
        found = sorted(
            p.name[len("fuze.") : -len(".toml")] for p in folder.glob("fuze.?*.toml") if p.is_file()
        )
        beside = f"beside {base}" if base is not None else f"in {folder} (no base config file)"
        known = f"; environments with a file: {', '.join(found)}" if found else ""
        raise ConfigError(
            f"{where} names no file: there is no {overlay.name} {beside}{known}"
            + _did_you_mean(env, found).replace("`", "'")
            + "; create the file or fix the name"
        )
    return overlay


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
                line = _line_of(Path(origin).read_text(encoding="utf-8"), full)
                if line is None:
                    line = _line_of(Path(origin).read_text(encoding="utf-8"), "tool.fuzeguard." + full)
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
            layers.append((overlay_path(folder, env, base, where), None))
        for file, pre in layers:
            data, text = _read_toml(file)
            if pre:
                for part in pre.split("."):
                    if not isinstance(data, Mapping):
                        break
                    data = data.get(part, {})
                if not isinstance(data, Mapping):
                    raise ConfigError(
                        f"`{pre}` must be a table: write [{pre}] and its keys beneath it, or "
                        f"remove it (it is {type(data).__name__} {data!r})",
                        file=str(file), key=pre, line=_line_of(text, pre),
                    )
            v, f = _parse(data, _Source(str(file), text, pre + "." if pre else ""))
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
        values, functions = _parse(data, _Source(source, None))
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

    def __repr__(self) -> str:
        files = ", ".join(self.files) or "built-in defaults"
        env = f", env={self.env!r}" if self.env else ""
        return f"<Config {files}{env}>"


_cached: tuple[tuple[str, str, str], Config] | None = None


def discovered_config() -> Config:
    """The config found by discovery for the current directory and environment, cached."""
    global _cached
    key = (os.getcwd(), os.environ.get("FUZE_CONFIG", ""), os.environ.get("FUZE_ENV", ""))
    if _cached is None or _cached[0] != key:
        _cached = (key, Config.load())
    return _cached[1]

