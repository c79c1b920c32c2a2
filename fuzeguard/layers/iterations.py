"""Layer 1, ``iterations``: a cap on how often one function may run in a run (Fuze layer 1).

A ``max_iterations`` you write (fuze.toml, ``[functions.NAME]``, ``run(...)``, ``guard(...)``) is an
absolute cap, exactly as in Fuze. Left unset, the built-in cap of 25 adapts to the work: a
function whose recent calls keep doing something new (a batch over 50 distinct files, an agent
whose one ``bash`` tool carries the whole run) is not held to it. Calls that repeat themselves with
the same outcome, or whose outcome is unknown while their arguments repeat, earn no such credit;
nor do calls that never complete (unbounded recursion), so the cap still stops those at call 26.
``fuze check`` says which cap is in force.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import ClassVar

from fuzeguard._private.judging.layer import LayerSettings, RunView, Section, setting
from fuzeguard._private.meaning.records import IN_FLIGHT, Call, CallRecord, Detection

#: The built-in cap, when ``max_iterations`` is not set (Fuze's default).
DEFAULT_CAP = 25
# Share of a function's recent calls that must have been fresh (see Iterations) for the function to
# count as productive: a function that does something new at least every other call is working;
# a stuck one, whose calls repeat, loses the credit quickly.
PRODUCTIVE_SHARE = 0.5
MIN_EVIDENCE = 4
# The waiver looks at most this many recent calls, so memory does not grow with the run.
WAIVER_WINDOW = 64
# Fresh calls that make any window of the function's calls productive (more than half the cap).
_SURELY_PRODUCTIVE = int(PRODUCTIVE_SHARE * DEFAULT_CAP) + 1


@dataclass(frozen=True, slots=True)
class Iterations(LayerSettings):
    """Flag the call that would run a function more than ``max_iterations`` times in one run.

    Catches simple infinite loops and unbounded recursion whatever their arguments. When
    ``max_iterations`` is not set, the cap is 25 and, with ``result_aware`` (the default), it is
    waived while at least half of the function's last 25 calls (among the run's last 64) were
    fresh: their (known) result was new to the function in that window, or their arguments were
    and they did not fail. A failure with new arguments is exploration when its error is new, and
    a repeat when the same error was seen already (errors are compared by their template).
    """

    name: ClassVar[str] = "iterations"
    section: ClassVar[Section] = "defaults"

    max_iterations: int | None = setting(
        None,
        type="int",
        minimum=1,
        optional=True,
        unset="25, adaptive (waived while calls keep doing something new; absolute when "
        "result_aware = false)",
        origin="Fuze layer 1 (25)",
        doc="How many times one function may run in one run; the next call is a loop. A number "
        "you set is an absolute cap, as in Fuze. Not set: 25, waived while the function's calls "
        "keep doing something new (new arguments or new results) and result_aware is on.",
    )
    result_aware: bool = setting(
        True,
        type="bool",
        origin="fuzeguard",
        section="loop_detection",
        doc="Judge repeats by their results: a repeat whose result changed is progress (dedup, "
        "cycle), and a function whose calls keep doing something new is not held to the built-in "
        "iteration cap (false: every call counts, whatever it returned).",
    )

    @property
    def adaptive(self) -> bool:
        """Whether the cap in force is the built-in one that productive work is exempt from."""
        return self.max_iterations is None and self.result_aware

    @property
    def history_needed(self) -> int:
        return WAIVER_WINDOW if self.adaptive else 0

    def check(self, run: RunView, call: Call) -> Detection | None:
        cap = DEFAULT_CAP if self.max_iterations is None else self.max_iterations
        count = run.calls_of(call.fn) + 1
        if count <= cap:
            return None
        if self.adaptive and self._productive(run, call.fn):
            return None
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=cap,
            pattern=call.fn,
            # A cap the user set is absolute, as in Fuze.
            evidence="normal" if self.adaptive else "certain",
            message=(
                f"You have already called `{call.fn}` {count - 1} times in this task, its limit "
                f"({cap}). Stop calling it: use what you have, or try another approach."
            ),
        )

    def _productive(self, run: RunView, fn: str) -> bool:
        """Whether ``fn``'s recent calls mostly did something new to it.

        Its last 25 completed calls among the run's last 64 are judged. None at all (recursion:
        the outer calls have not returned) is no evidence of work; a function seldom called
        lately (fewer than four) is not being hammered.
        """
        mine: list[CallRecord] = []
        # Newest first, without indexing (a deque's index walks its blocks); in flight: no result.
        # A call that did not fail, with arguments no other call in the history had, is fresh
        # whatever came before it: once more than half the cap of them are found, the function
        # is productive however many calls the full count would judge.
        unique = 0
        same_args = run.same_args
        for record in islice(reversed(run.history), WAIVER_WINDOW):
            if record.fn == fn and record.features is not IN_FLIGHT:
                mine.append(record)
                if record.error is None and len(same_args(record.args_fp)) == 1:
                    unique += 1
                    if unique >= _SURELY_PRODUCTIVE:
                        return True
                if len(mine) == DEFAULT_CAP:
                    break
        if len(mine) < MIN_EVIDENCE:
            return bool(mine)
        need = PRODUCTIVE_SHARE * len(mine)
        seen_args: set[bytes] = set()
        seen_results: set[bytes] = set()
        fresh = 0
        for record in reversed(mine):
            fp = record.result_fp
            if (fp is not None and fp not in seen_results) or (
                record.error is None and record.args_fp not in seen_args
            ):
                fresh += 1  # a new result, or new arguments that did not fail as before
                if fresh >= need:
                    return True  # freshness only grows: the rest cannot take it back
            seen_args.add(record.args_fp)
            if fp is not None:
                seen_results.add(fp)
        return False
