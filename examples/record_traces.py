"""Record the example traces: four scripted agents, one trace each.

    python examples/record_traces.py                    # into ./recorded-traces/
    python examples/record_traces.py examples/traces    # re-record the committed examples

No model and no network: each "agent" is a script that calls guarded tools the way a stuck (or a
healthy) agent does. Every run is recorded with ``fuzeguard.run(..., trace=...)``; replay them with
``fuze replay examples/traces/`` (see ``examples/traces/README.md``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import fuzeguard
from fuzeguard import Config, LoopDetected, guard

HERE = Path(__file__).resolve().parent / "traces"
# What the agents run under: warn first, then answer for the tool, then end the run.
LIVE = Config.load(HERE / "live.toml")


@guard
def web_search(query: str) -> str:
    """Search the web (canned answers)."""
    if "laptop" in query:
        return "3 results: reviews.example/laptops, shop.example/laptops, forum.example/t/42"
    return f"No results found for {query!r}. Try fewer or different words."


@guard
def web_fetch(url: str) -> str:
    """Fetch a page (canned answer)."""
    return f"<html><h1>{url}</h1><p>The same five laptops as yesterday, same prices.</p></html>"


@guard(redact=["api_key"])
def job_status(job_id: str, api_key: str) -> dict[str, Any]:
    """Poll a build job; its answer changes, so polling it is progress, not a loop."""
    job_status.polls = getattr(job_status, "polls", 0) + 1  # type: ignore[attr-defined]
    state = "running" if job_status.polls < 6 else "done"  # type: ignore[attr-defined]
    return {"job": job_id, "state": state, "progress": min(job_status.polls * 20, 100),  # type: ignore[attr-defined]
            "request_id": f"req-{job_status.polls:04d}"}  # type: ignore[attr-defined]


@guard(cost=0.6)
def ask_model(prompt: str) -> str:
    """A sub-model call that costs money and keeps giving the same non-answer."""
    return "I am not sure what you mean. Could you rephrase the question with more detail?"


def stuck_search() -> None:
    """The model repeats one search until the guard answers for the tool, then ends the run."""
    for _ in range(8):
        web_search("cheapest flight to the moon")


def ping_pong() -> None:
    """The model alternates search and fetch, never using what it got (DeerFlow's cycle)."""
    for _ in range(8):
        web_search("best laptop 2026")
        web_fetch("https://reviews.example/laptops")


def polling() -> None:
    """A healthy run: the job's status changes on every poll until it is done."""
    for _ in range(6):
        job_status("build-7", api_key="sk-live-secret")
    web_search("release notes for build 7")


def spending() -> None:
    """The model keeps paying for rephrased questions that bring nothing new."""
    for n in range(12):
        ask_model(f"Question {n}: what does the error in build 7 mean?")


AGENTS = {"stuck_search": stuck_search, "ping_pong": ping_pong, "polling": polling,
          "spending": spending}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "recorded-traces")
    out.mkdir(parents=True, exist_ok=True)
    # Detections are also logged; the summary lines below are enough here.
    logging.getLogger("fuzeguard").setLevel(logging.CRITICAL)
    for name, agent in AGENTS.items():
        path = out / f"{name}.jsonl"
        path.unlink(missing_ok=True)
        try:
            with fuzeguard.run(name, config=LIVE, trace=str(path)) as run:
                agent()
        except LoopDetected as exc:
            ending = f"killed by {exc.detection.layer} at call {exc.detection.call_index}"
        else:
            ending = "finished"
        print(f"{path}: {run.stats().calls} calls, "
              f"{run.stats().detections} detections, {ending}")


if __name__ == "__main__":
    main()
