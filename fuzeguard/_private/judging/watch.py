"""Watching a streamed call's chunks: one path for a live generator and a replayed stream.

Layers with a ``watch(call)`` method (``WatchesStreams``: ``semantic``, an output chanting one
passage) each get a watcher that is fed every chunk and keeps bounded state of its own. A
detection is acted on through the run (``Run._flag``: the same action choice, bookkeeping,
publication and kill as a detection made before the call); each watcher reports a stream at most
once. What to do then is the caller's: a live generator raises ``LoopDetected`` on a kill and ends
the stream on a skip; replay stops evaluating the run, or ends the recorded chunks there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fuzeguard._private.judging.core import check_detection
from fuzeguard._private.judging.layer import StreamWatcher
from fuzeguard._private.meaning.records import Call, Decision
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.log import emit

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals


class StreamWatch:
    """The watchers of one streamed call; ``decision`` grows with what fires mid-stream, so that
    the call's trace line shows it as well as what fired before the call."""

    __slots__ = ("call", "decision", "plan", "run", "watchers")

    def __init__(self, run: RunInternals, plan: Plan, call: Call, decision: Decision) -> None:
        self.run = run
        self.plan = plan
        self.call = call
        self.decision = decision
        self.watchers: list[StreamWatcher] = []
        for layer in plan.watchers:
            try:
                self.watchers.append(layer.watch(call))
            except Exception as exc:
                emit("error", "fuzeguard.internal_error", fn=call.fn, phase="stream",
                     error=exception_text(exc))

    def feed(self, chunk: Any) -> Decision | None:
        """Show one chunk to the watchers: the decision taken on what one of them found, or
        None when none did."""
        for i, watcher in enumerate(self.watchers):
            try:
                detection = watcher.feed(chunk)
                if detection is not None:
                    check_detection(watcher, detection)
            except Exception as exc:
                emit("error", "fuzeguard.internal_error", fn=self.call.fn, phase="stream",
                     error=exception_text(exc))
                detection = None
            if detection is not None:
                del self.watchers[i]
                decision = self.run._flag(self.plan, self.call, detection)
                before = self.decision
                self.decision = Decision(
                    decision.action if decision.action != "call" else before.action,
                    before.index,
                    decision.detection or before.detection,
                    before.detections + decision.detections,
                )
                return decision
        return None
