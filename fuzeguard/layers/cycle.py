"""``cycle``: ping-pong and short cycles (DeerFlow's cycle layer, OpenFang/Hermes ping-pong).

A→B→A→B… or A→B→C→A→B→C…: the count is split across names, so neither the per-function cap nor
the identical-call check trips. This layer looks at the tail of the run's calls, the pending one
included, over tool names and over full call fingerprints, for cycle lengths
``cycle_min_length``..``cycle_max_length``. One function cycling through the same arguments
(``read a``, ``read b``, ``read a``…) is a cycle of calls; one function called with ever new
arguments is not a cycle at all (that is batch work, or the ``progress`` layer's to judge).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.judging.layer import LayerSettings, RunView, setting
from fuzeguard._private.meaning.records import Call, CallRecord, Detection
from fuzeguard.layers._evidence import ACTING, repeat_key

# Cycles that wait on a poll, and cycles of calls whose arguments vary and whose results are
# unknown (a tool-name log: batch work unless it runs away), are given laps as polls are: a
# warning when lap WAIT_WARN_LAPS completes, a loop from lap WAIT_LOOP_LAPS on.
WAIT_WARN_LAPS = 10
WAIT_LOOP_LAPS = 20


@dataclass(frozen=True, slots=True)
class Cycle(LayerSettings):
    """Flag the call that completes too many laps of one short cycle.

    A lap is one pass through the cycle. The call that completes lap ``cycle_warn_repeats`` gets an
    early warning (DeerFlow warns at the 3rd repetition); every call that continues the cycle from
    lap ``cycle_repeats + 1`` on is a loop (DeerFlow stops at the 4th). With the defaults a
    two-tool ping-pong is warned at its 6th call and stopped at its 8th.

    Result-aware like ``dedup``: the laps after the first must have returned, step by step, the
    same outcomes as the lap before (volatile parts stripped, failures alike, an identical write's
    receipt ignored), and a write or command step whose arguments changed is progress. An edit → test → edit
    → test alternation with new edits is work, not a loop; alternation between two tools whose
    arguments vary but whose results stopped changing is a loop. A cycle that waits on a poll, or
    whose arguments vary while no result is known (a tool-name log, as DeerFlow's name-only layer
    sees it), is warned at lap 10 and a loop from lap 20.
    """

    name: ClassVar[str] = "cycle"

    cycle_min_length: int = setting(
        2, type="int", minimum=2, origin="DeerFlow cycle layer (cycle_min_len)",
        doc="Shortest cycle looked for, in calls.",
    )
    cycle_max_length: int = setting(
        5, type="int", minimum=2, maximum=16, origin="DeerFlow cycle layer (cycle_max_len)",
        doc="Longest cycle looked for, in calls.",
    )
    cycle_repeats: int = setting(
        3, type="int", minimum=2, origin="DeerFlow cycle layer (warn at 3, stop at 4)",
        doc="Laps of one cycle allowed; the call that completes the next lap is a loop.",
    )
    cycle_warn_repeats: int = setting(
        3, type="int", minimum=0, origin="DeerFlow cycle layer (cycle_repeats_warn)",
        doc="The call that completes this lap gets a warning only (0: no early warning).",
    )
    result_aware: bool = setting(
        True, type="bool", origin="fuzeguard",
        doc="Judge repeats by their results (shared with iterations and cycle; see iterations).",
    )

    def __post_init__(self) -> None:
        if self.cycle_min_length > self.cycle_max_length:
            raise ValueError(
                f"cycle_min_length ({self.cycle_min_length}) is above cycle_max_length "
                f"({self.cycle_max_length}); no cycle length is left to look for"
            )
        if self.cycle_warn_repeats > self.cycle_repeats:
            raise ValueError(
                f"cycle_warn_repeats ({self.cycle_warn_repeats}) is above cycle_repeats "
                f"({self.cycle_repeats}): the warning would never come before the loop; lower it "
                "or set it to 0"
            )
        if self.cycle_warn_repeats == 1:
            raise ValueError(
                "cycle_warn_repeats = 1 would warn on any sequence of distinct calls; use 2 or "
                "more, or 0 for no early warning"
            )

    @property
    def history_needed(self) -> int:
        return self.cycle_max_length * max(self.cycle_repeats + 1, WAIT_LOOP_LAPS)

    def check(self, run: RunView, call: Call) -> Detection | None:
        history = run.history
        if self._lets_go(history, call, run.same_args):
            return None
        return self._scan(history, call)

    def _lets_go(
        self, history: Sequence[CallRecord], call: Call,
        seen: Callable[[bytes], object],
    ) -> bool:
        """``check``'s cheap exit: True when no cycle can end at ``call`` (``check`` answers
        None without the scan), False when unsure. ``seen(args_fp)`` is true when a call of the
        history had those arguments (``RunView.same_args``)."""
        n = len(history)
        # The fewest laps any detection needs: a cycle that waits is warned at lap 10 whatever
        # the ordinary early warning is.
        fewest = self.cycle_warn_repeats or self.cycle_repeats + 1
        if fewest > WAIT_WARN_LAPS:
            fewest = WAIT_WARN_LAPS
        low = self.cycle_min_length
        if n + 1 < low * fewest:
            return True
        # Cheap exit for the common case: a cycle of length L needs the pending call to repeat
        # the one L back and the last completed call the one L before it, with two names in a
        # lap or the very same calls; judged by results, it also needs the last completed call's
        # outcome unchanged from the one L before it (``_changed``: otherwise the unchanged tail
        # is at most L + 1 calls, short of the two laps any detection needs).
        fn = call.fn
        last = history[-1]
        high = self.cycle_max_length
        if high > n - 1:
            high = n - 1
        if last.fn == fn and not seen(call.args_fp):
            # Arguments no call in the history had: a lap of ``fn`` alone cannot repeat the
            # pending call, so only laps holding another name are left, and a lap of length L
            # holds the L - 1 calls before the pending one. (When the last call is of another
            # name, every lap holds two names already: nothing to rule out.)
            for k in range(1, high - 1):
                if history[n - 1 - k].fn != fn:
                    if low < k + 2:
                        low = k + 2
                    break
            else:
                return True
        for length in range(low, high + 1):
            back, before = history[n - length], history[n - 1 - length]
            if back.fn != fn or before.fn != last.fn:
                continue
            if (back.args_fp != call.args_fp or before.args_fp != last.args_fp) and last.fn == fn:
                for j in range(2, length):
                    if history[n - j].fn != fn:
                        break
                else:
                    continue  # one name all along, with new arguments: not a cycle
            if self.result_aware and _changed(last, before):
                continue
            return False
        return True

    def _scan(self, history: Sequence[CallRecord], call: Call) -> Detection | None:
        """The full look at the tail of the run, for every cycle length (``check`` calls it when
        its cheap exit cannot rule a cycle out)."""
        warn = self.cycle_warn_repeats
        # Look only as far back as the longest flaggable tail: cost is bounded by the settings.
        records = list(history)[-(self.history_needed - 1):]
        names = [r.fn for r in records]
        names.append(call.fn)
        calls: list[Hashable] = [(r.fn, r.args_fp) for r in records]
        calls.append((call.fn, call.args_fp))
        for length in range(self.cycle_min_length, self.cycle_max_length + 1):
            span = _periodic_tail(names, length)
            if span < 2 * length:
                continue
            unit = names[-length:]
            exact = _periodic_tail(calls, length)
            if len(set(unit)) < 2:
                # One function: a cycle only when it cycles through the same calls.
                if exact < 2 * length or len(set(calls[-length:])) < 2:
                    continue
                span = exact
            if self.result_aware:
                span = min(span, _unchanged_tail(records, length))
            steps = records[len(records) - span + 1:]
            waiting = call.kind == "poll" or any(r.kind == "poll" for r in steps[-length:])
            blind = exact < span and all(r.result_fp is None for r in steps)
            repeats, warn_at = self.cycle_repeats, warn
            if waiting or blind:
                repeats, warn_at = WAIT_LOOP_LAPS - 1, WAIT_WARN_LAPS
            if span >= (repeats + 1) * length:
                kind = "loop"
            elif warn_at and span == warn_at * length:
                kind = "warning"
            else:
                continue
            shown = calls[-length:] if exact >= span else None
            return self._detection(call, unit, shown, span, kind, repeats)
        return None

    def _detection(
        self,
        call: Call,
        unit: list[str],
        exact: list[Hashable] | None,
        span: int,
        kind: str,
        repeats: int,
    ) -> Detection:
        length = len(unit)
        laps = span // length
        shown = " → ".join(f"`{n}`" for n in (*unit, unit[0]))
        same = " with the same arguments" if exact is not None else ""
        if kind == "loop":
            message = (
                f"You are going round in a cycle ({shown}){same}: {laps} laps with the same results. "
                "Stop alternating; use what you have or try a different approach."
            )
        else:
            message = (
                f"You have gone round the same cycle ({shown}){same} {laps} times and the results "
                "are not changing. Break the cycle: try something different."
            )
        pattern_unit: Sequence[Hashable] = exact if exact is not None else unit
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=laps,
            threshold=repeats,
            kind="loop" if kind == "loop" else "warning",
            pattern=_canonical(pattern_unit),
            message=message,
        )


def _periodic_tail(keys: Sequence[Hashable], length: int) -> int:
    """Length of the longest tail of ``keys`` in which every item equals the one ``length`` back."""
    n = len(keys)
    i = n - 1
    while i >= length and keys[i] == keys[i - length]:
        i -= 1
    return min(n, n - 1 - i + length)


def _unchanged_tail(records: Sequence[CallRecord], length: int) -> int:
    """Calls at the end of the run (the pending one included) whose laps repeat the previous lap's
    outcomes step by step (``_evidence.repeat_key``); a write or command step with new arguments
    that did not fail is a change.
    An unknown outcome is no evidence of change, except for a call still in flight with other
    arguments than the previous lap's: concurrent calls interleave their names in whatever order
    they start, which is no evidence of a cycle either."""
    n = len(records)
    i = n - 1
    while i >= length and not _changed(records[i], records[i - length]):
        i -= 1
    return n - i + length


def _changed(record: CallRecord, before: CallRecord) -> bool:
    """Whether ``record``'s step differs from the same step a lap ``before`` (``_unchanged_tail``)."""
    if record.args_fp != before.args_fp and (
        (record.kind in ACTING and record.error is None) or record.in_flight
    ):
        return True
    key, before_key = repeat_key(record), repeat_key(before)
    return key is not None and before_key is not None and key != before_key


def _canonical(unit: Sequence[Hashable]) -> tuple[Hashable, ...]:
    """The same cycle whatever step it is entered at: its lexicographically smallest rotation."""
    rotations = [tuple(unit[i:]) + tuple(unit[:i]) for i in range(len(unit))]
    return min(rotations, key=repr)
