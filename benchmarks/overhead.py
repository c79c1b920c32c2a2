"""1. What a guarded call costs: against a bare call and against the floor.

The floor is the least any argument-fingerprinting guard must do: canonically encode the bound
arguments and blake3-hash them once (``fuzeguard._private.fingerprint.fingerprint``). The guarded
overhead is the guarded time minus the bare time. Arguments are a short query string and an int,
distinct on every call, and the tool answers each with something new, so no layer has a reason
to fire; every batch checks that none did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _common import Row, median, per_call, queries, us

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.fingerprint import fingerprint
from fuzeguard.layers import BUILTIN_LAYERS

TARGET = 2.0


def search(query: str, limit: int) -> str:
    """The benchmarked tool: as cheap as a function can be while answering something new (an
    answer that only echoed the query would be no news to the progress layer)."""
    return query[::-1]


def _guarded_batch(tool: Callable[..., Any], qs: list[str]) -> Callable[[], None]:
    def batch() -> None:
        with fuzeguard.run("overhead", config=Config()) as run:
            for i, q in enumerate(qs):
                tool(q, i)
            stats = run.stats()
        assert stats.calls == len(qs), stats
        assert stats.detections == 0, f"a layer fired on distinct calls: {run.detections[:3]}"

    return batch


def measure(quick: bool) -> tuple[list[Row], dict[str, float]]:
    calls = 2_000 if quick else 10_000
    repeats = 3 if quick else 11
    qs = queries(calls, seed=1)
    bound = [{"query": q, "limit": i} for i, q in enumerate(qs)]
    default = guard(search, max_iterations=10**9)
    everything = guard(search, max_iterations=10**9, layers=list(BUILTIN_LAYERS))
    core = guard(search, layers=[])

    def bare() -> None:
        for i, q in enumerate(qs):
            search(q, i)

    def floor() -> None:
        for arguments in bound:
            fingerprint(arguments)

    variants = {
        "bare": bare,
        "floor": floor,
        "default": _guarded_batch(default, qs),
        "all": _guarded_batch(everything, qs),
        "core": _guarded_batch(core, qs),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up: plans resolved, caches filled
        fn()
    for _ in range(repeats):  # interleaved, so that drifts in machine load hit every variant alike
        for name, fn in variants.items():
            samples[name].append(per_call(fn, calls))
    t = {name: median(values) for name, values in samples.items()}
    over_default = t["default"] - t["bare"]
    over_all = t["all"] - t["bare"]
    over_core = t["core"] - t["bare"]
    layer_names = ", ".join(BUILTIN_LAYERS)
    default_names = ", ".join(Config().settings_for(None)["layers"])
    rows = [
        Row("1. overhead", "bare call", us(t["bare"])),
        Row("1. overhead", "floor: encode + blake3 the arguments once", us(t["floor"])),
        Row("1. overhead", f"guarded call, default layers ({default_names})", us(t["default"])),
        Row(
            "1. overhead",
            "guarded overhead / floor, default layers",
            f"{over_default / t['floor']:.2f}x  ({us(over_default)})",
            f"≤ {TARGET:g}x",
            over_default / t["floor"] <= TARGET,
        ),
        Row("1. overhead", "guarded overhead / bare call, default layers",
            f"{over_default / t['bare']:.0f}x"),
        Row("1. overhead", "guarded overhead / floor, no layers (the core: binding, both "
            "fingerprints, records, locks)", f"{over_core / t['floor']:.2f}x  ({us(over_core)})"),
        Row("1. overhead", "share of the default overhead spent in the default layers",
            f"{(over_default - over_core) / over_default:.0%}"),
        Row("1. overhead", f"guarded call, all layers ({layer_names})", us(t["all"])),
        Row("1. overhead", "guarded overhead / floor, all layers",
            f"{over_all / t['floor']:.2f}x  ({us(over_all)})"),
    ]
    return rows, t
