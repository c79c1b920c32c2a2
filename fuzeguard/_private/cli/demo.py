"""``fuze demo``: a scripted agent gets stuck twice, and the guard catches it both times.

No model, no network, no API key: the "model" is a script that repeats a search until the guard
answers for the tool, then falls into a web_search <-> web_fetch ping-pong until the run is killed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any, Final, TextIO

import structlog.testing

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.guard import guard
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import run

LADDER: Final = ("warn", "skip", "kill")


def _tools(seen: list[Detection]) -> tuple[Callable[..., str], Callable[..., str]]:
    @guard(on_loop=LADDER, on_detect=seen.append)
    def web_search(query: str) -> str:
        """Search the web."""
        return "3 results: reviews.example/laptops, shop.example/laptops, forum.example/laptops"

    @guard(on_loop=LADDER, on_detect=seen.append)
    def web_fetch(url: str) -> str:
        """Fetch a page."""
        return "<html>Top laptops 2026: the same five models, reviewed in March.</html>"

    return web_search, web_fetch


def _script(skipped: Callable[[], bool]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stuck model: it only changes course when the guard answers in place of a tool. First it
    repeats one search; then it rephrases its search and re-opens the same page under new URLs,
    getting the same answers: a ping-pong that no identical-call check can see."""
    while not skipped():
        yield "web_search", {"query": "best laptop 2026"}
    lap = 0
    while True:
        lap += 1
        yield "web_search", {"query": ["laptop reviews", "laptop reviews 2026", "top laptops",
                                       "best laptops reviewed", "laptop rankings"][lap % 5]}
        yield "web_fetch", {"url": f"https://reviews.example/laptops?ref={lap}"}


class _Printer:
    def __init__(self, out: TextIO, color: bool) -> None:
        self.out = out
        self.color = color

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def line(self, text: str = "") -> None:
        print(text, file=self.out)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run the demo; returns the exit status (0)."""
    parser = argparse.ArgumentParser(prog="fuze demo", description=__doc__)
    parser.add_argument("--no-color", action="store_true", help="plain output")
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    p = _Printer(stream, color=not args.no_color and stream.isatty())

    seen: list[Detection] = []
    web_search, web_fetch = _tools(seen)
    tools = {"web_search": web_search, "web_fetch": web_fetch}
    last_skipped = [False]

    p.line(p.paint("fuzeguard demo", "1") + ": a scripted agent gets stuck, and the guard catches it.")
    p.line(f"Both tools are guarded with on_loop={LADDER!r}: warn first, then answer for the tool,")
    p.line("then end the run. Built-in default thresholds; no model, no network.")
    p.line("In (4/3) after a layer's name, 4 is what the layer counted (identical calls, laps of a")
    p.line("cycle, calls that brought nothing new) and 3 the threshold it counts against.\n")

    with structlog.testing.capture_logs() as logs, run("demo", config=Config()) as r:
        for step, (name, kwargs) in enumerate(_script(lambda: last_skipped[0]), start=1):
            shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
            before = len(seen)
            try:
                result = tools[name](**kwargs)
            except LoopDetected as exc:
                p.line(f"{step:>3}  {name}({shown})")
                _detections(p, seen[before:])
                p.line(p.paint(f"     ✖ run killed by the {exc.detection.layer} layer", "1;31"))
                p.line(f"       the agent is told: {exc.detection.message}")
                break
            skipped = any(d.action == "skip" for d in seen[before:])
            last_skipped[0] = skipped
            p.line(f"{step:>3}  {name}({shown})")
            _detections(p, seen[before:])
            if skipped:
                p.line(p.paint("     ↳ skipped: the tool did not run; the model reads instead:", "33"))
                p.line(f"       {result}")
            else:
                shown_result = result if len(result) <= 70 else result[:69] + "…"
                p.line(p.paint(f"     ↳ {shown_result}", "2"))
            if step > 60:  # the guard should have stopped it long before; never spin forever
                break
        stats = r.stats()

    events = sorted({entry["event"] for entry in logs})
    p.line("")
    p.line(p.paint("Run summary", "1"))
    p.line(f"  calls executed: {stats.calls} ({_counts(stats.calls_by_fn)}); answered by the "
           f"guard: {stats.skipped}; run killed: {'yes' if stats.killed else 'no'}")
    p.line(f"  detections by layer: {_counts(stats.detections_by_layer)}")
    p.line(f"  structured log events emitted: {', '.join(events)}")
    p.line("\nOn your own agent: decorate each tool function with @fuzeguard.guard and open a")
    p.line("fuzeguard.run() around each task; `fuze --help` and help(fuzeguard.guard) say more.")
    return 0


def _counts(by_name: Any) -> str:
    return ", ".join(f"{name} {n}" for name, n in by_name.items())


def _detections(p: _Printer, found: list[Detection]) -> None:
    for d in found:
        colour = {"warn": "33", "skip": "35", "kill": "31"}.get(d.action, "0")
        tag = p.paint(f"⚠ {d.action:<4}", "1;" + colour)
        count = f" ({d.count}/{d.threshold:g})" if d.count is not None and d.threshold else ""
        p.line(f"     {tag} {d.layer}{count}: {d.message}")
