"""The decision core: (run state, call, layers) -> decision. Pure and synchronous.

The sync, async and generator wrappers in ``guard.py`` are thin shells around ``decide`` and the
run's bookkeeping; nothing here does I/O, logging or calls user code other than layers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Final, Literal

from fuzeguard._private.meaning.fastinit import new_decision
from fuzeguard._private.meaning.records import Action, Call, Decision, Detection

if TYPE_CHECKING:
    from fuzeguard._private.judging.layer import Layer, RunView

# "ask" may end in a kill: it outranks a skip, and a kill makes asking pointless.
_SEVERITY = {"call": 0, "warn": 1, "skip": 2, "ask": 3, "kill": 4}
# A pattern answered by its ladder's last step, "skip", this many times that comes back is killed:
# skipping did not end the loop (a model that keeps reading "No results found." and searching).
SKIPS_BEFORE_KILL: Final = 2


def decide(
    run: RunView,
    call: Call,
    layers: Sequence[Layer],
    ladder: Sequence[Action],
    hits: Callable[[Hashable], int],
    *,
    early: int = 0,
    persist: int = 0,
    told: Callable[[Call, int], Callable[[Hashable], int]] | None = None,
    observe: bool = False,
    on_error: Callable[[Layer, Call, Exception], object] | None = None,
) -> Decision:
    """Run every layer on ``call`` and choose what to do.

    A ``"limit"`` detection kills; a ``"warning"`` warns; a ``"loop"`` the evidence does not yet
    make one (``early_warning``, with ``told(call, persist)``: what the model was told) is
    answered as an early warning (its kind becomes
    ``"warning"``), else takes the ladder's step for the number of times its pattern was acted
    on as a loop before (``hits``). The most severe action wins.
    In observe mode each detection keeps the action it would have taken and the call goes ahead.
    A layer that raises is left out of this decision and reported to ``on_error``: one faulty
    layer never switches the others off.
    """
    found: list[Detection] | None = None  # made only when a layer fires: most calls are quiet
    for layer in layers:
        try:
            detection = layer.check(run, call)
            if detection is not None:
                check_detection(layer, detection)
        except Exception as exc:
            if on_error is not None:
                on_error(layer, call, exc)
            continue
        if detection is not None:
            if found is None:
                found = [detection]
            else:
                found.append(detection)
    if found is None:
        return new_decision("call", call.index)
    best: Detection | None = None
    best_action: str = "call"
    completed = []
    # What the model was told (``told`` of the call and ``persist``), read only when a layer fired.
    times = told(call, persist) if early and told is not None else None
    for detection in found:
        if early and early_warning(detection, early, times):
            action: Action = "warn"
            detection = dataclasses.replace(
                detection, run_id=run.id, call_index=call.index, fn=detection.fn or call.fn,
                kind="warning", action=action,
            )
        else:
            action = action_for(detection, ladder, hits)
            detection = dataclasses.replace(
                detection, run_id=run.id, call_index=call.index, fn=detection.fn or call.fn,
                action=action,
            )
        completed.append(detection)
        if _SEVERITY[action] > _SEVERITY[best_action]:
            best, best_action = detection, action
    final: Literal["call", "warn", "skip", "kill", "ask"] = "call" if observe else best_action  # type: ignore[assignment]
    return Decision(final, call.index, best, tuple(completed))


def settle(decision: Decision) -> Decision:
    """The decision its detections' actions make (the most severe wins): after ``ask`` answers
    or a raised bar changed some of them."""
    best: Detection | None = None
    best_action = "call"
    for detection in decision.detections:
        action = detection.action
        if _SEVERITY.get(action, 0) > _SEVERITY[best_action]:
            best, best_action = detection, action
    return Decision(best_action, decision.index, best, decision.detections)  # type: ignore[arg-type]
def check_detection(layer: object, detection: object) -> None:
    """Raise TypeError, saying what is wrong, when a layer answered with something other than a
    ``Detection`` whose pattern can be compared (``pattern_key``): a layer that returns a bad
    value is left out of the decision as one that raises is, never the whole stack."""
    name = getattr(layer, "name", None) or type(layer).__name__
    if not isinstance(detection, Detection):
        raise TypeError(
            f"the layer {name} returned {type(detection).__name__} {detection!r:.80}: a layer's "
            "check() returns a Detection or None"
        )
    try:
        hash(detection.pattern)
    except TypeError:
        raise TypeError(
            f"the layer {name} returned a Detection whose pattern is a "
            f"{type(detection.pattern).__name__}, which cannot be hashed: use a tuple or a string"
        ) from None


def early_warning(
    detection: Detection, early: int, told: Callable[[Hashable], int] | None = None
) -> bool:
    """Whether a loop is answered by an early warning rather than by ``on_loop``: evidence
    grades the response (docs/layers.md). A weak loop always is (while ``early`` is above 0); a
    certain one never; any other until the model was told ``early`` times about its pattern
    (``told``: the warnings about it that reached the model, counted as ``early`` when it was
    warned about anything a short while ago)."""
    if detection.kind != "loop" or not early:
        return False
    evidence = detection.evidence
    if evidence == "weak":
        return True
    if evidence == "certain":
        return False
    return told is None or told(pattern_key(detection)) < early


def action_for(
    detection: Detection, ladder: Sequence[Action], hits: Callable[[Hashable], int]
) -> Action:
    """The action one detection calls for, before observe mode is applied.

    A ladder's last step repeats, except a final ``"skip"``: once a pattern was skipped
    ``SKIPS_BEFORE_KILL`` times at that step, its next detection kills.
    """
    if detection.kind == "limit":
        return "kill"
    if detection.kind == "warning":
        return "warn"
    step = hits(pattern_key(detection))
    last = len(ladder) - 1
    if step < last:
        return ladder[step]
    action = ladder[last]
    if action == "skip" and step - last >= SKIPS_BEFORE_KILL:
        return "kill"
    return action


def pattern_key(detection: Detection) -> Hashable:
    """What makes two detections "the same pattern" for an escalation ladder.

    A layer's ``pattern`` names what repeats whichever call is pending (a cycle is one pattern
    at each of its steps, so that a ping-pong climbs the ladder at every call, not every other);
    without one, the pattern is the layer's finding about that function.
    """
    if detection.pattern is None:
        return (detection.layer, detection.fn)
    return (detection.layer, detection.pattern)
