"""Validation of setting values: each value checked against its key's type and bounds and
normalized (``coerce``), the checks across keys (layer names, combinations the layers refuse, an
early warning after its limit), and the keyword options given in code (``validate_code_options``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Container, Iterable, Mapping
from typing import Any

from fuzeguard._private.configuration.schema import ALIASES, CALLABLE_OK, FieldSpec, schema, setting_classes
from fuzeguard._private.configuration.suggest import did_you_mean
from fuzeguard._private.meaning.kinds import AUTO, KINDS
from fuzeguard._private.runs.exceptions import ConfigError

ACTIONS = ("kill", "warn", "skip", "ask")
# The largest whole number any key accepts: far above any real window or limit, and small enough
# that no window size, count or buffer derived from it overflows.
MAX_INT = 2**31 - 1
# "package.module:function", absolute (importlib needs a package to resolve ".module").
_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

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
    if from_code and spec.key in CALLABLE_OK and callable(value):
        return value
    t = spec.type
    if t == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise _type_error(value, "a whole number")
        out: Any = value
    elif t == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            raise _type_error(value, "a number")
        try:
            out = float(value)
        except OverflowError:
            out = math.inf
        if not math.isfinite(out):
            raise ValueError(f"expected a finite number, got {value!r:.40}")
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
        if value != AUTO and value not in KINDS:
            raise ValueError(
                f"unknown kind {value!r}; use one of \"auto\", "
                + ", ".join(f'"{k}"' for k in KINDS)
                + did_you_mean(str(value), (AUTO, *KINDS)).replace("`", '"')
            )
        out = value
    elif t == "str":
        if not isinstance(value, str):
            raise _type_error(value, "a string")
        if spec.key in CALLABLE_OK and not _IMPORT_PATH.fullmatch(value):
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
    elif t == "namespace":
        if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
            raise ValueError(
                "expected a name of letters, digits, '.', '_' or '-' (at most 64), such as "
                f'"billing-agent", got {value!r}'
            )
        out = value
    elif t == "strs":
        if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
            raise _type_error(value, 'a list of strings, such as ["a", "b"]')
        if not all(isinstance(v, str) for v in value):
            raise ValueError(f"every item must be a string, got {list(value)!r}")
        out = tuple(value)
    elif t == "fractions":
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise _type_error(value, "a list of fractions, such as [0.8, 0.95]")
        for item in value:
            if (not isinstance(item, (int, float)) or isinstance(item, bool)
                    or not 0 < item < 1):
                raise ValueError(
                    f"every item must be a fraction above 0 and below 1 (0.8 is 80%), got "
                    f"{list(value)!r}"
                )
        out = tuple(sorted({float(v) for v in value}))
    elif t == "actions":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise _type_error(value, '"kill", "warn", "skip", "ask" or a list of them')
        for item in items:
            if item not in ACTIONS:
                raise ValueError(
                    f"unknown action {item!r}; use one of \"kill\", \"warn\", \"skip\", \"ask\""
                    + did_you_mean(str(item), ACTIONS).replace("`", '"')
                )
        if "kill" in items[:-1]:
            after = list(items[list(items).index("kill") + 1:])
            raise ValueError(
                f"{list(items)!r}: a kill ends the run, so the steps after it ({after!r}) are "
                'never reached; put "kill" last, such as ["warn", "skip", "kill"]'
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


STORE_SCHEMES = ("redis://", "rediss://", "unix://")
_NAMESPACE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def check_store_url(value: Any) -> str:
    """A store setting: a Redis URL (``redis://``, ``rediss://`` or ``unix://``). The message
    of a bad one shows it with any password masked (``masked_url``)."""
    if not isinstance(value, str) or not value.startswith(STORE_SCHEMES):
        shown = masked_url(value) if isinstance(value, str) else repr(value)
        raise ValueError(
            f'expected a Redis URL such as "redis://localhost:6379/0" (redis://, rediss:// or '
            f"unix://), got {shown}"
        )
    return value


_PASSWORD_IN_QUERY = re.compile(r"(?i)([?&](?:password|pass|pwd|auth)=)[^&#]*")


def masked_url(url: str) -> str:
    """``url`` with its password masked in every form a Redis URL can carry one: as userinfo
    (``redis://user:pw@host``, ``redis://pw@host``) and as a query parameter (``?password=pw``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    head, q, query = rest.partition("?")
    if "@" in head:
        userinfo, _, host = head.rpartition("@")
        user, colon, _pw = userinfo.partition(":")
        head = f"{user}:***@{host}" if colon else f"***@{host}"
    query = _PASSWORD_IN_QUERY.sub(r"\1***", q + query)[len(q):] if q else ""
    return f"{scheme}{sep}{head}{q}{query}"


def check_layer_names(names: Iterable[Any]) -> None:
    # Deferred for start-up time: the built-in layers load with the first guard, not with
    # ``import fuzeguard``.
    from fuzeguard.layers import BUILTIN_LAYERS

    for name in names:
        if isinstance(name, str) and name not in BUILTIN_LAYERS:
            raise ValueError(
                f"unknown layer {name!r}; known layers: {', '.join(BUILTIN_LAYERS)}"
                + did_you_mean(name, BUILTIN_LAYERS)
            )


def check_combination(values: Mapping[str, Any]) -> None:
    """Check what single keys cannot: construct every layer, which validates its own fields."""
    for cls in setting_classes():
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
                + did_you_mean(key, [*specs, *ALIASES]).replace("`", "'")
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
