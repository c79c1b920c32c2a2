"""Layer 2, ``dedup``: the same call with the same outcome, again and again (Fuze layer 2).

Result- and state-aware by default. The layer remembers, for each call (function and arguments),
the outcomes it had since the world last changed: since the latest write that succeeded (a call
of kind ``write``: by its name, a shell command that writes, or declared), other than the same
write repeated. A read, a search, a command or a failing call that already had the same outcome
``repeat_threshold`` times with nothing changed since is a loop at its next occurrence (the 3rd
with the defaults), wherever the other calls of the run fall between them: a lookup that fails,
then another that succeeds, then the first again, and again, is the same lookup failing. A call
whose outcome changed is progress (polling a status that moves, re-running tests after an
edit); a write in between lets every call answer anew (re-reading a file after editing it).

The same function failing ``repeat_threshold`` times with the same error (``repeat_key``:
compared by the masked error text) and arguments at least ``similarity_threshold`` alike is one
action repeated, however its arguments were touched up: the next such attempt is a loop.

Polls wait before they loop: an unchanged answer to an identical poll is warned at the 10th poll
and a loop at the 20th (``poll_warn_threshold``, ``poll_threshold``). With ``result_aware =
false``, plain Fuze counting: identical calls in the last ``window_size`` calls, whatever their
outcome.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from fuzeguard._private.judging.layer import Feature, LayerSettings, RunView, setting
from fuzeguard._private.meaning.fingerprint import encode, fingerprint
from fuzeguard._private.meaning.records import Call, CallRecord, Detection, Evidence, Kind
from fuzeguard.layers._evidence import (
    ACTING,
    FAILED,
    INFORMING,
    TRANSPARENT,
    WRITTEN,
    changes_state,
    last_change,
    novelty,
    repeat_key,
    side_effect,
)

#: How much of a call's arguments is compared when its attempts are near-identical.
ATTEMPT_CHARS = 2000


def attempt_text(arguments: Mapping[str, Any]) -> str:
    """The text of a call's arguments, as near-identical attempts are compared by: the values in
    order, bounded to ``ATTEMPT_CHARS``."""
    parts: list[str] = []
    size = 0
    for value in arguments.values():
        text = value if type(value) is str else repr(value)
        parts.append(text[: ATTEMPT_CHARS - size])
        size += len(parts[-1]) + 1
        if size >= ATTEMPT_CHARS:
            break
    return "\x1f".join(parts)


#: A failure that tells only that a command exited non-zero (``exit code 1``, ``exit status 2``,
#: subprocess's ``Command '...' returned non-zero exit status 1.``).
_BARE_EXIT = re.compile(
    r"(?:exit(?:ed)?\s+(?:with\s+)?(?:code|status)\s*[=:]?\s*-?\d+"
    r"|Command\s.*\sreturned\s+non-zero\s+exit\s+status\s+-?\d+)\.?",
    re.IGNORECASE | re.DOTALL,
)


def bare_failure(error: BaseException | None, result: Any) -> bool:
    """Whether a failure says nothing but that it failed: no output (no text, no mapping) and an
    error with no message, or whose message is only an exit status. Such a failure (a ``grep``
    that matched nothing) is a miss, not an error to be fixed."""
    if (type(result) is str and result.strip()) or type(result) is dict:
        return False
    said = str(error).strip() if error is not None else ""
    return not said or _BARE_EXIT.fullmatch(said) is not None


def _attempt(
    arguments: Mapping[str, Any], result: Any, error: BaseException | None
) -> str | None:
    """The text of a failed call's arguments, when the failure says something (not a
    ``bare_failure``): near-identical misses are left to ``progress``."""
    if bare_failure(error, result):
        return None
    return attempt_text(arguments)


#: What dedup keeps of a call that failed: the text of its arguments, when its failure says what
#: went wrong.
ATTEMPT = Feature("attempt", _attempt, failures_only=True)


@dataclass(frozen=True, slots=True)
class Dedup(LayerSettings):
    """Flag the call that would repeat one (function, arguments) pair with the same outcome too
    often (see the module doc).

    ``count`` is the number of earlier occurrences with one outcome since the last change of
    state, within the last ``repeat_memory`` calls, plus the pending one (an occurrence whose
    outcome is unknown, such as a call still running, counts with every outcome when it is among
    the last ``window_size`` calls). The call that makes ``count`` exceed ``repeat_threshold`` is a
    loop (the 3rd with the default 2). The call that makes it reach ``repeat_warn_threshold`` gets
    an early warning; ``0``, the default, warns only through the ladder.
    """

    name: ClassVar[str] = "dedup"
    # The text of each failed call's arguments, for near-identical attempts.
    features: ClassVar[tuple[Feature, ...]] = (ATTEMPT,)

    window_size: int = setting(
        10, type="int", minimum=1, origin="Fuze layer 2",
        doc="How many recent calls plain counting (result_aware = false) looks at, and how recent "
        "a call of unknown outcome must be to count as a repeat.",
    )
    repeat_memory: int = setting(
        100, type="int", minimum=1, origin="fuzeguard",
        doc="How many recent calls dedup remembers outcomes over, since the last change of state.",
    )
    repeat_threshold: int = setting(
        2, type="int", minimum=1, origin="fuzeguard (Fuze layer 2 allows 3)",
        doc="Occurrences with the same outcome and no change of state between allowed; the next "
        "one is a loop.",
    )
    repeat_warn_threshold: int = setting(
        0, type="int", minimum=0, origin="OpenFang/Hermes loop guard (warns at the 3rd)",
        doc="The repeat that reaches this count gets a warning only (0: no early warning).",
    )
    streak_threshold: int = setting(
        5, type="int", minimum=2, origin="fuzeguard (evidence grades the response)",
        doc="The same call with the same outcome this many times back to back, nothing else "
        "between, is a loop whose evidence leaves no doubt: on_loop applies at once. Shorter "
        "streaks get early warnings only (an agent may re-run a step a few times, then move on).",
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
    similarity_threshold: float = setting(
        0.9, type="float", minimum=0.0, maximum=1.0, origin="Ralph (loopThreshold = 0.9)",
        doc="Similarity (0 to 1) at which two texts count as the same.",
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
        return max(self.window_size, self._poll_window, self.repeat_memory if self.result_aware else 0)

    @property
    def _poll_window(self) -> int:
        # Room for every poll up to the loop with a wait (a sleep, a log read) between each two.
        return 2 * (self.poll_threshold + 1)

    def check(self, run: RunView, call: Call) -> Detection | None:
        same = run.same_args(call.args_fp)
        threshold = self.repeat_threshold
        if not same and run.errors < threshold:
            return None  # a call with new arguments in a run with few failures: the common case
        if call.kind == "poll" or not self.result_aware:
            return self._counted(run, call, same) if same else None
        found = None
        if len(same) + 1 >= (self.repeat_warn_threshold or threshold + 1) or (
            call.kind == "write" and same
        ):
            found = self._remembered(run, call, same)
        if found is None and run.errors >= threshold and run.calls_of(call.fn) >= threshold:
            found = self._attempts(run, call)
        return found

    def _remembered(
        self, run: RunView, call: Call, same: Sequence[CallRecord]
    ) -> Detection | None:
        """The state-aware memory: the outcomes of this very call since the last change."""
        threshold, warn = self.repeat_threshold, self.repeat_warn_threshold
        oldest = call.index - self.repeat_memory
        first = len(same)
        while first > 0 and same[first - 1].index > oldest:
            first -= 1
        if first == len(same):
            return None
        changed = last_change(run.history, call.args_fp, same[first].index - 1)
        recent = call.index - self.window_size
        counts: dict[Hashable, int] = {}
        unknown = 0
        for record in same[first:]:
            if record.index <= changed:
                continue
            key = repeat_key(record, failures_alike=True)
            if key is None:
                if record.index > recent:
                    unknown += 1
            else:
                counts[key] = counts.get(key, 0) + 1
        if not counts:
            if not unknown:
                return None  # nothing since the last change
            # No outcome known (a trace without results): only a sustained streak is evidence.
            return self._counted(run, call, same, unknown=True)
        best_key: Hashable = None
        best = 0
        for key, n in counts.items():
            if n > best:
                best_key, best = key, n
        count = best + unknown + 1
        evidence: Evidence = "normal"
        if count > threshold:
            kind: Kind = "loop"
            if best_key == WRITTEN and side_effect(call):
                evidence = "certain"  # the same write, succeeded, sent again: a duplicated effect
            elif _answer_of_others(run.history, call, best_key):
                evidence = "certain"
            elif _back_to_back(run.history, call.args_fp, best_key) + 1 >= count:
                # Every occurrence back to back: a few re-runs are often followed by a change
                # of approach; past the streak threshold, the run will not get out by itself.
                evidence = "certain" if count >= self.streak_threshold else "weak"
            elif call.kind == "model" or _asks_nothing(call):
                # A call that asks nothing in particular (``list_files()``, the date, a model's
                # text recorded as a call) revisited among other work is bookkeeping: equal
                # answers among other calls do not make a loop. A streak of them does (above).
                evidence = "weak"
            elif _acted_since(run.history, call, same):
                # Re-run after a command that may have changed what no write detection sees (a
                # re-test after a script that applies a fix): "no write seen" is no proof that
                # nothing changed.
                evidence = "weak"
        elif warn and count == warn:
            kind = "warning"
        elif count == 2 and best_key == WRITTEN and side_effect(call):
            return self._detection(call, count, threshold, "warning", best_key)
        else:
            return None
        return self._detection(call, count, threshold, kind, best_key, evidence=evidence)

    def _attempts(self, run: RunView, call: Call) -> Detection | None:
        """One action failing again and again: the latest calls of this function since the last
        change all failed with one error that says what went wrong, and the latest
        ``repeat_threshold`` of them have arguments alike the pending call's: a loop. A longer
        streak of that error with arguments unlike the pending call's is an early warning only: a
        kill needs the pending call itself to be alike the failures."""
        threshold = self.repeat_threshold
        history = run.history
        oldest = call.index - self.repeat_memory
        fn = call.fn
        failed: list[CallRecord] = []
        for i in range(len(history) - 1, -1, -1):
            record = history[i]
            if record.index <= oldest:
                break
            if record.fn == fn:
                if record.error is None:
                    if record.kind == "write" or record.result_fp is not None:
                        break  # it worked (or changed something) last time
                    continue  # still running, or unknown
                if failed and record.result_fp != failed[0].result_fp:
                    break
                if type(record.features.get(ATTEMPT.key)) is not str:
                    break  # a bare failure (nothing said): a miss, not an error to fix
                failed.append(record)
                if len(failed) > threshold:
                    break
            elif changes_state(record):
                break  # something changed since
        if len(failed) < threshold:
            return None
        from rapidfuzz.distance import Indel  # here: most runs never compare two attempts

        pending = attempt_text(call.arguments)
        cutoff = self.similarity_threshold
        for record in failed[:threshold]:
            text = record.features[ATTEMPT.key]
            if Indel.normalized_similarity(pending, text, score_cutoff=cutoff) < cutoff:
                break
        else:
            return self._detection(call, threshold + 1, threshold, "loop", FAILED, alike=True)
        if len(failed) > threshold:
            # One error whatever the arguments, but the pending call is not alike the failures:
            # it may be the way out (a plain read after failing test runs). Tell the model.
            return Detection(
                layer=self.name, fn=fn, count=len(failed) + 1, threshold=threshold,
                evidence="weak", pattern=(fn, "alike"),
                message=(
                    f"`{fn}` failed {len(failed)} times in a row with the same error, whatever "
                    "the arguments. Read the error and fix its cause before trying again."
                ),
            )
        return None

    def _counted(
        self, run: RunView, call: Call, same: Sequence[CallRecord], unknown: bool = False
    ) -> Detection | None:
        """Identical calls counted in a window: polls (their streak of one answer, not separated
        by other work) and plain Fuze counting (``result_aware = false``)."""
        if call.kind == "poll":
            threshold, warn, window = (
                self.poll_threshold, self.poll_warn_threshold, self._poll_window
            )
        else:
            threshold, warn, window = (
                self.repeat_threshold, self.repeat_warn_threshold, self.window_size
            )
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
            key = repeat_key(record, failures_alike=True)
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
        # Plain Fuze counting (result_aware = false) acts as Fuze does: at once; so do identical
        # calls all still running (one batch of duplicates: no warning can reach the model
        # before they end, and no outcome can excuse them).
        evidence: Evidence = "normal"
        if not self.result_aware or all(record.in_flight for record in streak):
            evidence = "certain"
        elif unknown:
            # Outcomes unknown (``unknown``: a trace without results): graded as a streak of one
            # outcome would be, never more harshly than the live run that wrote it.
            evidence = "certain" if count >= self.streak_threshold else "weak"
        return self._detection(call, count, threshold, kind, streak_key if all_same else None,
                               evidence=evidence)

    def _detection(
        self, call: Call, count: int, threshold: int, kind: Kind, key: object,
        alike: bool = False, evidence: Evidence = "normal",
    ) -> Detection:
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=threshold,
            kind=kind,
            evidence=evidence,
            pattern=(call.fn, "alike") if alike else call.args_fp,
            message=_message(call, count, kind, key, alike),
        )


def _answer_of_others(history: Sequence[CallRecord], call: Call, key: Hashable) -> bool:
    """Whether the outcome this call keeps getting is also what other questions got: an answer
    that does not depend on the question (access refused, a result withheld) cannot change by
    asking again."""
    if type(key) is not bytes or key in (FAILED, WRITTEN) or call.kind not in INFORMING:
        return False
    for record in history:
        if record.result_fp == key and record.args_fp != call.args_fp and record.error is None:
            return True
    return False


def _asks_nothing(call: Call) -> bool:
    """Whether a call was made without arguments (its fingerprint is that of no arguments, so
    that a replayed trace that did not record them is judged as the live run was)."""
    empty = _NO_ARGUMENTS.get(call.fn)
    if empty is None:
        if len(_NO_ARGUMENTS) >= 1024:
            _NO_ARGUMENTS.clear()
        empty = _NO_ARGUMENTS[call.fn] = fingerprint({}, prefix=encode(call.fn) + b"\x00")
    return call.args_fp == empty


_NO_ARGUMENTS: dict[str, bytes] = {}


def _acted_since(history: Sequence[CallRecord], call: Call, same: Sequence[CallRecord]) -> bool:
    """Whether a command or a write with arguments new to the run succeeded since the latest
    occurrence of this call (a script that applies a fix, an API call): it may have changed
    what no write detection sees."""
    latest = same[-1].index
    seen: set[bytes] = set()
    acted = False
    for record in history:
        if (record.index > latest and record.kind in ACTING and record.error is None
                and record.args_fp not in seen and record.args_fp != call.args_fp):
            acted = True
        seen.add(record.args_fp)
    return acted


def _back_to_back(history: Sequence[CallRecord], args_fp: bytes, key: Hashable) -> int:
    """How many of the latest calls, back to back (tools that change nothing looked through),
    are this very call with outcome ``key`` (an occurrence whose outcome is unknown, such as a
    call still running, counts as the same)."""
    n = 0
    for i in range(len(history) - 1, -1, -1):
        record = history[i]
        if record.kind in TRANSPARENT:
            continue
        if record.args_fp != args_fp:
            break
        got = repeat_key(record, failures_alike=True)
        if got is not None and got != key:
            break
        n += 1
    return n


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
        key = (record.fn, record.args_fp, repeat_key(record, failures_alike=True))
        if new and record.args_fp != call.args_fp and key not in repeated:
            work.append(record.index)
            break
        repeated.add(key)
    if not work:
        return streak
    latest_work = work[0]
    return [record for record in streak if record.index > latest_work]


def _message(call: Call, count: int, kind: str, key: object, alike: bool = False) -> str:
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
    if alike:
        return (
            f"You have tried `{call.fn}` {count} times with nearly the same arguments and it "
            "failed the same way each time. Read the error and change the approach, not the "
            "details."
        )
    if key == FAILED:
        got = " and it failed each time"
    elif key is not None:
        got = " and got the same result each time"
    else:
        got = ""
    if kind == "loop":
        return (
            f"You called `{call.fn}` with the same arguments {count} times{got}, and nothing "
            "changed in between. Use what you have, or try different arguments or another tool."
        )
    return (
        f"You are calling `{call.fn}` with the same arguments for the {_ordinal(count)} "
        f"time{got}. Repeating it will not help: change the arguments or try another tool."
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
