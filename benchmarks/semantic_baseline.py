"""5. The semantic layer against a naive baseline: ``difflib.SequenceMatcher`` over the same window.

Each case is a fresh run of six calls returning 1 KB outputs: five distinct texts, then a sixth that
is either a lightly edited copy of one of the earlier ones (a loop) or a new text. A seventh call
asks the layer for its verdict. The baseline compares the sixth output with the earlier outputs in
the same window using ``SequenceMatcher(None, a, b, autojunk=False).ratio()`` at the same
threshold. The verdicts must agree on every case; the speed ratio compares the layer's cost per
call (guarded with the layer minus guarded without it) with the baseline's per window.
"""

from __future__ import annotations

import difflib
import random
import time
from collections.abc import Callable
from typing import Any

from _common import WORDS, Row, median, text

import fuzeguard
from fuzeguard import Config, Detection, guard
from fuzeguard.layers import BUILTIN_LAYERS

WINDOW = 5
SIZE = 1_000


def _edited(source: str, rng: random.Random, edits: int = 4) -> str:
    words = source.split(" ")
    for _ in range(edits):
        words[rng.randrange(len(words))] = rng.choice(WORDS)
    return " ".join(words)


def _cases(count: int) -> list[tuple[list[str], bool]]:
    """(outputs, is_loop): the sixth output copies one of outputs 2-5 with edits, or is new."""
    rng = random.Random(5)
    cases = []
    for c in range(count):
        outputs = [text(SIZE, seed=1000 * c + k) for k in range(WINDOW)]
        loop = c % 2 == 0
        outputs.append(_edited(outputs[rng.randrange(1, WINDOW)], rng) if loop
                       else text(SIZE, seed=1000 * c + 999))
        cases.append((outputs, loop))
    return cases


def _naive(outputs: list[str], threshold: float) -> bool:
    """Ralph's check done plainly: the latest output against the earlier ones in the window."""
    window = outputs[-WINDOW:]
    latest = window[-1]
    return any(
        difflib.SequenceMatcher(None, latest, earlier, autojunk=False).ratio() >= threshold
        for earlier in window[:-1]
    )


def _layer(outputs: list[str], layers: list[str]) -> tuple[bool, float]:
    """The layer's verdict on the call after ``outputs``, and the seconds the calls took."""
    found: list[Detection] = []
    questions = [" ".join(reversed(text(60, seed=k).split())) + f" {k}" for k in range(len(outputs) + 1)]

    def tool(question: str, n: int) -> str:
        return outputs[n] if n < len(outputs) else ""

    guarded: Callable[..., Any] = guard(tool, layers=layers, on_loop="warn",
                                        similarity_window=WINDOW)
    with fuzeguard.run("semantic", config=Config(), on_detect=found.append):
        t0 = time.process_time()
        for n in range(len(outputs)):
            guarded(questions[n], n)
        elapsed = time.process_time() - t0
        early = list(found)
        guarded(questions[-1], len(outputs))
    assert not early, f"a detection before the probe call: {early[:1]}"
    return any(d.layer == "semantic" for d in found), elapsed


def measure(quick: bool) -> list[Row]:
    if "semantic" not in BUILTIN_LAYERS:
        return [Row("5. semantic vs difflib", "verdicts and speed ratio",
                    "skipped: the semantic layer is not in this build")]
    threshold = BUILTIN_LAYERS["semantic"]().similarity_threshold
    cases = _cases(6 if quick else 40)
    agree = 0
    layer_times: list[float] = []
    naive_times: list[float] = []
    for outputs, loop in cases:
        verdict, with_layer = _layer(outputs, ["semantic"])
        _, without = _layer(outputs, [])
        t0 = time.process_time()
        naive = _naive(outputs, threshold)
        naive_times.append(time.process_time() - t0)
        layer_times.append((with_layer - without) / len(outputs))
        agree += verdict == naive == loop
    layer_s, naive_s = median(layer_times), median(naive_times)
    return [
        Row("5. semantic vs difflib", f"same verdicts on {len(cases)} cases (half of them loops)",
            f"{agree}/{len(cases)}", "all", agree == len(cases)),
        Row("5. semantic vs difflib", "semantic layer per call, 1 KB outputs, window 5",
            f"{layer_s * 1e3:.3f} ms"),
        Row("5. semantic vs difflib", "difflib SequenceMatcher over the same window",
            f"{naive_s * 1e3:.3f} ms"),
        Row("5. semantic vs difflib", "speed ratio (difflib / semantic layer)",
            f"{naive_s / layer_s:.0f}x faster" if layer_s > 0 else "n/a"),
    ]
