"""Layer 1, ``iterations``: a cap on how often one function may run in a run (Fuze layer 1).

Result-aware by default: a function whose recent calls keep doing something new (a batch over 50
distinct files, paging through a long document, writes each acknowledged "OK") is doing work, and
is not held to the cap. Calls that repeat themselves with the same result, fail, return nothing
(``None``) or whose result is unknown (recursion: the outer calls have not returned yet; a replayed
trace without results) earn no such credit, so the Fuze cap still stops them at call 26.
Different-inputs-same-output loops are the ``progress`` layer's to catch. ``result_aware = false``
makes the cap absolute, exactly as in Fuze.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.fingerprint import fingerprint
from fuzeguard._private.layer import LayerSettings, RunView, Section, setting
from fuzeguard._private.records import Call, Detection

# Share of a function's recent calls that must have been fresh (see Iterations) for the function to
# count as productive; a few repeats (two empty files in a batch) do not take the credit away, a
# stuck function loses it quickly.
PRODUCTIVE_SHARE = 0.75
MIN_EVIDENCE = 4
# The waiver looks at most this many recent calls, so a huge max_iterations never grows history.
WAIVER_WINDOW = 64
_NONE_FP = fingerprint(None)


@dataclass(frozen=True, slots=True)
class Iterations(LayerSettings):
    """Flag the call that would run a function more than ``max_iterations`` times in one run.

    Catches simple infinite loops and unbounded recursion whatever their arguments. With
    ``result_aware`` (the default), the cap is waived while at least three quarters (and at least
    four) of the function's calls among the run's last ``max_iterations`` calls (64 at most) were
    fresh: they returned a known result other than an error or ``None``, and their arguments or
    their result were new to the function in that window.
    """

    name: ClassVar[str] = "iterations"
    section: ClassVar[Section] = "defaults"

    max_iterations: int = setting(
        25,
        type="int",
        minimum=1,
        origin="Fuze layer 1",
        doc="How many times one function may run in one run; the next call is a loop (calls that "
        "keep bringing new results are exempt while result_aware is on).",
    )
    result_aware: bool = setting(
        True,
        type="bool",
        origin="fuzeguard",
        section="loop_detection",
        doc="Judge repeats by their results: a repeat whose result changed is progress (dedup, "
        "cycle), and a function whose calls keep returning new results is not held to "
        "max_iterations (false: plain Fuze counting).",
    )

    @property
    def history_needed(self) -> int:
        return min(self.max_iterations, WAIVER_WINDOW) if self.result_aware else 0

    def check(self, run: RunView, call: Call) -> Detection | None:
        count = run.calls_of(call.fn) + 1
        if count <= self.max_iterations:
            return None
        if self.result_aware and self._productive(run, call.fn):
            return None
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=self.max_iterations,
            pattern=call.fn,
            message=(
                f"You have already called `{call.fn}` {count - 1} times in this task, its limit "
                f"({self.max_iterations}). Stop calling it: use what you have, or try another approach."
            ),
        )

    def _productive(self, run: RunView, fn: str) -> bool:
        """Whether ``fn``'s calls in the recent window mostly brought results new to it."""
        history = run.history
        seen_args: set[bytes] = set()
        seen_results: set[bytes] = set()
        total = fresh = 0
        start = max(0, len(history) - min(self.max_iterations, WAIVER_WINDOW))
        for i in range(start, len(history)):
            record = history[i]
            if record.fn != fn:
                continue
            total += 1
            fp = record.result_fp
            if (
                fp is not None
                and record.error is None
                and fp != _NONE_FP
                and (record.args_fp not in seen_args or fp not in seen_results)
            ):
                fresh += 1
            seen_args.add(record.args_fp)
            if fp is not None:
                seen_results.add(fp)
        return total >= MIN_EVIDENCE and fresh >= PRODUCTIVE_SHARE * total
