"""A config document: a TOML file read as text and data, and its tables and keys checked into
values, with errors that name the file, the key and its line.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fuzeguard._private.configuration.schema import ALIASES, SECTIONS, schema
from fuzeguard._private.configuration.suggest import did_you_mean
from fuzeguard._private.configuration.toml_lines import line_of
from fuzeguard._private.configuration.validation import check_layer_names, coerce
from fuzeguard._private.runs.exceptions import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]


class Source:
    """A parsed document and how to point at places in it."""

    def __init__(self, label: str, text: str | None, prefix: str = "") -> None:
        self.label = label
        self.text = text
        self.prefix = prefix  # "tool.fuzeguard." inside pyproject.toml

    def error(self, message: str, key: str) -> ConfigError:
        return ConfigError(
            message, file=self.label, key=key, line=line_of(self.text, self.prefix + key)
        )


def read_toml(path: Path) -> tuple[dict[str, Any], str]:
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


def parse(
    data: Mapping[str, Any], source: Source
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
                "[functions.NAME]" + did_you_mean(table, tables).replace("`", "", 1).replace("`", "", 1)
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
    body: Mapping[str, Any], where: str, section: str | None, source: Source
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
        key = ALIASES.get(raw_key, raw_key)
        spec = specs.get(key)
        if spec is None:
            pool = [k for k, s in specs.items() if section is None or s.section == section]
            raise source.error(
                f"unknown key `{dotted}`" + did_you_mean(raw_key, [*pool, *ALIASES]), dotted
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
