"""Layer 4, ``progress``: different inputs, same output (Fuze layer 4, enforced).

"If the last N calls produced no new tokens or identical results, the agent is stuck." Each
completed call's outcome is reduced once to its content (see ``fuzeguard.layers._content``); before a
call, the layer counts how many calls in a row, up to the latest, brought nothing that the calls
before them had not already brought.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar, Final

from fuzeguard._private.judging.layer import Feature, LayerSettings, RunView, setting
from fuzeguard._private.meaning.fingerprint import fingerprint
from fuzeguard._private.meaning.records import Call, CallRecord, Detection
from fuzeguard.layers._content import CONTENT, NEUTRAL, brought_nothing_new, units_of
from fuzeguard.layers._evidence import ACKNOWLEDGING, INFORMING, TRANSPARENT


@dataclass(frozen=True, slots=True)
class Progress(LayerSettings):
    """Flag a call when the calls before it keep returning what the run already had.

    A completed call is *stale* when it brought nothing new against the calls before it: its result
    fingerprint (volatile parts out) is among theirs, or every content unit of its result (word
    pairs, ``key=value`` of numbers) appears in theirs. Errors are results too, compared by class
    and message with volatile parts masked, so the same error from varied inputs is stale. A call
    is never stale when its outcome is unknown, when it polls (waiting is ``dedup``'s to judge),
    when it is a write, a command or a tool of unknown kind with new arguments that did not fail
    (an "OK" there is progress), or when its result has no words at all (an empty output, a
    divider). Short answers to reads and searches count, and words that only echo the query are
    masked: "No results found for 'x'" to a new query is stale the second time.

    With ``progress_window`` distinct stale calls in a run of stale calls up to the newest, the
    next call gets a warning; with twice as many it is a loop (exact repeats in that run add no
    evidence: they are ``dedup``'s and ``cycle``'s). With the defaults, a search that keeps answering "No
    results found." to new queries is warned at the 6th call and stopped at the 10th, while four
    empty searches before one that finds something stay quiet. A write that fails the same way
    ``progress_warn_window`` times in a row with different arguments (a message that cannot be
    delivered to anyone) is warned at once. Only a call to one of the functions in the stale run
    is flagged (an agent that switches tools is trying something else).
    """

    name: ClassVar[str] = "progress"
    # The content of each result (bounded: small texts only), kept once per call for all readers.
    features: ClassVar[tuple[Feature, ...]] = (CONTENT,)

    progress_window: int = setting(
        4, type="int", minimum=2, origin="Fuze layer 4",
        doc="Calls in a row that bring nothing new before the next call gets a warning; twice as "
        "many make it a loop.",
    )
    progress_warn_window: int = setting(
        2, type="int", minimum=0, origin="Hermes loop guard (non-tolerant tools halt on a "
        "repeated failure)",
        doc="Failures in a row of a write, the same way with different arguments, before the next "
        "call gets a warning (0: no early warning).",
    )

    def __post_init__(self) -> None:
        if self.progress_warn_window == 1:
            raise ValueError(
                "progress_warn_window = 1 would warn after every failed write; use 2 or more, or 0 "
                "for no early warning"
            )

    @property
    def history_needed(self) -> int:
        return 6 * self.progress_window + 1

    def check(self, run: RunView, call: Call) -> Detection | None:
        history = run.history
        n = len(history)
        if n < 2:
            return None
        # Cheap exit: work with arguments no other call in the history had, that did not fail,
        # is new whatever it answered (``acknowledged``), so the latest call is not stale and no
        # run of stale calls reaches the pending one: one look at the argument index (which
        # holds every call of the history) instead of the window.
        latest = history[n - 1]
        if latest.kind in TRANSPARENT:
            # A ``noop`` tool (think, a scratchpad) neither brings nor stops anything: look through.
            history = [r for r in history if r.kind not in TRANSPARENT]
            n = len(history)
            if n < 2:
                return None
            latest = history[n - 1]
        if (
            latest.error is None
            and latest.kind in ACKNOWLEDGING
            and len(run.same_args(latest.args_fp)) == 1
        ):
            return None
        if latest.kind == "poll" or latest.result_fp is None:
            return None  # no evidence either way: not stale (``_stale``, ``brought_nothing_new``)
        if _news(latest, islice(reversed(history), 1, 2 * self.progress_window + 1)):
            return None
        return self._look(history, call)

    def _look(self, history: Sequence[CallRecord], call: Call) -> Detection | None:
        """The full judgement (``check`` calls it when its cheap exit does not settle the call)."""
        history = [r for r in history if r.kind not in TRANSPARENT]
        n = len(history)
        if n < 2:
            return None
        size = self.progress_window
        lookback = 2 * size
        # Cheap exit: the latest call brought something new (the common case).
        if not self._stale(history, n - 1, lookback):
            return None
        stale = [history[n - 1]]
        for i in range(n - 2, max(n - 4 * size, 0) - 1, -1):
            if not self._stale(history, i, lookback):
                break
            stale.append(history[i])
        stale.reverse()
        if call.fn not in {r.fn for r in stale}:
            return None
        # Exact repeats add no evidence here: they are dedup's and cycle's business.
        distinct = len(Counter((r.fn, r.args_fp) for r in stale))
        if distinct >= 2 * size:
            return self._detection(call, stale, "loop")
        if distinct >= size:
            return self._detection(call, stale, "warning")
        warn = self.progress_warn_window
        if warn and call.kind == "write":
            failed = [history[i] for i in range(max(0, n - warn), n)]
            if (
                len(failed) == warn
                and all(r.kind == "write" and r.error is not None for r in failed)
                and len({r.result_fp for r in failed}) == 1
                and len({r.args_fp for r in failed}) == warn
            ):
                return self._detection(call, failed, "warning")
        return None

    def _stale(self, history: Any, i: int, lookback: int) -> bool:
        record = history[i]
        if record.kind == "poll":
            return False
        earlier = [history[j] for j in range(max(0, i - lookback), i)]
        if units_of(record, CONTENT.key) is NEUTRAL:
            # No words: no evidence, unless a search found nothing again.
            return nothing_found(record) and any(
                r.result_fp == record.result_fp for r in earlier
            )
        return brought_nothing_new(record, earlier, CONTENT.key)

    def _detection(self, call: Call, window: list[Any], kind: str) -> Detection:
        names = sorted({r.fn for r in window})
        errors = all(r.error is not None for r in window)
        what = "failed the same way" if errors else "returned nothing new"
        tools = ", ".join(f"`{n}`" for n in names)
        if kind == "loop":
            message = (
                f"The last {len(window)} calls ({tools}) {what}: changing the arguments did not "
                "change the outcome. Stop and use what you have, or take a different approach."
            )
        else:
            message = (
                f"The last {len(window)} calls ({tools}) {what}. Varying the arguments is not "
                "helping: rethink the approach before calling again."
            )
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=len(window),
            threshold=self.progress_window,
            kind="loop" if kind == "loop" else "warning",
            pattern=frozenset(r.result_fp for r in window),
            message=message,
        )


#: The fingerprints of an empty answer: for a search, "nothing found".
_EMPTY_ANSWERS: tuple[object, ...] = ("", "\n", " ", [], {}, None)
_NOTHING: frozenset[bytes] = frozenset(fingerprint(value) for value in _EMPTY_ANSWERS)


def nothing_found(record: CallRecord) -> bool:
    """Whether ``record`` is a search that answered with nothing at all (an empty output or list):
    no words, but an answer all the same, as "No results found." is."""
    return record.kind == "search" and record.error is None and record.result_fp in _NOTHING


# Answers of up to this many content units are compared with the others' in one set difference.
_NEWS_AT_ONCE: Final = 64
# The units of an answer looked up one by one before the rest are compared at once.
_FIRST_LOOKS: Final = 2


def _news(record: CallRecord, earlier: Iterable[CallRecord]) -> bool:
    """True when ``record`` surely brought something new against ``earlier`` (``_stale`` would
    say it is not stale): its outcome is known, none of ``earlier`` has its result fingerprint,
    and one of its content units is in none of theirs. False when unsure: the full judgement
    decides. One pass over ``earlier``, then the units until one is new: the common case of a
    result that brings something new."""
    content = units_of(record, CONTENT.key)
    if type(content) is not frozenset or not content:
        return content is NEUTRAL and not nothing_found(record)
    fp = record.result_fp
    known: list[frozenset[Any]] = []
    keep = known.append
    key = CONTENT.key
    for other in earlier:
        if other.result_fp == fp:
            return False
        units = other.features.get(key)  # NEUTRAL (None) when absent
        if type(units) is tuple:
            units = units[1] if other.kind in INFORMING else units[0]
        if type(units) is frozenset:
            keep(units)
    if not known:
        return True
    # Most answers that bring something new do so in their first units: those are looked up one
    # by one, stopping at the first new one (a few lookups instead of one per unit and set).
    for unit in islice(content, _FIRST_LOOKS):
        for units in known:
            if unit in units:
                break
        else:
            return True
    if len(content) <= _FIRST_LOOKS:
        return False
    if len(content) <= _NEWS_AT_ONCE:
        # A small answer: the units in none of the others' in one set difference (no Python
        # loop over units and sets).
        return bool(content.difference(*known))
    for unit in content:  # a large answer: most bring a new unit early, stop at the first one
        for units in known:
            if unit in units:
                break
        else:
            return True
    return False
