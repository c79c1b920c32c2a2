"""Run with Strands Agents (see ``strands_env.py``): the notes a run keeps for the model reaching
it (``notes_scenario.py``), and token metering with ``UsageMeter`` (totals, and ``max_cost``
without ``cost=``), all with scripted models; writes what it measured to the JSON file named by
``sys.argv[1]``. Not a test module: ``test_notes_to_model.py`` and ``test_metering.py`` run it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import AsyncGenerator
from typing import Any

from strands import Agent, tool
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard.integrations.strands import STATE_KEY, LoopGuard
from fuzeguard.integrations.strands_usage import UsageMeter
from fuzeguard.metering import Prices
from tests.helpers.notes_scenario import Script, lookup, scenario
from tests.helpers.strands_stuck import Scripted, _events, _results

# Tokens each scripted model turn reports (input, output), as in test_metering.py.
TURNS = [(120, 15), (180, 22), (260, 9), (300, 41)]
PRICES = Prices({"scripted-1": (2.0, 8.0)})


class Notes(Scripted):
    """Looks up the keys its prompt names, one a turn (``notes_scenario.Script``)."""

    def __init__(self, script: Script) -> None:
        self.script = script

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        prompt = next(b["text"] for m in messages if m["role"] == "user"
                      for b in m["content"] if "text" in b)
        key = self.script.next_key(prompt, _results(messages))
        for event in _events(None if key is None else ("lookup", {"key": key}), f"c-{key}", "done"):
            yield event


def notes() -> dict[str, Any]:
    script = Script()
    guard = LoopGuard()
    scenario(lambda prompt: Agent(model=Notes(script), tools=[tool(lookup)], hooks=[guard],
                                  callback_handler=None)(prompt))
    return {key: sorted(texts) for key, texts in script.read.items()}


class Metered(Scripted):
    """Looks up a new key each turn (``answer_at``: answers at that turn), reporting ``TURNS``'
    usage as Strands' ``metadata`` stream event."""

    def __init__(self, answer_at: int | None) -> None:
        self.answer_at, self.turns = answer_at, 0

    def get_config(self) -> Any:
        return {"model_id": "scripted-1"}

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        n = self.turns
        self.turns += 1
        i, o = TURNS[n % len(TURNS)]
        step = None if n == self.answer_at else ("lookup", {"key": f"k{n}"})
        *events, stop = _events(step, f"c{n}", "done")
        for event in events:
            yield event
        yield stop
        yield {"metadata": {"usage": {"inputTokens": i, "outputTokens": o, "totalTokens": i + o},
                            "metrics": {"latencyMs": 1}}}


def usage() -> dict[str, Any]:
    with fuzeguard.run() as run:
        result = Agent(model=Metered(len(TURNS) - 1), tools=[tool(lookup)],
                       hooks=[LoopGuard(), UsageMeter(prices=PRICES)], callback_handler=None)("go")
    stats = run.stats()
    own = result.metrics.accumulated_usage
    return {"tokens_in": stats.tokens_in, "tokens_out": stats.tokens_out, "cost": stats.cost,
            "own": {"in": own["inputTokens"], "out": own["outputTokens"]}}


def max_cost() -> dict[str, Any]:
    """No run opened by the application, no ``cost=``: the invocation's run (LoopGuard's)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fuze.toml")
        with open(path, "w", encoding="utf-8") as f:
            f.write("[defaults]\nmax_cost = 0.002\n")
        os.environ["FUZE_CONFIG"] = path
        model = Metered(None)
        try:
            result = Agent(model=model, tools=[tool(lookup)],
                           hooks=[LoopGuard(), UsageMeter(prices=PRICES)], callback_handler=None)("go")
        finally:
            del os.environ["FUZE_CONFIG"]
    error = result.state.get(STATE_KEY)
    return {"text": str(result).strip(), "turns": model.turns,
            "pattern": None if error is None else error.detection.pattern,
            "calls": None if error is None else error.stats.calls}


def main(out: str) -> None:
    with capture_logs():
        measured = {"notes": notes(), "usage": usage(), "max_cost": max_cost()}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(measured, f)


if __name__ == "__main__":
    main(sys.argv[1])
