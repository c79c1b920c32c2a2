"""What the framework tests share: tools that count their runs, a stuck model's script, and the
record of measured behaviour that ``docs/frameworks.md`` tables are generated from.

A stuck model loops forever in one of two ways: ``same`` calls ``search("laptops")`` every turn;
``alternate`` calls ``tool_a`` and ``tool_b`` in turn with new arguments each time (their results
never change). Each framework test runs it under each action and checks what it measured against
``tests/helpers/framework_behaviour.json``; ``FUZE_RECORD_BEHAVIOUR=1`` rewrites that file from the
measurements instead, and ``python scripts/gen_framework_docs.py`` renders it into the docs.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fuzeguard import Detection

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "helpers" / "framework_behaviour.json"
ACTIONS: dict[str, Any] = {
    "kill": "kill",
    "warn": "warn",
    "skip": "skip",
    "ladder": ["warn", "skip", "kill"],
}
VARIANTS = ("same", "alternate")
RESULTS = ("3 results for laptops", "nothing new")
_lock = threading.Lock()
# What a scripted model answers when it is asked, after a kill, for its final answer; and what a
# legitimate agent looks up, one laptop a turn (each answer new, so that no layer sees a loop).
WRAP_UP = "I found the ThinkPad X1 three times over; I could not compare prices."
LAPTOPS = [f"{name}: {detail}" for name, detail in [
    ("ThinkPad X1", "carbon-fibre lid, matte screen"), ("MacBook Air", "fanless aluminium body"),
    ("XPS 13", "edge-to-edge panel, haptic row"), ("Framework", "repairable swappable modules"),
    ("Surface", "alcantara palm rest, touchscreen"), ("Zenbook Duo", "second screen above keys"),
    ("Spectre", "convertible hinge with pen"), ("Blade", "gaming graphics, vapour cooling"),
    ("Chromebook", "cloud-first, lightweight plastic"), ("Legion", "tournament refresh rate"),
    ("Gram 17", "featherweight magnesium, large display"), ("Pixelbook", "ribbed grip, hush keys"),
]]


def lookup(index: int) -> str:
    """Look up one laptop's specification."""
    return LAPTOPS[index]



def script(variant: str, i: int) -> tuple[str, dict[str, Any]]:
    """The ``i``-th (0-based) tool call of a stuck model: a tool name and its arguments."""
    if variant == "same":
        return "search", {"query": "laptops"}
    return ("tool_a" if i % 2 == 0 else "tool_b"), {"query": f"q{i}"}


@dataclass
class Tally:
    """Counts tool runs and notes how many had run when the first loop was detected."""

    runs: Counter[str] = field(default_factory=Counter)
    at_first_detection: int | None = None
    shown: list[str] = field(default_factory=list)  # what the model was shown, in order

    def ran(self, name: str) -> None:
        self.runs[name] += 1

    def on_detect(self, detection: Detection) -> None:
        if detection.kind == "loop" and self.at_first_detection is None:
            self.at_first_detection = sum(self.runs.values())

    @property
    def total(self) -> int:
        return sum(self.runs.values())

    @property
    def after_detection(self) -> int | None:
        if self.at_first_detection is None:
            return None
        return self.total - self.at_first_detection

    def first_guard_text(self) -> str | None:
        """The first thing the model was shown that was not a tool's real result."""
        for text in self.shown:
            if text not in RESULTS:
                return text
        return None


def tools(tally: Tally) -> list[Any]:
    """The three plain tool functions of a stuck agent, counting into ``tally``."""

    def search(query: str) -> str:
        """Search the web for a query.

        Args:
            query: what to search for
        """
        tally.ran("search")
        return f"3 results for {query}"

    def tool_a(query: str) -> str:
        """Look something up.

        Args:
            query: what to look up
        """
        tally.ran("tool_a")
        return "nothing new"

    def tool_b(query: str) -> str:
        """Look something else up.

        Args:
            query: what to look up
        """
        tally.ran("tool_b")
        return "nothing new"

    return [search, tool_a, tool_b]


@dataclass
class Behaviour:
    """What one stuck agent did under one action: the row of a docs table."""

    tool_runs: int
    after_first_detection: int | None
    model_turns: int
    ended: str
    model_shown: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(framework: str, action: str, variant: str, measured: Behaviour) -> None:
    """Compare ``measured`` with the recorded behaviour (or record it, see the module doc)."""
    key = f"{action}/{variant}"
    with _lock:
        data = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
        if os.environ.get("FUZE_RECORD_BEHAVIOUR"):
            data.setdefault(framework, {})[key] = measured.as_dict()
            data[framework] = dict(sorted(data[framework].items()))
            RECORD.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            return
    recorded = data.get(framework, {}).get(key)
    assert recorded == measured.as_dict(), (
        f"{framework} {key} behaved differently from {RECORD.name}: {measured.as_dict()} "
        f"(recorded: {recorded}). If the change is intended, run the framework tests with "
        "FUZE_RECORD_BEHAVIOUR=1, then python scripts/gen_framework_docs.py"
    )


def short(text: Any, limit: int = 120) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"



def check_run(
    framework: str, action: str, variant: str, tally: Tally, *, shown: list[str], turns: int,
    ended: str,
) -> None:
    """Check one stuck run against the record: the tool runs ``tally`` counted, the model turns,
    how the run ended and the first text of the guard's the model was shown."""
    tally.shown = shown
    guard_text = tally.first_guard_text()
    check(framework, action, variant, Behaviour(
        tool_runs=tally.total,
        after_first_detection=tally.after_detection,
        model_turns=turns,
        ended=ended,
        model_shown=None if guard_text is None else short(guard_text),
    ))

def side_example(marker: str) -> tuple[str, str]:
    """The ```py example of docs/frameworks.md whose first line is ``marker`` (one that needs a
    framework from another environment) and the ```text output shown after it."""
    page = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    start = page.index(f"```py\n{marker}\n") + len("```py\n")
    end = page.index("\n```\n", start)
    out_start = page.index("```text\n", end) + len("```text\n")
    out_end = page.index("\n```", out_start)
    assert not page[end + 5 : page.index("```text\n", end)].strip(), "the output must follow"
    return page[start:end] + "\n", page[out_start:out_end]


def run_stuck(
    build: Callable[[str, str, Tally], tuple[Any, Any]], run: Callable[..., tuple[str, Any]],
    action: str, variant: str, **run_options: Any,
) -> tuple[Tally, Any, str, Any]:
    """A framework's stuck agent, set up and run once: ``build(action, variant, tally)`` gives the
    agent and its scripted model, ``run(agent, **run_options)`` how the run ended and what it
    returned or raised. Returns the tally, the model, how it ended and that result."""
    tally = Tally()
    agent, model = build(action, variant, tally)
    ended, result = run(agent, **run_options)
    return tally, model, ended, result
