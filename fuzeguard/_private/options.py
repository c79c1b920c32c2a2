"""The keyword options of ``guard()`` and ``fuzeguard.run()``, typed for type checkers.

Every settings key is an option with the type code may give it (in code some keys also take a
function, and optional keys take None); ``guard()`` takes the keys that apply to one function,
``run()`` every key. The schema is the single source of keys at runtime and validates each value
(``validation.validate_code_options``); ``tests/test_options.py`` checks these lists stay the
schema's keys and that a type checker refuses a misspelt key or a wrong type.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypedDict

if TYPE_CHECKING:
    from fuzeguard._private.kinds import Kind
    from fuzeguard._private.layer import Layer
    from fuzeguard._private.run import DetectHook

Action = Literal["kill", "warn", "skip"]
# A step of the ladder or the whole ladder: "kill", or ["warn", "skip", "kill"].
Actions: TypeAlias = Action | list[Action] | tuple[Action, ...]
# Collections, never a bare string (which the settings refuse: "abc" is not ["abc"]).
Strings: TypeAlias = list[str] | tuple[str, ...] | set[str] | frozenset[str]
# Layer names and layer objects. A Sequence, as list is invariant (a list[str] of names is not a
# list[str | Layer]) and a union of list types loses the inference of a mixed list literal; the
# price is that a bare string passes the type checker; guard() and run() refuse it when called.
Layers: TypeAlias = Sequence["str | Layer"]
# Seconds, or a duration string such as "90s", "30m" or "1h30m".
Duration: TypeAlias = float | str


class FunctionOptions(TypedDict, total=False):
    """The settings of one guarded function (scope "function"), plus the ``kill_on_loop`` alias."""

    enabled: bool | Literal["observe"]
    on_loop: Actions
    kill_on_loop: bool
    layers: Layers
    exempt_from: Strings
    kind: Kind | Literal["auto"]
    volatile: Strings
    ignore_args: Strings
    volatile_keys: Strings
    cost: float | Callable[[Any], float] | None  # a number, or a function of the result
    skip_value: object  # any value, or a function of the Detection that returns one
    fail_closed: bool
    log_values: bool
    redact: Strings
    record_args: bool
    record_results: bool
    trace_max_result_bytes: int
    max_iterations: int | None
    result_aware: bool
    window_size: int
    repeat_threshold: int
    repeat_warn_threshold: int
    poll_threshold: int
    poll_warn_threshold: int
    cycle_min_length: int
    cycle_max_length: int
    cycle_repeats: int
    cycle_warn_repeats: int
    cost_velocity_window: int
    cost_velocity_threshold: float | None
    cost_velocity_per_minute: float | None
    progress_window: int
    progress_warn_window: int
    similarity_threshold: float
    similarity_window: int
    similarity_min_length: int
    embed: str | Callable[[str], Sequence[float]] | None  # "package.module:function" or a function


class ToolOptions(FunctionOptions, total=False):
    """The options of the framework integrations, which guard each tool under its own name:
    ``guard()``'s options but ``name``."""

    on_detect: DetectHook | Iterable[DetectHook] | None
    onLoop: Actions


class GuardOptions(ToolOptions, total=False):
    """``guard()``'s options: the function's settings, its name, its detection hooks and the
    ``onLoop`` alias of ``on_loop``."""

    name: str | None


class RunOptions(FunctionOptions, total=False):
    """``run()``'s settings: every function setting (run-wide) and the run-wide settings."""

    max_resets: int
    store: str | None
    store_timeout: Duration
    store_ttl: Duration
    trace: str | os.PathLike[str] | None
    max_calls: int | None
    max_calls_per_turn: int | None
    max_duration: Duration | None
    max_errors: int | None
    max_consecutive_errors: int | None
    max_cost: float | None
