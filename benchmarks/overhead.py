"""1. What a guarded call costs, against the floor and against a bare call.

The floor is what fingerprinting the arguments costs at the least:
``blake3(json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()).digest()`` of the
same arguments the guarded calls get (a five-word query string and an int). The guarded overhead
is the guarded time minus the time of the same calls made bare. Arguments are distinct on every
call and each tool answers something new, so no layer has a reason to fire; every batch checks
that none did.

Three workloads with the default layers (their targets are ratios to a peer's overhead on the
same calls: ``peer_ratios.py``):

- one tool returning an int (``count``, of kind ``other``);
- one tool of an acknowledging kind returning a short text (``convert``, kind ``other``: a new
  acknowledgement on every call, "converted" and the query reversed);
- a rotation of three read/search tools (``search_docs``, ``read_page``, ``find_refs``) whose
  text answers change on every call (a dozen random words each, new to the run).

Each batch is one run of thousands of calls, far more than any function is called in a task, so
these rows set ``max_iterations`` high: the iteration layer then checks its count, as it does for
every function called fewer than 25 times. With the built-in cap instead, every call past a
function's 25th also judges whether its recent calls were productive: the rotation is measured
that way too, in its own row. Peers (``peers.py``) are measured on the same calls, in the same
process, interleaved with the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import peers
from _common import Row, floor_batch, median, per_call, queries, text, us

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.meaning.fingerprint import fingerprint
from fuzeguard._private.meaning.kinds import infer_kind
from fuzeguard.layers import BUILTIN_LAYERS
from fuzeguard.layers._evidence import ACKNOWLEDGING, INFORMING

# Far above any batch: the count is checked, never reached (see the module doc).
HIGH_CAP = {"max_iterations": 10**9}
# The answers of the read/search tools, one per call: short texts new to the run.
ANSWERS: list[str] = []


def count(query: str, limit: int) -> int:
    """The int tool: a number that is new on every call."""
    return limit * 7


def convert(query: str, limit: int) -> str:
    """The acknowledging tool: as cheap as a function can be while answering something new."""
    return "converted " + query[::-1]


def search_docs(query: str, limit: int) -> str:
    return ANSWERS[limit]


def read_page(query: str, limit: int) -> str:
    return ANSWERS[limit]


def find_refs(query: str, limit: int) -> str:
    return ANSWERS[limit]


ROTATION = (search_docs, read_page, find_refs)
assert infer_kind(count.__name__) in ACKNOWLEDGING and infer_kind(convert.__name__) in ACKNOWLEDGING
assert all(infer_kind(f.__name__) in INFORMING for f in ROTATION)


def _batch(tools: tuple[Callable[..., Any], ...], qs: list[str]) -> Callable[[], None]:
    """One run of ``len(qs)`` calls, the tools taken in turn; checks that nothing fired."""
    width = len(tools)

    def batch() -> None:
        with fuzeguard.run("overhead", config=Config()) as run:
            for i, q in enumerate(qs):
                tools[i % width](q, i)
            stats = run.stats()
        assert stats.calls == len(qs), stats
        assert stats.detections == 0, f"a layer fired on distinct calls: {run.detections[:3]}"

    return batch


def _bare(tools: tuple[Callable[..., Any], ...], qs: list[str]) -> Callable[[], None]:
    width = len(tools)

    def batch() -> None:
        for i, q in enumerate(qs):
            tools[i % width](q, i)

    return batch


def measure(quick: bool) -> tuple[list[Row], dict[str, float]]:
    calls = 2_000 if quick else 10_000
    repeats = 3 if quick else 21
    qs = queries(calls, seed=1)
    ANSWERS[:] = [text(80, seed=10_000 + i) for i in range(calls)]
    bound = [{"query": q, "limit": i} for i, q in enumerate(qs)]

    floor = floor_batch(bound)

    def ours() -> None:
        for arguments in bound:
            fingerprint(arguments)

    variants = {
        "floor": floor,
        "fingerprint": ours,
        "bare int": _bare((count,), qs),
        "bare text": _bare((convert,), qs),
        "bare rotation": _bare(ROTATION, qs),
        "int": _batch((guard(count, **HIGH_CAP),), qs),
        "text": _batch((guard(convert, **HIGH_CAP),), qs),
        "rotation": _batch(tuple(guard(f, **HIGH_CAP) for f in ROTATION), qs),
        "rotation, built-in cap": _batch(tuple(guard(f) for f in ROTATION), qs),
        "all": _batch((guard(convert, layers=list(BUILTIN_LAYERS), **HIGH_CAP),), qs),
        "core": _batch((guard(count, layers=[]),), qs),
        "core rotation": _batch(tuple(guard(f, layers=[]) for f in ROTATION), qs),
        "peer: one counter": _bare((peers.stacked(count, 1),), qs),
        "peer: three counters": _bare((peers.stacked(count, 3),), qs),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up: plans resolved, caches filled
        fn()
    for _ in range(repeats):  # interleaved, so that drifts in machine load hit every variant alike
        for name, fn in variants.items():
            samples[name].append(per_call(fn, calls))
    t = {name: median(values) for name, values in samples.items()}
    base = t["floor"]
    over = {
        "int": t["int"] - t["bare int"],
        "text": t["text"] - t["bare text"],
        "rotation": t["rotation"] - t["bare rotation"],
        "rotation, built-in cap": t["rotation, built-in cap"] - t["bare rotation"],
        "all": t["all"] - t["bare text"],
        "core": t["core"] - t["bare int"],
        "core rotation": t["core rotation"] - t["bare rotation"],
        "peer: one counter": t["peer: one counter"] - t["bare int"],
        "peer: three counters": t["peer: three counters"] - t["bare int"],
    }

    def ratio(name: str) -> str:
        return f"{over[name] / base:.2f}x  ({us(over[name])})"

    default_names = ", ".join(Config().settings_for(None)["layers"])
    rows = [
        Row("1. overhead", "bare call (the int tool)", us(t["bare int"])),
        Row("1. overhead", "floor: blake3 of the arguments' sorted compact JSON", us(base)),
        Row("1. overhead", "fuzeguard's own argument fingerprint / floor",
            f"{t['fingerprint'] / base:.2f}x  ({us(t['fingerprint'])})"),
        Row("1. overhead", f"default layers ({default_names}): guarded call, int result",
            us(t["int"])),
    ]
    for name, what in (
        ("int", "one tool, int result"),
        ("text", "one tool of an acknowledging kind, short text result"),
        ("rotation", "rotation of three read/search tools, changing text results"),
    ):
        rows.append(Row("1. overhead", f"guarded overhead / floor, default layers, {what}",
                        ratio(name)))
    rows += [
        Row("1. overhead", "guarded overhead / floor, default layers, rotation of three "
            "read/search tools, built-in iteration cap (each tool past its 25th call)",
            ratio("rotation, built-in cap")),
        Row("1. overhead", "guarded overhead / floor, no layers (the core: binding, both "
            "fingerprints, records, locks), int result", ratio("core")),
        Row("1. overhead", "guarded overhead / floor, no layers, rotation of three read/search "
            "tools (the core, and each text result judged: skeleton, error reading, fingerprint)",
            ratio("core rotation")),
        Row("1. overhead", "share of the int overhead spent in the default layers",
            f"{(over['int'] - over['core']) / over['int']:.0%}"),
        Row("1. overhead", f"guarded overhead / floor, all layers ({', '.join(BUILTIN_LAYERS)}), "
            "short text result", ratio("all")),
        Row("1. overhead", "peer on the same calls (reads no result): a \"3 identical calls in a "
            "row\" counter, overhead / floor", ratio("peer: one counter")),
        Row("1. overhead", "peer on the same calls: three such counters stacked, overhead / floor",
            ratio("peer: three counters")),
    ]
    times = {"floor": base, "bare": t["bare int"], "default": t["int"], "core": t["core"],
             "core rotation overhead": over["core rotation"]}
    return rows, times


if __name__ == "__main__":
    import sys

    from _common import machine

    print(f"load average (1, 5, 15 min): {machine()['load average at start (1, 5, 15 min)']}")
    for row in measure(quick="--quick" in sys.argv)[0]:
        print(f"{row.name}: {row.value} {row.verdict}".rstrip())
