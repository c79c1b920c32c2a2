"""What the framework tests share: tools that count their runs, a stuck model's script, and the
record of measured behaviour that the tables of ``docs/frameworks/`` are generated from.

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
    """Look up one laptop's specification.

    Args:
        index: which laptop (0 to 11)
    """
    return LAPTOPS[index]


def killed_runs(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The runs a kill ended, in captured ``logs``: (run name, the function it was judged on)."""
    return [(e["run_name"], e["fn"]) for e in logs if e["event"] == "fuzeguard.run_killed"]


def looped(logs: list[dict[str, Any]]) -> bool:
    """Whether captured ``logs`` hold any loop detected or run killed."""
    return any(e["event"] in ("fuzeguard.run_killed", "fuzeguard.loop_detected") for e in logs)


def limit_reached(logs: list[dict[str, Any]]) -> tuple[str, int]:
    """The one limit reached in captured ``logs``: the run's name, the call it stopped."""
    (limit,) = [e for e in logs if e["event"] == "fuzeguard.limit_reached"]
    return limit["run_name"], limit["call_index"]


def script(variant: str, i: int) -> tuple[str, dict[str, Any]]:
    """The ``i``-th (0-based) tool call of a stuck model: a tool name and its arguments."""
    if variant == "same":
        return "search", {"query": "laptops"}
    return ("tool_a" if i % 2 == 0 else "tool_b"), {"query": f"q{i}"}


LEGIT_TURNS = 12  # the tool turns of a legitimate run of ``model_loop_calls``
LEGIT_ANSWER = "12 laptops compared"


def model_loop_calls(kind: str, turn: int) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of the ``turn``-th (1-based) model call of a model that loops without a
    tool ever doing anything new: ``unknown`` asks for a tool the agent does not have,
    ``invalid`` for ``search`` with an argument it does not take, ``batch`` for the same two
    calls every turn; ``legit`` looks up a different laptop each turn, and after
    ``LEGIT_TURNS`` turns asks for none (it answers ``LEGIT_ANSWER``)."""
    if kind == "legit":
        return [("lookup", {"index": turn - 1})] if turn <= LEGIT_TURNS else []
    return {
        "unknown": [("web_browse", {"url": "https://shop.example/laptops"})],
        "invalid": [("search", {"terms": "laptops"})],
        "batch": [("tool_a", {"query": "laptops"}), ("tool_b", {"query": "laptops"})],
    }[kind]


def check_batch_ended(answer: str, calls: int, runs: dict[str, int]) -> None:
    """A ``model_loop_calls("batch")`` agent ended within 6 model calls with ``WRAP_UP``, its
    tools run 3 times each (the 3rd batch warned)."""
    assert answer == WRAP_UP and calls <= 6
    assert dict(runs) == {"tool_a": 3, "tool_b": 3}


def check_legit_answered(answer: str, calls: int, events: list[str]) -> None:
    """A ``model_loop_calls("legit")`` agent answered normally, no loop logged (``events``)."""
    assert answer == LEGIT_ANSWER and calls == LEGIT_TURNS + 1
    assert not [e for e in events if e in ("fuzeguard.run_killed", "fuzeguard.loop_detected")]


def check_model_loops(loop: Callable[..., tuple[Any, int, Any, list[dict[str, Any]]]],
                      run_name: str) -> None:
    """``loop(kind, **options)`` runs a ``model_loop_calls`` agent with only the integration
    added (its answer, model calls, the ``Tally``, the logs): a batch every turn ended
    (``check_batch_ended``), a legitimate run answered (``check_legit_answered``), and
    ``max_model_calls=5`` ending it at the 6th call, made as the final answer's, in the
    ``run_name`` model calls' run."""
    answer, calls, tally, _ = loop("batch")
    check_batch_ended(answer, calls, tally.runs)
    answer, calls, _, logs = loop("legit")
    check_legit_answered(answer, calls, [e["event"] for e in logs])
    answer, calls, _, logs = loop("legit", max_model_calls=5)
    assert answer == WRAP_UP and calls == 6
    assert limit_reached(logs) == (run_name, 6)


def check_model_calls_traced(tmp_path: Path, monkeypatch: Any,
                             ended: Callable[[], str]) -> list[dict[str, Any]]:
    """``ended()`` (a ``model_loop_calls("unknown")`` agent's final answer, ``WRAP_UP``), traced
    to a folder under ``tmp_path``: ``check_model_calls_replayed`` on it (its traced calls)."""
    folder = tmp_path / "traces"
    monkeypatch.setenv("FUZE_TRACE", f"{folder}/")
    assert ended() == WRAP_UP
    return check_model_calls_replayed(folder)


def check_model_calls_replayed(folder: Path) -> list[dict[str, Any]]:
    """The traces in ``folder`` of a ``model_loop_calls("unknown")`` run that was ended: its
    rejected model calls were traced (the third killed), and ``fuze replay`` finds the kill.
    The traced model calls."""
    import subprocess
    import sys

    lines = [json.loads(line) for path in folder.iterdir()
             for line in path.read_text(encoding="utf-8").splitlines()]
    model = [line for line in lines if line.get("fn") == "model.rejected"]
    assert [line["args"] for line in model] == [
        {"calls": ['web_browse({"url": "https://shop.example/laptops"})']}] * 3
    assert [line.get("result") for line in model[:2]] == [{"rejected": True}] * 2
    assert model[2]["detections"][0]["action"] == "kill"
    done = subprocess.run([sys.executable, "-m", "fuzeguard", "replay", str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert "model.rejected" in done.stdout and "dedup" in done.stdout, done.stdout + done.stderr
    return model


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
    """The ```py example of a page of docs/frameworks/ whose first line is ``marker`` (one that
    needs a framework from another environment) and the ```text output shown after it."""
    pages = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs" / "frameworks").glob("*.md"))]
    found = [page for page in pages if f"```py\n{marker}\n" in page]
    assert len(found) == 1, f"{len(found)} framework pages have an example that opens with {marker!r}"
    page = found[0]
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
