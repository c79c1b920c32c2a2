"""Verdicts are unchanged: known loops are still caught and fingerprints still match.

The suite runs these checks before timing anything, so that a speed-up which changes what the
guard decides fails the benchmark instead of improving it. The fingerprints below were computed
by the encoder before the hot path was optimized; they must never change (traces and thresholds
tuned on recorded history rely on them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _common import Row

import fuzeguard
from fuzeguard import Config, Detection, LoopDetected, guard
from fuzeguard._private.meaning.fingerprint import fingerprint

GOLDEN: list[tuple[Any, frozenset[str], str]] = [
    ("ok", frozenset(), "a37240f6a0ef5bc069609bd57e9ae290"),
    ({"query": "weather in Paris", "limit": 3}, frozenset(), "a6e8545bfc1878b6f3836574402e78a7"),
    ({"a": [1, 2.5, None, True], "b": {"c": "x", "id": 7}}, frozenset(),
     "94f96e01497d7b8d7d17ed5f30a42e11"),
    ({"a": [1, 2.5, None, True], "b": {"c": "x", "id": 7}}, frozenset({"id"}),
     "9ec1e5487f395f83426d66259e0bfb8e"),
    ({"doc": "ab" * 50_000, "page": 2}, frozenset(), "34c17acd6f3669793e8fee0a1100ea2f"),
    (("error", "builtins.ValueError", "bad"), frozenset(), "8f8817e26785e7368bb3ad127edfc58a"),
]


def _calls(tool: Callable[..., Any], calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
           **settings: Any) -> tuple[int, LoopDetected | None, list[Detection]]:
    """Make ``calls`` in a fresh run until one is killed: (calls made, the kill, detections)."""
    found: list[Detection] = []
    with fuzeguard.run("verdicts", config=Config(), on_detect=found.append, **settings):
        for n, (args, kwargs) in enumerate(calls):
            try:
                tool(*args, **kwargs)
            except LoopDetected as exc:
                return n, exc, found
    return len(calls), None, found


def _same_answer(query: str, limit: int = 5) -> str:
    return "no results"


def check() -> list[Row]:
    """Run every known scenario; raise AssertionError on the first verdict that changed."""
    for value, volatile, expected in GOLDEN:
        got = fingerprint(value, volatile).hex()
        assert got == expected, f"fingerprint of {str(value)[:60]!r} changed: {got} != {expected}"

    same = guard(_same_answer)
    made, killed, found = _calls(same, [(("weather in Paris",), {})] * 7)
    assert made == 4 and killed is not None, "dedup: the same call with the same result five " \
        "times back to back, nothing changed since, must be killed (warned at the 3rd and 4th)"
    assert killed.detection.layer == "dedup" and killed.detection.count == 5
    assert [d.kind for d in found] == ["warning", "warning", "loop"], found

    spellings = [(("weather",), {"limit": 2}), ((), {"query": "weather", "limit": 2}),
                 ((), {"limit": 2, "query": "weather"})]
    made, killed, _ = _calls(guard(_same_answer, early_warnings=0), spellings)
    assert made == 2 and killed is not None, "f(1, b=2), f(a=1, b=2) and f(b=2, a=1) are one call"

    answers = iter(range(100))

    def status(job: str) -> str:
        return f"progress {next(answers)}%"

    made, killed, found = _calls(guard(status), [(("job-1",), {})] * 8)
    assert made == 8 and not found, "result-aware dedup: a poll whose answer changes is progress"

    def lookup(term: str) -> str:
        return term

    capped = guard(lookup, max_iterations=5, result_aware=False)
    made, killed, _ = _calls(capped, [((f"t{i}",), {}) for i in range(9)])
    assert made == 5 and killed is not None and killed.detection.layer == "iterations"

    made, killed, _ = _calls(guard(lookup), [((f"t{i}",), {}) for i in range(9)], max_calls=3)
    assert made == 3 and killed is not None and killed.detection.kind == "limit"
    return [Row("0. verdicts", "known loops caught, fingerprints unchanged",
                f"{len(GOLDEN)} fingerprints, 5 scenarios", "all", True)]
