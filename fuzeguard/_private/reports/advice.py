"""Advice for a stopped run: the ``fuze.toml`` lines that would change how it ended (a higher
threshold or budget, the tool's kind, an exemption, a ladder that warns first), and checking
them on a trace by replaying it with each line (``report.py`` shows them).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.toml_lines import quoted_key
from fuzeguard._private.configuration.validation import validate_code_options

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.meaning.records import Detection
    from fuzeguard._private.reports.timeline import Mark

# The layers a function can be exempt from, or given another kind for.
_LOOP_KEYS = ("dedup", "cycle", "progress", "iterations", "semantic", "cost_velocity")


@dataclass(frozen=True, slots=True)
class Suggestion:
    """One ``fuze.toml`` line that would change the outcome: ``key = value`` in ``table``."""

    table: str
    key: str
    value: str
    why: str
    # True once replaying the run's trace with this line alone changed how the run ended and
    # the layer acted where ``why`` says (``trace_reports._checked``).
    checked: bool = False
    # For a threshold: the layer it sets, the count at which that layer first acts on a loop
    # with this line (``acts_at``) and with the value the run had (``acted_at``), as ``why``
    # states them; a replay of the trace checks both.
    layer: str = ""
    acts_at: int | None = None
    acted_at: int | None = None
    # Whether "acts" means a loop detection only (progress: its early warning comes first, at
    # the window), or any detection of the layer (an early warning included).
    loop_only: bool = False

    @property
    def line(self) -> str:
        return f"{self.key} = {self.value}"

    @property
    def header(self) -> str:
        """The table as a ``fuze.toml`` header names it: the function's name quoted as a key
        when it must be (``[functions."fs.read"]``), so that the line pasted is the one checked."""
        if self.table == "defaults":
            return "[defaults]"
        return f"[functions.{quoted_key(self.table.removeprefix('functions.'))}]"

    def applied(self, config: Config) -> Config:
        """``config`` with this line added."""
        value = tomllib.loads(f"v = {self.value}")["v"]
        if self.table == "defaults":
            return config.with_values(validate_code_options({self.key: value}, "a suggested line",
                                                            run_scope=True))
        fn = self.table.removeprefix("functions.")
        functions = {name: dict(table) for name, table in config._functions.items()}
        functions.setdefault(fn, {})[self.key] = value
        return Config(config._values, functions, origins=config._origins, files=config.files,
                       env=config.env)


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def number(value: float) -> str:
    return f"{value:g}"


def _values(fn: str, config: Config, plan: Plan | None) -> dict[str, Any]:
    """The settings ``fn`` ran under: the config's, and what its guard set in code."""
    values = dict(config.settings_for(fn))
    if plan is not None:
        for f in dataclasses.fields(plan.settings):
            values[f.name] = getattr(plan.settings, f.name)
        for layer in plan.layers:
            if dataclasses.is_dataclass(layer):
                for f in dataclasses.fields(layer):
                    if f.name in values:
                        values[f.name] = getattr(layer, f.name)
    return values


def suggestions(
    stop: Detection | None, marks: Sequence[Mark], config: Config, plan: Plan | None = None
) -> list[Suggestion]:
    """The ``fuze.toml`` lines that would change how the run ended: a higher threshold or budget,
    the tool's kind, an exemption, a ladder that warns first."""
    if stop is None:
        return []
    fn = stop.fn
    values = _values(fn, config, plan)
    table = f"functions.{fn}"
    count = stop.count
    out: list[Suggestion] = []
    kind = next((m.kind for m in reversed(marks) if m.fn == fn), "other")
    layer = stop.layer
    if stop.kind == "limit":
        key = str(stop.pattern)
        if key in values and stop.threshold is not None:
            limit = stop.threshold
            raised: float = math.ceil(limit * 1.5) if float(limit).is_integer() else limit * 1.5
            out.append(Suggestion("defaults", key, number(raised),
                                  f"now {number(limit)}: a budget half as large again"))
        return out
    if layer == "dedup" and count is not None:
        key = "poll_threshold" if kind == "poll" else "repeat_threshold"
        now = values[key]
        out.append(Suggestion(table, key, str(count),
                              f"now {now}: act on the {_ordinal(count + 1)} identical call, "
                              f"not the {_ordinal(now + 1)}", layer=layer, acts_at=count + 1,
                              acted_at=now + 1))
    elif layer == "cycle" and count is not None:
        now = values["cycle_repeats"]
        out.append(Suggestion(table, "cycle_repeats", str(count),
                              f"now {now}: act on lap {count + 1} of a cycle, not lap {now + 1}",
                              layer=layer, acts_at=count + 1, acted_at=now + 1))
    elif layer == "progress" and count is not None:
        # A loop is twice the window of calls that bring nothing new (``layers/progress.py``):
        # the smallest window whose loop is longer than the one that stopped the run.
        now = values["progress_window"]
        window = count // 2 + 1
        out.append(Suggestion(table, "progress_window", str(window),
                              f"now {now}: act after {2 * window} calls that bring nothing new, "
                              f"not {2 * now}", layer=layer, acts_at=2 * window,
                              acted_at=2 * now, loop_only=True))
    elif layer == "iterations" and count is not None:
        now = values["max_iterations"]
        out.append(Suggestion(table, "max_iterations", str(count),
                              f"now {now if now is not None else 'the built-in cap'}: "
                              f"allow {count} calls of {fn} per run", layer=layer,
                              acts_at=count + 1))
    elif layer == "cost_velocity" and stop.threshold is not None:
        key = ("cost_velocity_per_minute"
               if values["cost_velocity_per_minute"] == stop.threshold
               and values["cost_velocity_threshold"] != stop.threshold
               else "cost_velocity_threshold")
        out.append(Suggestion(table, key, number(stop.threshold * 2),
                              f"now {number(stop.threshold)}: allow twice the spend"))
    elif layer == "semantic":
        now = values["similarity_threshold"]
        seen = stop.similarity if stop.similarity is not None else now
        new = min(0.99, round(max(seen, now) + 0.02, 2))
        out.append(Suggestion(table, "similarity_threshold", number(new),
                              f"now {number(now)}: only closer repeats count"))
    if layer in _LOOP_KEYS:
        if kind != "poll" and layer in ("dedup", "progress", "cycle") and values["kind"] != "poll":
            out.append(Suggestion(table, "kind", '"poll"',
                                  f"if {fn} waits for something to change: an unchanged poll is "
                                  f"acted on at the {_ordinal(values['poll_threshold'] + 1)} call"))
        exempt = [*values["exempt_from"], layer]
        out.append(Suggestion(table, "exempt_from", "[" + ", ".join(f'"{n}"' for n in exempt)
                              + "]", f"{fn} is never judged by {layer} (its loops go uncaught)"))
    ladder = tuple(values["on_loop"])
    if ladder and ladder[0] == "kill":
        out.append(Suggestion("defaults", "on_loop", '["warn", "skip", "kill"]',
                              "warn the model first, then answer for the tool, then stop"))
    return out
