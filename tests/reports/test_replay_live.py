"""A trace recorded from a real guarded run replays to the same detections, at the same call
indices, as the live run: for every built-in layer (issue 4, "how it is judged").

Each scenario drives real guarded tools inside ``fuzeguard.run(..., trace=...)``, captures the
live detections, then replays the trace under the same config and compares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time

import fuzeguard
from fuzeguard import Config, LoopDetected, add_cost, guard
from fuzeguard._private.reports.replay import Replayer
from fuzeguard.layers import BUILTIN_LAYERS
from fuzeguard.testing import capture_detections

Found = tuple[int, str, str, str, int | None]


@dataclass(frozen=True)
class Scenario:
    name: str
    config: dict[str, Any]
    body: Callable[[fuzeguard.Run], None]
    frozen: bool = False
    run_settings: dict[str, Any] = field(default_factory=dict)


def _repeat_search(run: fuzeguard.Run) -> None:
    @guard
    def web_search(query: str) -> str:
        return f"results for {query}"

    for _ in range(8):
        web_search("same query")


def _poll_then_stuck(run: fuzeguard.Run) -> None:
    """A poll whose answer changes is progress; once it stops changing it is a loop."""
    states = iter(["queued", "running", "running", "running", "done", "done", "done", "done",
                   "done", "done"])

    @guard
    def get_job(job: str) -> dict[str, str]:
        return {"state": next(states), "request_id": str(id(object()))}

    for _ in range(10):
        get_job("job-1")


def _failing_tool(run: fuzeguard.Run) -> None:
    @guard
    def read_file(path: str) -> str:
        raise FileNotFoundError(path)

    for _ in range(6):
        try:
            read_file("missing.txt")
        except FileNotFoundError:
            pass


def _many_pages(run: fuzeguard.Run) -> None:
    @guard
    def fetch_page(n: int) -> str:
        return f"page {n}"

    for n in range(12):
        fetch_page(n)


def _code_options(run: fuzeguard.Run) -> None:
    """Settings given to guard() in code are recorded and applied again by replay."""

    @guard(on_loop="warn", max_iterations=3)
    def list_dir(path: str) -> list[str]:
        return [path, "a", "b"]

    for n in range(6):
        list_dir(f"/tmp/{n}")


def _errors(run: fuzeguard.Run) -> None:
    @guard
    def flaky(n: int) -> str:
        if n % 3:
            raise TimeoutError(f"attempt {n}")
        return "ok"

    for n in range(10):
        try:
            flaky(n)
        except TimeoutError:
            pass


def _costly(run: fuzeguard.Run) -> None:
    @guard(cost=0.5)
    def llm(prompt: str) -> str:
        add_cost(0.25)
        return prompt.upper()

    for n in range(10):
        llm(f"step {n}")


def _cost_outside_calls(run: fuzeguard.Run) -> None:
    """add_cost() between calls (the model's own tokens) counts toward max_cost."""

    @guard
    def tool(n: int) -> int:
        return n

    for n in range(10):
        add_cost(1.0)
        tool(n)


def _slow(run: fuzeguard.Run) -> None:
    @guard
    def crawl(url: str) -> str:
        return url

    with freeze_time("2026-01-01 00:00:00") as clock:
        run._start = run._now()
        for n in range(10):
            crawl(f"https://example.com/{n}")
            clock.tick(7)


def _turns(run: fuzeguard.Run) -> None:
    @guard
    def step(n: int) -> int:
        return n

    for turn in range(3):
        for n in range(3 + turn):
            step(turn * 10 + n)
        run.end_turn()


def _reset(run: fuzeguard.Run) -> None:
    """run.reset() clears counters; replay sees the reset and does the same."""

    @guard
    def tool(n: int) -> int:
        return n

    for n in range(4):
        tool(n)
    run.reset()
    for n in range(6):
        tool(n)


def _skip_ladder(run: fuzeguard.Run) -> None:
    """A skipped call is not executed, live or replayed; the ladder steps the same way."""

    @guard(on_loop=["warn", "skip", "skip", "kill"])
    def web_search(query: str) -> str:
        return "nothing new"

    for _ in range(9):
        web_search("stuck")


def _parallel_ladder(run: fuzeguard.Run) -> None:
    """Three identical calls per marked turn: the ladder steps once per turn, live or replayed."""

    @guard(on_loop=["warn", "skip", "kill"])
    def web_search(query: str) -> str:
        return "nothing new"

    for _ in range(5):
        run.end_turn()
        for _ in range(3):
            web_search("stuck")


def _closed_stream(run: fuzeguard.Run) -> None:
    """A generator closed early leaves no record live; its trace line says so."""

    @guard
    def stream(query: str) -> Any:
        yield from ("a", "b", "c")

    for n in range(8):
        gen = stream(f"q{n}")
        if n % 2:
            list(gen)
        else:
            next(gen)
            gen.close()


def _observe(run: fuzeguard.Run) -> None:
    @guard
    def web_search(query: str) -> str:
        return "same"

    for _ in range(7):
        web_search("q")


def _ping_pong(run: fuzeguard.Run) -> None:
    """DeerFlow cycle layer: A-B ping-pong that no single-name counter trips."""

    @guard
    def web_search(query: str) -> str:
        return "3 results: reviews.example/laptops, shop.example, forum.example"

    @guard
    def web_fetch(url: str) -> str:
        return "<html>the same five laptops as yesterday</html>"

    for _ in range(6):
        web_search("laptop reviews")
        web_fetch("https://reviews.example/laptops")


def _three_cycle(run: fuzeguard.Run) -> None:
    """DeerFlow cycle layer: A-B-C-A-B-C with changing arguments, judged over tool names."""

    @guard
    def plan(step: int) -> str:
        return "plan: search, read, summarise"

    @guard
    def search(step: int) -> str:
        return "nothing found"

    @guard
    def read(step: int) -> str:
        return "empty"

    for step in range(6):
        plan(step)
        search(step)
        read(step)


def _same_answer_new_questions(run: fuzeguard.Run) -> None:
    """Fuze layer 4: different inputs, same output."""

    @guard
    def web_search(query: str) -> str:
        return "No results found for your query. Try again later with other words please."

    for n in range(8):
        web_search(f"laptop reviews page {n}")


def _spending_on_nothing(run: fuzeguard.Run) -> None:
    """Fuze layer 3: spending fast while producing nothing new."""

    @guard(cost=0.4)
    def ask_model(prompt: str) -> str:
        return "I am not sure. Could you rephrase the question so that I can help you better?"

    for n in range(8):
        ask_model(f"attempt {n}: what is the answer?")


def _spending_per_minute(run: fuzeguard.Run) -> None:
    @guard(cost=2.0)
    def ask_model(prompt: str) -> str:
        return "I am not sure. Could you rephrase the question so that I can help you better?"

    with freeze_time("2026-01-01 00:00:00") as clock:
        run._start = run._now()
        for n in range(8):
            ask_model(f"attempt {n}")
            clock.tick(3)


def _rephrased(run: fuzeguard.Run) -> None:
    """Ralph fuzzy ratio: rephrased requests that keep getting the same answer."""

    @guard
    def web_search(query: str) -> str:
        return "Top pick: the Example Book 14, for its keyboard and battery life in 2026."

    for query in ["best laptop for programming 2026", "best laptops for programming 2026",
                  "the best laptop for programming 2026", "best laptop for programming in 2026",
                  "best laptop for programmers 2026", "best laptop for coding 2026"]:
        web_search(query)


def _chanting(run: fuzeguard.Run) -> None:
    """Fuze layer 5: one output that repeats the same passage over and over."""

    @guard
    def summarise(doc: str) -> str:
        return "The answer is in the appendix of the report. " * 12

    @guard
    def lookup(key: str) -> str:
        return f"value of {key}"

    for n in range(3):
        lookup(f"k{n}")
        summarise(f"doc {n}")
        summarise(f"doc {n}, shorter please")


def _same_output_two_tools(run: fuzeguard.Run) -> None:
    """Fuze layer 5: two tools bouncing near-identical outputs."""

    @guard
    def read_page(url: str) -> str:
        return f"Welcome to the shop. Our laptops ship in two days. Page: {url[-1]}."

    @guard
    def read_cache(key: str) -> str:
        return f"Welcome to the shop. Our laptops ship in two days. Page: {key[-1]}!"

    for n in range(4):
        read_page(f"https://shop.example/{n}")
        read_cache(f"page-{n}")


def _chanting_stream(run: fuzeguard.Run) -> None:
    """A streamed output that starts chanting is caught mid-stream; the trace keeps its chunks."""

    @guard
    def generate(prompt: str) -> Any:
        yield "Here is the plan. "
        for _ in range(15):
            yield "We will check the logs again tomorrow. "
        yield "Done."

    for n in range(3):
        text = "".join(generate(f"prompt {n}"))
        assert text


# Pages that keep bringing new content earn the result-aware iteration cap's waiver; these
# scenarios are about the cap itself.
PLAIN_CAP = {"loop_detection": {"result_aware": False}}

SCENARIOS: dict[str, list[Scenario]] = {
    "iterations": [
        Scenario("cap", {"defaults": {"max_iterations": 5}, **PLAIN_CAP}, _many_pages),
        Scenario("ladder", {"defaults": {"max_iterations": 4, "on_loop": ["warn", "skip", "kill"]},
                            **PLAIN_CAP}, _many_pages),
        Scenario("code options", {}, _code_options),
        Scenario("reset", {"defaults": {"max_iterations": 5}, **PLAIN_CAP}, _reset),
        Scenario("closed stream", {"defaults": {"max_iterations": 5}}, _closed_stream),
    ],
    "dedup": [
        Scenario("repeat", {}, _repeat_search),
        Scenario("result aware poll", {}, _poll_then_stuck),
        Scenario("plain Fuze counting", {"loop_detection": {"result_aware": False}},
                 _poll_then_stuck),
        Scenario("errors", {"defaults": {"on_loop": "warn"}}, _failing_tool),
        Scenario("skip ladder", {}, _skip_ladder),
        Scenario("parallel calls, one step per turn", {}, _parallel_ladder),
        Scenario("observe", {"defaults": {"enabled": "observe"}}, _observe),
    ],
    "cycle": [
        Scenario("ping-pong", {"defaults": {"on_loop": "warn"}}, _ping_pong),
        Scenario("three calls over names", {"defaults": {"on_loop": ["warn", "skip", "kill"]}},
                 _three_cycle),
    ],
    "progress": [
        Scenario("same output", {"defaults": {"on_loop": ["warn", "kill"]}},
                 _same_answer_new_questions),
    ],
    "cost_velocity": [
        Scenario("per window",
                 {"defaults": {"on_loop": "warn"},
                  "loop_detection": {"cost_velocity_threshold": 1.5}},
                 _spending_on_nothing),
        Scenario("per minute",
                 {"defaults": {"on_loop": "warn"},
                  "loop_detection": {"cost_velocity_per_minute": 20.0}},
                 _spending_per_minute),
    ],
    "semantic": [
        Scenario("rephrased requests",
                 {"defaults": {"on_loop": "warn", "layers": ["semantic", "limits"]}}, _rephrased),
        Scenario("chanting output",
                 {"defaults": {"on_loop": "warn", "layers": ["semantic"]}}, _chanting),
        Scenario("chanting stream, warned",
                 {"defaults": {"on_loop": "warn", "layers": ["semantic"]}}, _chanting_stream),
        Scenario("chanting stream, skipped then killed",
                 {"defaults": {"on_loop": ["skip", "kill"], "layers": ["semantic"]}},
                 _chanting_stream),
        Scenario("two tools, one output",
                 {"defaults": {"on_loop": "warn", "layers": ["semantic", "dedup"]}},
                 _same_output_two_tools),
    ],
    "limits": [
        Scenario("max_calls", {"defaults": {"max_calls": 7}}, _many_pages),
        Scenario("max_errors", {"defaults": {"max_errors": 4}}, _errors),
        Scenario("max_consecutive_errors", {"defaults": {"max_consecutive_errors": 2}}, _errors),
        Scenario("max_cost", {"defaults": {"max_cost": 3.0}}, _costly),
        Scenario("max_cost outside calls", {"defaults": {"max_cost": 4.5}}, _cost_outside_calls),
        Scenario("max_duration", {"defaults": {"max_duration": "30s"}}, _slow),
        Scenario("max_calls_per_turn", {"defaults": {"max_calls_per_turn": 4}}, _turns),
        Scenario("run settings in code", {}, _many_pages, run_settings={"max_calls": 5}),
    ],
}


def _cases() -> list[Any]:
    return [
        pytest.param(layer, scenario, id=f"{layer}-{scenario.name}")
        for layer, scenarios in SCENARIOS.items()
        for scenario in scenarios
    ]


def _live(scenario: Scenario, config: Config, trace: Path) -> list[Found]:
    with capture_detections() as found:
        try:
            with fuzeguard.run("live", config=config, trace=str(trace),
                               **scenario.run_settings) as run:
                scenario.body(run)
        except LoopDetected:
            pass
    return [(d.call_index, d.fn, d.layer, d.action, d.count) for d in found]


def _replayed(config: Config, trace: Path) -> tuple[list[Found], list[int]]:
    """Replayed detections (with the run's call index) and their positions in the trace."""
    found: list[Found] = []
    positions: list[int] = []
    summary = Replayer(config).replay_file(str(trace))
    assert summary.problems == []
    for item in summary.detections:
        d = item.detection
        found.append((d.call_index, d.fn, d.layer, d.action, d.count))
        positions.append(item.call)
    return found, positions


def test_every_builtin_layer_has_a_live_versus_replay_scenario() -> None:
    """Issue 4: replay equivalence is tested for every layer, including ones added later."""
    assert sorted(BUILTIN_LAYERS) == sorted(SCENARIOS)


@pytest.mark.parametrize(("layer", "scenario"), _cases())
def test_replayed_trace_gives_the_live_detections_at_the_same_call_indices(
    layer: str, scenario: Scenario, tmp_path: Path
) -> None:
    config = Config.from_dict(scenario.config)
    trace = tmp_path / "run.jsonl"
    live = _live(scenario, config, trace)
    assert any(found[2] == layer for found in live), f"the scenario never fires {layer}: {live}"
    replayed, positions = _replayed(config, trace)
    assert replayed == live
    if scenario.body is not _reset:  # a reset restarts the run's call numbering, not the trace's
        assert positions == [found[0] for found in live]
