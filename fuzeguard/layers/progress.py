"""Layer 4, ``progress``: different inputs, same output (Fuze layer 4, enforced).

"If the last N calls produced no new tokens or identical results, the agent is stuck." Each
completed call's outcome is reduced once to its content (see ``fuzeguard.layers._content``); before a
call, the layer asks whether the last ``progress_window`` calls brought anything that the others in
that window did not already have.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from fuzeguard._private.layer import LayerSettings, RunView, setting
from fuzeguard._private.records import Call, CallRecord, Detection
from fuzeguard.layers._content import NEUTRAL, all_stale, brought_nothing_new, content_of


@dataclass(frozen=True, slots=True)
class Progress(LayerSettings):
    """Flag a call when the calls before it keep returning what the window already had.

    A call brought nothing new when its result fingerprint (volatile fields stripped) equals another
    one in the window, or when every content unit of its result appears in the other results of the
    window; errors are results too, compared by class and message template, so the same error with
    varied inputs, or two errors in turn, are stuck work. Short acknowledgements ("OK") are no
    evidence either way, so a window holding one is never flagged.

    The call after ``progress_window`` such calls gets a warning; if the window one call earlier
    was stuck as well, it is a loop (evidence that persists, so a coincidence only warns). The call
    after ``progress_warn_window`` such calls gets an early warning (the third occurrence of the
    same error, as OpenFang and Hermes warn; ``0`` turns it off). With the defaults: the same error
    from varied inputs is warned after its 3rd occurrence and stopped after its 5th; two outputs
    in turn are warned at the 5th call and stopped at the 6th. Only a call to one of the functions
    in the window is flagged (an agent that switches tools is trying something else), and a window
    made only of exact repeats is left to ``dedup`` and ``cycle``.
    """

    name: ClassVar[str] = "progress"

    progress_window: int = setting(
        4, type="int", minimum=2, origin="Fuze layer 4",
        doc="Completed calls that must all bring nothing new before the next call is flagged "
        "(a loop when the window before was stuck too).",
    )
    progress_warn_window: int = setting(
        3, type="int", minimum=0, origin="OpenFang/Hermes loop guard (warn at 3)",
        doc="Completed calls that bring nothing new before the next call gets a warning "
        "(0: no early warning).",
    )

    def __post_init__(self) -> None:
        if self.progress_warn_window > self.progress_window:
            raise ValueError(
                f"progress_warn_window ({self.progress_warn_window}) is above progress_window "
                f"({self.progress_window}): the warning would never come before the loop; lower "
                "it or set it to 0"
            )
        if self.progress_warn_window == 1:
            raise ValueError(
                "progress_warn_window = 1 would warn after every call (one result always repeats "
                "itself); use 2 or more, or 0 for no early warning"
            )

    @property
    def history_needed(self) -> int:
        return self.progress_window + 1

    def observe_result(self, result: Any, error: BaseException | None) -> Any:
        """Keep the content of each result (bounded: small texts only) for later checks."""
        return content_of(result, error)

    def check(self, run: RunView, call: Call) -> Detection | None:
        history = run.history
        size, warn = self.progress_window, self.progress_warn_window
        if len(history) < (min(size, warn) if warn else size):
            return None
        latest = history[-1]
        if latest.features.get(self.name) is NEUTRAL or latest.result_fp is None:
            return None  # an acknowledgement or an unknown outcome is no evidence
        tail = list(history)[-(size + 1):]
        # Every window ends with the latest call, and fewer others cover less: if it brought
        # something new against the largest window, no window can be flagged (the common case).
        if not brought_nothing_new(latest, tail[-size - 1:-1], self.name):
            return None
        window = tail[-size:]
        if len(window) == size and self._stuck(call, window):
            earlier = tail[:-1]
            if len(earlier) == size and self._stuck(call, earlier):
                return self._detection(call, window, "loop")
            return self._detection(call, window, "warning")
        if warn and self._stuck(call, tail[-warn:]):
            return self._detection(call, tail[-warn:], "warning")
        return None

    def _stuck(self, call: Call, window: list[CallRecord]) -> bool:
        if call.fn not in {r.fn for r in window}:
            return False
        counts = Counter((r.fn, r.args_fp) for r in window)
        if min(counts.values()) > 1:
            return False  # only exact repeats: dedup's and cycle's business, never reported twice
        return all_stale(window, self.name)

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
