"""Layer 2, ``dedup``: the same call with the same arguments, again and again (Fuze layer 2).

Result-aware by default: a repeat whose previous identical call brought a new result is progress
(polling a status that changes, re-running tests after an edit), not a loop; so is a repeat made
after some other call brought a result not seen before (``sleep(5)`` between polls whose answer
moves, listing a directory again between reads of new files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.layer import LayerSettings, RunView, setting
from fuzeguard._private.records import Call, Detection, Kind


@dataclass(frozen=True, slots=True)
class Dedup(LayerSettings):
    """Flag the call that would make one (function, arguments) pair occur too often in the window.

    ``count`` is the number of occurrences in the last ``window_size`` calls, the pending one
    included; with ``result_aware`` only the latest streak of calls that returned the same result
    counts. The call that makes ``count`` exceed ``repeat_threshold`` is a loop (Fuze: the 4th call
    with the default 3). The call that makes it reach ``repeat_warn_threshold`` gets an early
    warning (the 3rd identical call, as OpenFang and Hermes warn); ``0`` turns early warnings off.
    Calls whose result is unknown count as repeats.
    """

    name: ClassVar[str] = "dedup"

    window_size: int = setting(
        10, type="int", minimum=1, origin="Fuze layer 2", doc="How many recent calls dedup looks at."
    )
    repeat_threshold: int = setting(
        3,
        type="int",
        minimum=1,
        origin="Fuze layer 2",
        doc="Identical calls allowed in the window; the next identical one is a loop.",
    )
    repeat_warn_threshold: int = setting(
        3,
        type="int",
        minimum=0,
        origin="OpenFang/Hermes loop guard",
        doc="The identical call that reaches this count gets a warning only (0: no early warning).",
    )
    result_aware: bool = setting(
        True,
        type="bool",
        origin="fuzeguard",
        doc="Judge repeats by their results (shared with iterations and cycle; see iterations).",
    )

    def __post_init__(self) -> None:
        if self.repeat_warn_threshold > self.repeat_threshold:
            raise ValueError(
                f"repeat_warn_threshold ({self.repeat_warn_threshold}) is above repeat_threshold "
                f"({self.repeat_threshold}): the warning would never come before the loop; "
                "lower it or set it to 0"
            )

    @property
    def history_needed(self) -> int:
        return self.window_size

    def check(self, run: RunView, call: Call) -> Detection | None:
        same = run.same_args(call.args_fp)
        if not same:
            return None
        oldest = call.index - self.window_size
        count = 1
        streak_fp: bytes | None = None
        all_same = True
        for record in reversed(same):
            if record.index <= oldest:
                break
            fp = record.result_fp
            if fp is not None:
                if streak_fp is None:
                    streak_fp = fp
                elif fp != streak_fp:
                    if self.result_aware:
                        break
                    all_same = False
            count += 1
        kind: Kind
        if count > self.repeat_threshold:
            kind = "loop"
        elif self.repeat_warn_threshold and count >= self.repeat_warn_threshold:
            kind = "warning"
        else:
            return None
        if self.result_aware and _progress_between(run, same[-1].index, call.index, call.args_fp):
            return None
        got = " and got the same result each time" if streak_fp is not None and all_same else ""
        if kind == "loop":
            advice = "Try different arguments or another tool."
            message = f"You called `{call.fn}` with the same arguments {count} times{got}. {advice}"
        else:
            message = (
                f"You are calling `{call.fn}` with the same arguments for the {_ordinal(count)} "
                f"time{got}. Repeating it will not help: change the arguments or try another tool."
            )
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=self.repeat_threshold,
            kind=kind,
            pattern=call.args_fp,
            message=message,
        )


def _progress_between(run: RunView, after: int, before: int, args_fp: bytes) -> bool:
    """Whether a call made since the last identical call brought a result not seen earlier in the
    history: the run moved on in between (``sleep(5)`` between polls of a status that changes,
    listing a directory again between reads of different files), so this repeat is pacing, not a
    loop. Only the latest gap counts: on a loop's first lap everything is new, and that must not
    excuse the laps that follow. Only consulted when dedup would otherwise fire.
    """
    seen: set[bytes] = set()
    for record in run.history:
        fp = record.result_fp
        if fp is None:
            continue
        if (
            after < record.index < before
            and fp not in seen
            and record.args_fp != args_fp
            and not record.error
        ):
            return True
        seen.add(fp)
    return False


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
