"""3. Big inputs: 1 MB arguments and 100 KB results.

The fingerprint's throughput is measured at 10 KB, 100 KB and 1 MB: if hashing is linear, the MB/s
do not drop as inputs grow (at 10 KB the fixed cost per call still shows). A guarded call carrying
1 MB of arguments and returning 100 KB is timed with the default layers, and the semantic layer
(window of 5), the layer that reads the text of results, is timed on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _common import Row, median, per_call, text

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.meaning.fingerprint import fingerprint
from fuzeguard.layers import BUILTIN_LAYERS

LINEAR_TARGET = 1.5  # per-byte cost at 1 MB at most this many times the per-byte cost at 100 KB
SEMANTIC_TARGET_MS = 5.0


def _throughput(size: int, repeats: int) -> float:
    """MB/s of ``fingerprint`` over a string argument of ``size`` characters."""
    value = {"document": text(size, seed=size)}
    calls = max(1, (8 << 20) // size)  # about 8 MB hashed per sample
    samples = []
    for _ in range(repeats):

        def batch() -> None:
            for _ in range(calls):
                fingerprint(value)

        samples.append(per_call(batch, calls))
    return size / median(samples) / 1e6


def _guarded_ms(tool: Callable[..., Any], args: list[str], repeats: int, skip: int = 0) -> float:
    """Median milliseconds per guarded call, each repeat in a fresh run over distinct calls.

    The first ``skip`` calls of each run fill the history and are not timed.
    """
    return median(_one_run(tool, args, skip) for _ in range(repeats)) * 1e3


def _one_run(tool: Callable[..., Any], args: list[str], skip: int) -> float:
    """Seconds per guarded call in one fresh run over ``args`` (the first ``skip`` not timed)."""
    with fuzeguard.run("big inputs", config=Config()) as run:
        for i, a in enumerate(args[:skip]):
            tool(a, i)
        timed = list(enumerate(args))[skip:]

        def batch(timed: list[tuple[int, str]] = timed) -> None:
            for i, a in timed:
                tool(a, i)

        seconds = per_call(batch, len(timed))
        stats = run.stats()
    assert stats.detections == 0, f"a layer fired on distinct big calls: {run.detections[:2]}"
    return seconds


def measure(quick: bool) -> list[Row]:
    repeats = 3 if quick else 7
    calls = 4 if quick else 12
    rates = {size: _throughput(size, repeats) for size in (10_000, 100_000, 1_000_000)}
    slowdown = rates[100_000] / rates[1_000_000]
    rows = [
        Row("3. big inputs", f"fingerprint throughput, {size // 1000:,} KB string", f"{rate:,.0f} MB/s")
        for size, rate in rates.items()
    ]
    rows.append(Row("3. big inputs", "per-byte cost at 1 MB / at 100 KB (1.00 = linear)",
                    f"{slowdown:.2f}x", f"≤ {LINEAR_TARGET:g}x", slowdown <= LINEAR_TARGET))

    base = text(1_000_000, seed=3)
    documents = [f"{i} {base}" for i in range(calls)]  # 1 MB each, all different
    results = [text(100_000, seed=100 + i) for i in range(calls)]

    def big_tool(document: str, n: int) -> str:
        return results[n]

    default = guard(big_tool, max_iterations=10**9)
    rows.append(Row("3. big inputs", "guarded call, 1 MB argument, 100 KB result, default layers",
                    f"{_guarded_ms(default, documents, repeats):.2f} ms"))

    if "semantic" not in BUILTIN_LAYERS:
        rows.append(Row("3. big inputs", "semantic layer, window 5, 100 KB results",
                        "skipped: the semantic layer is not in this build"))
        return rows
    window = 5
    results += [text(100_000, seed=200 + i) for i in range(window)]
    questions = [f"{i} {' '.join(reversed(text(60, seed=i).split()))}" for i in range(len(results))]
    semantic = guard(big_tool, layers=["semantic"], similarity_window=window)
    plain = guard(big_tool, layers=[])
    # With and without the layer in turn, so that both halves of each difference are measured
    # under the same machine load; the median of the differences.
    layer_ms = median(
        _one_run(semantic, questions, window) - _one_run(plain, questions, window)
        for _ in range(repeats)
    ) * 1e3
    rows.append(Row("3. big inputs", "semantic layer alone, window 5, 100 KB results, per call",
                    f"{layer_ms:.2f} ms", f"< {SEMANTIC_TARGET_MS:g} ms",
                    layer_ms < SEMANTIC_TARGET_MS))
    return rows
