"""Layer 2, ``dedup``: the same call with the same arguments, again and again (Fuze layer 2).

Result-aware by default: a repeat whose previous identical call brought a new result is progress
(polling a status that changes, re-running tests after an edit), not a loop. Only sustained
repetition counts: an identical call that recurs after other work (``git status`` between reads of
different files, ``sleep(5)`` between polls whose answer moves, listing a directory again between
reads of new files) starts its count afresh. Polls wait before they loop: an unchanged answer to
an identical poll is warned at the 10th poll and a loop at the 20th (``poll_warn_threshold``,
``poll_threshold``). Failures are all alike, and an identical write is a repeat whatever receipt it
got (``fuzeguard.layers._evidence``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.layer import LayerSettings, RunView, setting
from fuzeguard._private.records import Call, CallRecord, Detection, Kind
from fuzeguard.layers._evidence import FAILED, novelty, repeat_key


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
    poll_threshold: int = setting(
        19,
        type="int",
        minimum=1,
        origin="OpenClaw known-poll rule (polls wait; a loop from the 20th unchanged poll)",
        doc="Identical polls (kind poll) with an unchanged answer allowed; the next one is a loop.",
    )
    poll_warn_threshold: int = setting(
        10,
        type="int",
        minimum=0,
        origin="OpenClaw known-poll rule (warn from the 10th unchanged poll)",
        doc="The identical poll with an unchanged answer that reaches this count gets a warning "
        "only (0: no early warning).",
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
        if self.poll_warn_threshold > self.poll_threshold:
            raise ValueError(
                f"poll_warn_threshold ({self.poll_warn_threshold}) is above poll_threshold "
                f"({self.poll_threshold}): the warning would never come before the loop; "
                "lower it or set it to 0"
            )

    @property
    def history_needed(self) -> int:
        return max(self.window_size, self._poll_window)

    @property
    def _poll_window(self) -> int:
        # Room for every poll up to the loop with a wait (a sleep, a log read) between each two.
        return 2 * (self.poll_threshold + 1)

    def check(self, run: RunView, call: Call) -> Detection | None:
        same = run.same_args(call.args_fp)
        if not same:
            return None
        if call.kind == "poll":
            threshold, warn, window = self.poll_threshold, self.poll_warn_threshold, self._poll_window
        else:
            threshold, warn, window = self.repeat_threshold, self.repeat_warn_threshold, self.window_size
        first = warn if warn else threshold + 1
        oldest = call.index - window
        if first > 1 and (len(same) + 1 < first or same[-(first - 1)].index <= oldest):
            return None  # too few identical calls in the window to flag anything (the common case)
        streak: list[CallRecord] = []
        streak_key: object = None
        all_same = True
        for record in reversed(same):
            if record.index <= oldest:
                break
            key = repeat_key(record)
            if key is not None:
                if streak_key is None:
                    streak_key = key
                elif key != streak_key:
                    if self.result_aware:
                        break
                    all_same = False
            streak.append(record)
        if self.result_aware:
            streak = _sustained(run.history, streak, call)
        count = len(streak) + 1
        kind: Kind
        if count > threshold:
            kind = "loop"
        elif warn and count == warn:
            kind = "warning"
        else:
            return None
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=threshold,
            kind=kind,
            pattern=call.args_fp,
            message=_message(call, count, kind, streak_key if all_same else None),
        )


def _sustained(
    history: Sequence[CallRecord], streak: list[CallRecord], call: Call
) -> list[CallRecord]:
    """The part of ``streak`` (newest first) not separated from the pending call by other work:
    a call in between that brought something new (see ``_evidence.novelty``) and was not itself
    repeated with the same outcome later on (a loop's first lap is new, and must not excuse the
    laps that follow). Repeats that recur after other work are bookkeeping or pacing, not a loop."""
    if not streak:
        return streak
    oldest = streak[-1].index
    records = list(history)
    repeated: set[tuple[str, bytes, object]] = set()
    work: list[int] = []
    for record, new in reversed(list(zip(records, novelty(records), strict=True))):
        if record.index <= oldest:
            break
        key = (record.fn, record.args_fp, repeat_key(record))
        if new and record.args_fp != call.args_fp and key not in repeated:
            work.append(record.index)
            break
        repeated.add(key)
    if not work:
        return streak
    latest_work = work[0]
    return [record for record in streak if record.index > latest_work]


def _message(call: Call, count: int, kind: str, key: object) -> str:
    if call.kind == "poll":
        if kind == "loop":
            return (
                f"You have polled `{call.fn}` {count} times and the answer has not changed. "
                "Stop waiting on it: report the situation or try another way to make progress."
            )
        return (
            f"You have polled `{call.fn}` {count} times with the same answer. Wait longer between "
            "polls, or check whether what you are waiting for can still happen."
        )
    if key == FAILED:
        got = " and it failed each time"
    elif key is not None:
        got = " and got the same result each time"
    else:
        got = ""
    if kind == "loop":
        return (
            f"You called `{call.fn}` with the same arguments {count} times{got}. "
            "Try different arguments or another tool."
        )
    return (
        f"You are calling `{call.fn}` with the same arguments for the {_ordinal(count)} "
        f"time{got}. Repeating it will not help: change the arguments or try another tool."
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
