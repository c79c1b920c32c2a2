"""Shared pieces of the benchmark scripts: report rows, timers, workload data and machine facts.

Every timing here is a median over repeats taken in the same process, so that the ratios in the
report compare measurements made under the same conditions.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from blake3 import blake3

WORDS = (
    "apple", "river", "stone", "cloud", "maple", "orbit", "lantern", "quartz", "meadow", "falcon",
    "copper", "harbor", "velvet", "canyon", "ember", "glacier", "willow", "saddle", "prism",
    "thunder", "walnut", "beacon", "marble", "coral", "summit", "hollow", "timber", "raven",
    "cobalt", "dune", "mosaic", "pepper", "violet", "anchor", "breeze", "cedar", "dynamo",
    "fossil", "garnet", "helmet", "island", "jasper", "kettle", "lemon", "mirror", "nectar",
    "onyx", "pillar", "quiver", "rocket", "saffron", "tundra", "umber", "vortex", "wander",
    "yonder", "zephyr", "acorn", "bramble", "cipher", "drizzle", "echo", "fable", "gadget",
    "hazel", "ivory", "jigsaw", "kernel", "lotus", "magnet", "nimbus", "oracle", "pebble",
    "quill", "ripple", "sonnet", "tangle",
)


@dataclass(frozen=True)
class Row:
    """One line of the report table."""

    section: str
    name: str
    value: str
    target: str = ""
    met: bool | None = None

    @property
    def verdict(self) -> str:
        if self.met is None:
            return ""
        return "yes" if self.met else "**no**"


def show(rows: Iterable[Row]) -> None:
    """Print ``rows`` as a script run on its own does: ``name: value`` and the verdict."""
    for row in rows:
        print(f"{row.name}: {row.value} {row.verdict}".rstrip())


def queries(n: int, seed: int, words: int = 5) -> list[str]:
    """``n`` distinct short search queries made of random words (dissimilar to each other)."""
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=words)) + f" {i}" for i in range(n)]


def text(size: int, seed: int) -> str:
    """About ``size`` characters of random words: realistic tool output that does not repeat."""
    rng = random.Random(seed)
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)[:size]


def floor_batch(arguments: list[dict[str, object]]) -> Callable[[], None]:
    """The floor of the overhead target, once for each of ``arguments``: the blake3 of the
    arguments' sorted compact JSON, the least an argument-fingerprinting guard must do."""

    def batch() -> None:
        for bound in arguments:
            blake3(json.dumps(bound, sort_keys=True, separators=(",", ":")).encode()).digest()

    return batch


def per_call(fn: Callable[[], object], calls: int) -> float:
    """CPU seconds per call of ``fn``, which itself performs ``calls`` calls.

    CPU time of this process rather than wall time: on a shared machine other processes then
    slow the measurement down (cache, frequency) but do not add their own time slices to it.
    Only used for single-threaded work.
    """
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) / calls


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs"


def machine() -> dict[str, str]:
    """CPU model, core count, Python version and OS of the machine the suite runs on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "OS": platform.platform(),
        "load average at start (1, 5, 15 min)": _load(),
    }


def _load() -> str:
    """Other work on the machine shows in every timing; the report says how busy it was."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc``; 0 where unavailable)."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
