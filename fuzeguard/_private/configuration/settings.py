"""The core settings: actions, modes, fingerprinting and recording options (``[defaults]``).

Layer thresholds live on the layers themselves (``fuzeguard.layers``); together these dataclasses
are the single source of every default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from fuzeguard._private.judging.layer import Scope, Section, setting
from fuzeguard._private.meaning.secrets import SECRET_NAMES

VOLATILE_KEYS = (
    "id", "request_id", "requestid", "x-request-id", "trace_id", "span_id", "correlation_id",
    "timestamp", "ts", "created", "created_at", "updated_at", "modified_at", "last_modified",
    "expires_at", "pid", "duration", "duration_ms", "elapsed", "elapsed_ms", "latency",
    "latency_ms", "took", "etag", "nonce",
)

# cycle, progress and cost_velocity are cheap and bounded by their windows; semantic is opt-in
# (costlier, and text similarity cannot tell a poll whose number moves from a repeat): docs/layers.md.
DEFAULT_LAYERS = ("iterations", "dedup", "cycle", "cost_velocity", "progress", "limits")


@dataclass(frozen=True, slots=True)
class Settings:
    """Core settings of a guard; see ``docs/configuration.md`` for each key."""

    section: ClassVar[Section] = "defaults"
    scope: ClassVar[Scope] = "function"

    enabled: bool | str = setting(
        True, type="enabled", origin="fuzeguard",
        doc='true: act on detections; "observe": only log what would fire; false: no guarding.',
    )
    on_loop: tuple[str, ...] = setting(
        ("kill",), type="actions", origin="Fuze (kill_on_loop = true); ladder from OpenFang/Hermes",
        doc='"kill", "warn", "skip" or "ask" (a person answers, through fuzeguard.run(ask=...)), '
        'or a ladder such as ["warn", "skip", "kill"] that steps on each repeated detection of '
        "the same pattern (a pattern skipped twice at the last step that comes back is killed). "
        'kill_on_loop = true/false is shorthand for "kill"/"warn".',
    )
    early_warnings: int = setting(
        1, type="int", minimum=0, origin="fuzeguard (evidence grades the response)",
        doc="How many times a loop pattern is answered by a warning that reaches the model "
        "before on_loop applies: a pattern that persists after the model was told is a loop. "
        "Evidence that leaves no doubt (the same call and outcome back to back past Fuze's "
        "count, an identical write that already succeeded, sent again) takes on_loop at once. "
        "0: on_loop at the first detection.",
    )
    persist_window: int = setting(
        5, type="int", minimum=0, origin="fuzeguard (evidence grades the response)",
        doc="A loop detected within this many calls after a warning reached the model (in a "
        "later turn) persists after the model was told: on_loop applies without another "
        "early warning. 0: only the same pattern detected again counts.",
    )
    layers: tuple[str, ...] = setting(
        DEFAULT_LAYERS, type="strs", origin="fuzeguard",
        doc="Which layers run, by name.",
    )
    exempt_from: tuple[str, ...] = setting(
        (), type="strs", origin="OpenFang/Hermes exempt_tools",
        doc="Layers a function is exempt from (for pollers: [\"dedup\", \"progress\"]).",
    )
    kind: str = setting(
        "auto", type="kind", origin="fuzeguard",
        doc='What the tool does: "read", "search", "write", "poll", "exec", "model" or "other". '
        'The layers judge progress by it (a poll waits, an identical write is a repeat whatever its '
        'receipt). "auto": inferred from the name and, per call, from an action or shell command '
        "argument.",
    )
    volatile: tuple[str, ...] = setting(
        (), type="strs", origin="fuzeguard",
        doc="More result keys (any depth, case-insensitive) whose values are volatile, added to "
        "volatile_keys and to the built-in volatile names (ids, timestamps, durations, counters).",
    )
    ignore_args: tuple[str, ...] = setting(
        (), type="strs", origin="fuzeguard",
        doc="Argument names left out of the fingerprint (passed through untouched).",
    )
    volatile_keys: tuple[str, ...] = setting(
        VOLATILE_KEYS, type="strs", origin="fuzeguard",
        doc="Result keys (any depth, case-insensitive) ignored when comparing results.",
    )
    cost: Any = setting(
        None, type="float", minimum=0, optional=True, origin="Fuze layer 3",
        doc="Cost of one call: a number (in code also a function of the result).",
    )
    skip_value: Any = setting(
        None, type="any", optional=True, origin="Fuze skip action",
        doc="What a skipped call returns instead (in code also a function of the detection); "
        "default: the detection's message.",
    )
    fail_closed: bool = setting(
        False, type="bool", origin="fuzeguard",
        doc="If fuzeguard itself fails, refuse the call instead of running it unguarded.",
    )
    log_values: bool = setting(
        False, type="bool", origin="fuzeguard",
        doc="Log raw arguments with detections (off: they may be sensitive; fingerprints are logged).",
    )
    max_resets: int = setting(
        2, type="int", minimum=0, origin="groq-code-cli", scope="run",
        doc="How many times run.reset() may clear a run.",
    )
    warn_at: tuple[float, ...] = setting(
        (), type="fractions", origin="fuzeguard", scope="run",
        doc="Fractions of each run budget (max_calls, max_calls_per_turn, max_cost, "
        "max_duration) at which the run publishes a BudgetWarning, once each, with a note for "
        'the model such as "80% of the call budget used: wrap up" (run.notes()). [0.8, 0.95] '
        "warns at 80% and 95%; [] (the default) never.",
    )
    ask_timeout: float = setting(
        300.0, type="duration", minimum=0, origin="fuzeguard", scope="run",
        doc='How long the "ask" action waits for the answer of fuzeguard.run(ask=...); without an '
        "answer in time, the run is killed.",
    )
    store: str | None = setting(
        None, type="store", optional=True, origin="fuzeguard", scope="run",
        doc="Share each run with every process that opens a run of the same name here: a Redis "
        'URL such as "redis://localhost:6379/0" (FUZE_STORE overrides the file; docs/workers.md).',
    )
    store_timeout: float = setting(
        0.05, type="duration", minimum=0.001, maximum=60.0, origin="fuzeguard", scope="run",
        doc="Time budget of one round trip to the store; past it the call is judged in this process "
        "(or refused with fail_closed = true).",
    )
    store_ttl: float = setting(
        86400.0, type="duration", minimum=0.01, maximum=30 * 86400.0, origin="fuzeguard",
        scope="run", doc="A shared run's state expires this long after its last activity.",
    )
    store_namespace: str | None = setting(
        None, type="namespace", optional=True, origin="fuzeguard", scope="run",
        doc="The application whose runs the store shares: runs are shared by name within one "
        "namespace only. Required when the store comes from the config file or FUZE_STORE.",
    )
    trace: str | None = setting(
        None, type="path", optional=True, origin="fuzeguard", scope="run",
        doc="Append every call to this JSON Lines file, or to a file per run in this directory.",
    )
    redact: tuple[str, ...] = setting(
        SECRET_NAMES, type="strs", origin="fuzeguard",
        doc="Names whose values are replaced by \"[redacted]\" in traces and logged arguments, "
        "in arguments and results at any depth, case-insensitively, matched by words (api_key "
        "matches X-Api-Key, apiKey and apikey). The built-in names always apply; names set here "
        "are added to them.",
    )
    record_args: bool = setting(
        True, type="bool", origin="fuzeguard", doc="Write arguments to traces."
    )
    record_results: bool = setting(
        True, type="bool", origin="fuzeguard", doc="Write results to traces."
    )
    trace_max_result_bytes: int = setting(
        65536, type="int", minimum=0, origin="fuzeguard",
        doc="Results longer than this are truncated in traces (their fingerprint stays whole).",
    )


def store_url(config: Any) -> str | None:
    """The store a run opened with ``config`` shares its state through, or None.

    Precedence as for ``trace``: ``store=`` in code, then ``FUZE_STORE``, then the config file.
    """
    url: str | None = config._values.get("store")  # the default is None: no merge needed
    if config.origin_of("store") != "code":
        url = _env_store() or url
    return url or None


# Every run opened reads FUZE_STORE; os.environ.get() costs a microsecond (it encodes the key),
# more than the rest of opening a run. On POSIX os.environ keeps its values in a dict keyed by
# bytes, which it updates on every change: read it there.
_ENVIRON_DATA: dict[bytes, bytes] | None = (
    getattr(os.environ, "_data", None) if os.name == "posix" else None
)


def _env_store() -> str | None:
    if _ENVIRON_DATA is not None:
        raw = _ENVIRON_DATA.get(b"FUZE_STORE")
        return None if raw is None else os.fsdecode(raw)
    return os.environ.get("FUZE_STORE")
