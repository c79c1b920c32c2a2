"""The default stack's cheap exits in one look: a quiet call settled without asking each layer.

Most calls an agent makes are unremarkable. Each layer of the default stack (``iterations``,
``dedup``, ``cycle``, ``progress``) has a cheap exit that settles such a call with a look or two at
the run; ``Quiet`` makes those same looks once, in one function (asking cycle's own ``_lets_go``
where a look of its own does not settle cycle), for a plan whose stack holds those four built-in
layers (whatever their settings). It answers with the layers still to ask: none of the four when
each would have answered None on its own, progress alone of them when the other three would (its
full judgement is then made once, by the layer), and the whole stack when nothing is concluded. Any
other layer of the stack is asked either way. ``tests/meaning/test_cheap_exits.py`` compares
its answers with the layers' own on random runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from fuzeguard._private.judging.layer import Layer
from fuzeguard._private.meaning.records import Call, CallRecord
from fuzeguard.layers._evidence import ACKNOWLEDGING, TRANSPARENT
from fuzeguard.layers.cycle import WAIT_WARN_LAPS, Cycle
from fuzeguard.layers.dedup import Dedup
from fuzeguard.layers.iterations import DEFAULT_CAP, Iterations
from fuzeguard.layers.progress import Progress, _news

_SETTLED = (Iterations, Dedup, Cycle, Progress)


@dataclass(frozen=True, slots=True)
class Quiet:
    """The settings the four cheap exits read, and the layers of the stack they do not settle."""

    cap: int  # iterations: the cap a function's count is checked against
    errors: int  # dedup: failures in the run below which new arguments settle a call
    laps: int  # cycle: the fewest calls any lap count needs
    longest: int  # cycle: the longest cycle looked for
    cycle: Cycle  # its own cheap exit, for the calls the looks here do not settle
    window: int  # progress: the calls before the latest its cheap exit compares it with, halved
    others: tuple[Layer, ...]  # the layers still asked about every call
    # Progress and the others, in the stack's order: asked when all but progress settle a call.
    unsure: tuple[Layer, ...]

    def left(
        self,
        history: Sequence[CallRecord],
        by_args: Mapping[bytes, Sequence[CallRecord]],
        calls_by_fn: Mapping[str, int],
        errors: int,
        call: Call,
    ) -> tuple[Layer, ...] | None:
        """The layers of the stack still to ask about ``call``, given the run's history, argument
        index, calls per function and failures: ``others`` when every one
        of the four layers would settle it by its cheap exit, ``unsure`` when all but progress
        would, None when that is not known of another (the whole stack is asked)."""
        fn = call.fn
        # iterations: the function is under its cap. dedup: arguments new to the history, in a
        # run with few failures.
        if calls_by_fn.get(fn, 0) >= self.cap or errors >= self.errors or by_args.get(call.args_fp):
            return None
        n = len(history)
        if n < 2:  # progress has nothing to judge; cycle: too short a run
            return self.others if n + 1 < self.laps else None
        # progress: the latest call was work of an acknowledging kind with arguments new to the
        # history that did not fail, or its outcome is no evidence (a poll, an unknown result);
        # else (an answer to a read or a search) its own cheap exit, ``_news``, after cycle's.
        latest = history[n - 1]
        kind = latest.kind
        if kind in TRANSPARENT:
            return None
        acknowledged = (
            (latest.error is None and kind in ACKNOWLEDGING
             and len(by_args.get(latest.args_fp, ())) == 1)
            or kind == "poll" or latest.result_fp is None
        )
        # cycle: too short a run for any lap count, or a streak of this one function whose
        # pending call has new arguments (a lap of it alone cannot repeat the pending call), or
        # else cycle's own cheap exit (a rotation of several functions).
        if n + 1 >= self.laps:
            streak = latest.fn == fn
            if streak:
                high = self.longest if self.longest < n - 1 else n - 1
                for k in range(1, high - 1):  # a plain loop: no generator per call
                    if history[n - 1 - k].fn != fn:
                        streak = False
                        break
            if not streak and not self.cycle._lets_go(history, call, by_args.get):
                return None
        if acknowledged or _news(latest, islice(reversed(history), 1, 2 * self.window + 1)):
            return self.others
        return self.unsure


def quiet_check(layers: Sequence[Layer]) -> Quiet | None:
    """The combined cheap exit of a stack holding the four default layers once each, else None."""
    found = {cls: [layer for layer in layers if type(layer) is cls] for cls in _SETTLED}
    if any(len(same) != 1 for same in found.values()):
        return None
    iterations, dedup, cycle = found[Iterations][0], found[Dedup][0], found[Cycle][0]
    progress = found[Progress][0]
    assert isinstance(iterations, Iterations) and isinstance(dedup, Dedup)
    assert isinstance(cycle, Cycle) and isinstance(progress, Progress)
    fewest = min(cycle.cycle_warn_repeats or cycle.cycle_repeats + 1, WAIT_WARN_LAPS)
    return Quiet(
        cap=DEFAULT_CAP if iterations.max_iterations is None else iterations.max_iterations,
        errors=dedup.repeat_threshold,
        laps=cycle.cycle_min_length * fewest,
        longest=cycle.cycle_max_length,
        cycle=cycle,
        window=progress.progress_window,
        others=tuple(layer for layer in layers if type(layer) not in _SETTLED),
        unsure=tuple(layer for layer in layers
                     if type(layer) is Progress or type(layer) not in _SETTLED),
    )
