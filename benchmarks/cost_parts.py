"""1b. Where a quiet guarded call's time goes: each stage of it timed on its own.

The overhead section measures a guarded call whole. This one times, in the same kind of run (a
tool called with distinct arguments and answering something new, the default layers, no layer
firing), each piece of work every such call does, for the int tool and the short-text tool of
the overhead section (of an acknowledging kind), and sets their sum against the floor:

- binding the arguments and fingerprinting them (the binder generated per function);
- each default layer's check of the pending call, against the run as it stands;
- judging the result (its skeleton with volatile parts masked, whether it reads as an error, its
  fingerprint) and what the layers keep of it (its content units);
- the three frozen records (``Call``, ``Decision``, ``CallRecord``), the run's bookkeeping of the
  decision and of the completed call (counters, history, argument index), the run's lock taken
  twice, the ``add_cost()`` context set and reset, and the clock read twice.

What the guarded call costs beyond the sum is the Python-level calls that hand the work from one
stage to the next. Stages are timed on the same inputs in turn, interleaved over repeats;
medians of CPU time, like the overhead section.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

import overhead
from _common import Row, floor_batch, median, per_call, queries, us

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.judging.completion import judged, judged_late, late_record
from fuzeguard._private.judging.plan import Plan
from fuzeguard._private.meaning.fastinit import new_call, new_decision, new_record
from fuzeguard._private.meaning.records import Call

SECTION = "1b. overhead by stage"
HIGH_CAP = overhead.HIGH_CAP  # as in the overhead section: the count is checked only
# The int tool and the acknowledging short-text tool of the overhead section.
TOOLS: dict[str, Callable[..., Any]] = {"int": overhead.count, "short text": overhead.convert}


def _kept(plan: Plan, call: Call, value: Any, late: bool) -> Any:
    """What the layers keep of a result at completion, as ``completion.complete`` keeps it:
    nothing yet for a result judged when first read (``LateRecord``)."""
    return None if late else plan.features(call.arguments, value, None, kind=call.kind)


def _stages(tool: Callable[..., Any], qs: list[str]) -> dict[str, Callable[[], None]]:
    """The stages of a quiet call of ``tool``, each a function that does its work once for every
    query, against a run left as a batch of such calls leaves it."""
    guarded = guard(tool, **HIGH_CAP)
    run = fuzeguard.run("stages", config=Config())
    with run:
        for i, q in enumerate(qs):
            guarded(q, i)
    plan = guarded.guard.plan(run.config)  # type: ignore[attr-defined]
    bind = plan.bind_and_print
    assert bind is not None
    inputs = [(q, len(qs) + i) for i, q in enumerate(qs)]  # new to the run, like the next calls
    bound = [bind(args, {}) for args in inputs]
    assert all(b is not None for b in bound), "the generated binder takes a string and an int"
    calls = [new_call(plan.name, len(qs) + 1, fp, arguments, plan.kind_of(arguments))
             for arguments, fp in bound]
    results = [tool(*args) for args in inputs]
    # As ``complete`` judges them in a streak of the tool's calls: when first read, or at once.
    late = [judged_late(plan, call, result, True) for result, call in zip(results, calls, strict=True)]
    judgements = [judged(plan, call, result) for result, call in zip(results, calls, strict=True)]
    for call in calls:  # every check is quiet: the call would go ahead
        assert all(layer.check(run, call) is None for layer in plan.layers), call

    def binding() -> None:
        for args in inputs:
            bind(args, {})

    def judging() -> None:
        for result, call in zip(results, calls, strict=True):
            if not judged_late(plan, call, result, True):  # reads a text's failure
                judged(plan, call, result)

    def keeping() -> None:
        for call, later, (_, _, value) in zip(calls, late, judgements, strict=True):
            _kept(plan, call, value, later)

    def records() -> None:
        for call, later, (fp, failed, _), result in zip(calls, late, judgements, results,
                                                        strict=True):
            c = new_call(call.fn, call.index, call.args_fp, call.arguments, call.kind)
            new_decision("call", c.index)
            if later:
                late_record(plan, c, result, None, 1.0, 0.1)
            else:
                new_record(c.fn, c.index, c.args_fp, fp, failed, None, 1.0, 0.1, {}, c.kind)

    books = fuzeguard.run("bookkeeping", config=Config())  # changed by the stage: its own run
    books._grow(plan.history_needed)
    booked = [
        (call, new_decision("call", call.index),
         new_record(call.fn, call.index, call.args_fp, fp, failed, None, 1.0, 0.1, {}, call.kind))
        for call, (fp, failed, _) in zip(
            (new_call(c.fn, i + 1, c.args_fp, c.arguments, c.kind) for i, c in enumerate(calls)),
            judgements,
            strict=True,
        )
    ]

    def bookkeeping() -> None:
        for call, decision, record in booked:
            books._count(call, decision)
            books._book(record)

    lock = threading.Lock()

    def locking() -> None:
        for _ in inputs:
            with lock:
                pass
            with lock:
                pass

    box_var: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("box")

    def cost_context() -> None:
        for _ in inputs:
            token = box_var.set([0.0])
            box_var.reset(token)

    def clock() -> None:
        monotonic = time.monotonic
        for _ in inputs:
            monotonic()
            monotonic()

    stages: dict[str, Callable[[], None]] = {"binding and argument fingerprint": binding}
    quiet = plan.quiet
    if quiet is not None:  # as the call does: the four default layers' cheap exits in one look
        assert all(
            quiet.left(run._history, run._by_args, run._calls_by_fn, run._errors, c)
            == quiet.others for c in calls
        ), "each call is settled by the combined cheap exit"

        def settled() -> None:
            for call in calls:
                left = quiet.left(run._history, run._by_args, run._calls_by_fn, run._errors, call)
                for layer in left or ():
                    layer.check(run, call)

        stages["check: the default layers' cheap exits in one look"] = settled
    else:
        for layer in plan.layers:

            def check(layer: Any = layer) -> None:
                for call in calls:
                    layer.check(run, call)

            stages[f"check: {layer.name}"] = check
    stages.update({
        "result judgement (skeleton, error reading, fingerprint; only the error reading for a "
        "result judged when first read)": judging,
        "what the layers keep of the result": keeping,
        "the three records": records,
        "the run's bookkeeping (counters, history, argument index)": bookkeeping,
        "the run's lock, twice": locking,
        "the add_cost() context, set and reset": cost_context,
        "the clock, twice": clock,
    })
    return stages


def measure(quick: bool) -> tuple[list[Row], dict[str, float]]:
    """The rows of the report, and the sums of the stages and the floor (seconds per call) for
    the report's note on the overhead target."""
    calls = 300 if quick else 2_000
    repeats = 3 if quick else 15
    qs = queries(calls, seed=3)
    bound_args = [{"query": q, "limit": i} for i, q in enumerate(qs)]

    floor = floor_batch(bound_args)

    def whole(tool: Callable[..., Any]) -> Callable[[], None]:
        guarded = guard(tool, **HIGH_CAP)

        def batch() -> None:
            with fuzeguard.run("whole", config=Config()) as run:
                for i, q in enumerate(qs):
                    guarded(q, i)
            assert run.stats().detections == 0

        return batch

    def straight(tool: Callable[..., Any]) -> Callable[[], None]:
        """Every stage's work for every call in one loop, with nothing between the stages: what
        a guard that did the same work with no Python-level hand-offs at all would cost (a
        measurement only: it publishes no event and checks nothing a real call checks)."""
        guarded = guard(tool, **HIGH_CAP)
        box_var: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("box")

        def batch() -> None:
            with fuzeguard.run("straight", config=Config()) as run:
                plan = guarded.guard.plan(run.config)  # type: ignore[attr-defined]
                bind, layers, lock, quiet = plan.bind_and_print, plan.layers, run._lock, plan.quiet
                monotonic = time.monotonic
                run._grow(plan.history_needed)
                for i, q in enumerate(qs):
                    arguments, fp = bind((q, i), {})
                    with lock:
                        call = new_call(plan.name, run._attempts + 1, fp, arguments, plan.kind)
                        left = None if quiet is None else quiet.left(
                            run._history, run._by_args, run._calls_by_fn, run._errors, call)
                        for layer in layers if left is None else left:
                            layer.check(run, call)
                        decision = new_decision("call", call.index)
                        run._count(call, decision)
                    t0 = monotonic()
                    token = box_var.set([0.0])
                    result = tool(q, i)
                    box_var.reset(token)
                    history = run._history
                    streak = bool(history) and history[-1].fn == call.fn
                    if judged_late(plan, call, result, streak):
                        record = late_record(plan, call, result, None, t0 - run._start,
                                             monotonic() - t0)
                    else:
                        result_fp, failed, value = judged(plan, call, result)
                        record = new_record(call.fn, call.index, fp, result_fp, failed, None,
                                            t0 - run._start, monotonic() - t0,
                                            _kept(plan, call, value, False), call.kind)
                    with lock:
                        run._book(record)

        return batch

    def bare(tool: Callable[..., Any]) -> Callable[[], None]:
        def batch() -> None:
            for i, q in enumerate(qs):
                tool(q, i)

        return batch

    tools = TOOLS
    variants: dict[str, Callable[[], None]] = {"floor": floor}
    for label, tool in tools.items():
        variants[f"{label}: whole"] = whole(tool)
        variants[f"{label}: straight"] = straight(tool)
        variants[f"{label}: bare"] = bare(tool)
        for stage, fn in _stages(tool, qs).items():
            variants[f"{label}: {stage}"] = fn
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():
        fn()
    for _ in range(repeats):
        for name, fn in variants.items():
            samples[name].append(per_call(fn, calls))
    t = {name: median(values) for name, values in samples.items()}
    base = t["floor"]
    stage_names = [name.split(": ", 1)[1] for name in variants if name.startswith("int: ")
                   and name not in ("int: whole", "int: bare", "int: straight")]

    def pair(key: str) -> str:
        return ", ".join(f"{label} {us(t[f'{label}: {key}'])} ({t[f'{label}: {key}'] / base:.2f}x)"
                         for label in tools)

    rows = [Row(SECTION, f"stage: {stage}", pair(stage)) for stage in stage_names]
    sums = {label: sum(t[f"{label}: {stage}"] for stage in stage_names) for label in tools}
    wholes = {label: t[f"{label}: whole"] - t[f"{label}: bare"] for label in tools}
    straights = {label: t[f"{label}: straight"] - t[f"{label}: bare"] for label in tools}
    rows += [
        Row(SECTION, "sum of the stages / floor",
            ", ".join(f"{label} {sums[label] / base:.2f}x ({us(sums[label])})" for label in tools)),
        Row(SECTION, "guarded overhead measured whole / floor",
            ", ".join(f"{label} {wholes[label] / base:.2f}x ({us(wholes[label])})"
                      for label in tools)),
        Row(SECTION, "every stage's work in one straight loop, no hand-offs between stages / floor",
            ", ".join(f"{label} {straights[label] / base:.2f}x ({us(straights[label])})"
                      for label in tools)),
        Row(SECTION, "the rest: the calls that hand the work from stage to stage",
            ", ".join(f"{label} {us(wholes[label] - sums[label])}" for label in tools)),
    ]
    facts = {"floor": base, "int stages": sums["int"], "string stages": sums["short text"],
             "int whole": wholes["int"], "string whole": wholes["short text"],
             "int straight": straights["int"], "string straight": straights["short text"]}
    return rows, facts


if __name__ == "__main__":
    for row in measure(quick=False)[0]:
        print(f"{row.name}: {row.value}")
