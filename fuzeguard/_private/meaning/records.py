"""The data that leaves the core: calls, records, detections, decisions and stats.

All of them are frozen, slotted dataclasses: safe to keep, share between threads and log.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Action = Literal["kill", "warn", "skip", "ask"]
Kind = Literal["loop", "warning", "limit"]
Evidence = Literal["weak", "normal", "certain"]


@dataclass(frozen=True, slots=True)
class Call:
    """A call about to happen, as the layers see it.

    ``index`` is its 1-based position among the run's calls; ``args_fp`` the fingerprint of its bound
    arguments (context objects and ``ignore_args`` left out); ``arguments`` the bound arguments
    themselves, for layers that compare text; ``kind`` what the tool does on this call (``read``,
    ``search``, ``write``, ``poll``, ``exec``, ``model`` or ``other``: see ``docs/quality.md``).
    """

    fn: str
    index: int
    args_fp: bytes
    arguments: Mapping[str, Any] = field(default_factory=dict, repr=False)
    kind: str = "other"


# The ``features`` of a call still in flight (``CallRecord.in_flight``): layers find nothing of
# theirs in it, and its result is unknown until the call ends and its record takes its place.
IN_FLIGHT: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class CallRecord:
    """What a completed call leaves in the run's history.

    ``result_fp`` is the fingerprint of the result with volatile fields removed, or of the error;
    ``None`` means the outcome is unknown (a replayed trace line without one). ``error`` is the
    error's class name for a failed call (``"ErrorResult"`` for a result that reads as an error,
    see ``docs/quality.md``); ``kind`` is the call's kind. ``start`` is seconds since the run
    started. ``features`` holds what layers asked to keep about the result (for example its text),
    keyed by layer name.
    A call that has started and not ended is in the history too, with an unknown result and
    ``features`` ``IN_FLIGHT`` (see ``in_flight``).
    """

    fn: str
    index: int
    args_fp: bytes
    result_fp: bytes | None
    error: str | None = None
    cost: float | None = None
    start: float = 0.0
    duration: float | None = None
    features: Mapping[str, Any] = field(default_factory=dict, repr=False)
    kind: str = "other"

    @property
    def in_flight(self) -> bool:
        """True while the call runs: its result is not known yet."""
        return self.features is IN_FLIGHT


@dataclass(frozen=True, slots=True)
class Detection:
    """A layer's finding that the call about to happen is part of a loop (or breaks a limit).

    Layers fill in what they know; the guard completes ``run_id``, ``call_index`` and ``action``.
    ``kind`` is ``"loop"`` (handled by ``on_loop``), ``"warning"`` (an early warning: always just
    warns) or ``"limit"`` (a budget: always ends the run). ``evidence`` grades the response to a
    loop (``docs/layers.md``): a ``"normal"`` loop is first answered by ``early_warnings``
    warnings that reach the model, and ``on_loop`` applies when it persists after them; a
    ``"weak"`` one (a first signal that a run often gets out of by itself: a short streak, a
    re-run after a command) is only warned while ``early_warnings`` is above 0; a ``"certain"``
    one (the evidence leaves no doubt: the same call and outcome back to back past the streak
    threshold, an identical write that already succeeded, sent again) takes ``on_loop`` at once.
    ``pattern`` identifies what repeats, so that an escalation ladder can step when the same
    pattern is detected again. ``message`` is written for the model: it says what happened and
    what to do instead.
    """

    layer: str
    fn: str
    message: str
    count: int | None = None
    threshold: float | None = None
    similarity: float | None = None
    kind: Kind = "loop"
    evidence: Evidence = "normal"
    pattern: Hashable = field(default=None, repr=False)  # fingerprints: not for reading
    run_id: str = ""
    call_index: int = 0
    action: Action | Literal["observe", ""] = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the guard does with a call: ``"call"`` it, ``"warn"`` and call it, ``"skip"`` or ``"kill"``
    (``"ask"`` only until the run's ``ask`` callback answered: ``ask.py``).

    ``detection`` is the one that chose the action; ``detections`` all that fired.
    """

    action: Literal["call", "warn", "skip", "kill", "ask"]
    index: int
    detection: Detection | None = None
    detections: tuple[Detection, ...] = ()


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """How much of one limit a run has used; ``limit`` is ``None`` when the limit is off."""

    used: float
    limit: float | None


@dataclass(frozen=True, slots=True)
class RunStats:
    """A snapshot of a run's usage: the ``/stats`` of a session.

    ``calls`` counts executed calls, ``skipped`` the calls a ``skip`` action answered instead;
    ``layer_errors`` counts, per layer name, the calls a raising layer could not judge.
    """

    run_id: str
    name: str | None
    calls: int
    calls_by_fn: Mapping[str, int]
    skipped: int
    errors: int
    consecutive_errors: int
    cost: float
    elapsed: float
    turn: int
    turn_calls: int
    resets: int
    detections: int
    detections_by_layer: Mapping[str, int]
    killed: bool
    limits: Mapping[str, LimitUsage]
    # Failures of layers that raised while judging a call, per layer name (they were left out).
    layer_errors: Mapping[str, int] = field(default_factory=dict)
    # A shared run (``store=``): failed or timed-out round trips to the store, outages (each
    # logged once), and calls this process judged on its own while the store was out of reach.
    store_errors: int = 0
    store_outages: int = 0
    locally_judged: int = 0
    # Tokens metered from the framework's reports (``fuzeguard.metering``).
    tokens_in: int = 0
    tokens_out: int = 0

    def __str__(self) -> str:
        """A few readable lines (``repr`` keeps every field)."""
        name = f"run {self.name!r}" if self.name else "run"
        by_fn = ", ".join(f"{fn} {n}" for fn, n in self.calls_by_fn.items())
        lines = [f"{name} ({self.run_id}): {'killed' if self.killed else 'open'}, "
                 f"{self.elapsed:.1f} s",
                 f"  calls {self.calls}" + (f" ({by_fn})" if by_fn else "")
                 + f", answered by the guard {self.skipped}, errors {self.errors}"]
        if self.detections:
            by_layer = ", ".join(f"{layer} {n}" for layer, n in self.detections_by_layer.items())
            lines.append(f"  detections {self.detections} ({by_layer})")
        budgets = [f"{key} {_num(u.used)}/{_num(u.limit)}" for key, u in self.limits.items()
                   if u.limit is not None]
        if budgets:
            lines.append("  budgets used: " + ", ".join(budgets))
        if self.cost:
            lines.append(f"  cost {_num(self.cost)}")
        return "\n".join(lines)


def _num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
