"""Run with Strands Agents (see ``strands_env.py``): scripted models (a ``Model`` of their own, no
network) that loop forever under each action, requests served concurrently, an agent called as a
tool and a conversation keyed as one run, all with ``LoopGuard`` hooks; writes what it measured to
the JSON file named by ``sys.argv[1]``. Not a test module: ``test_integration_strands.py`` runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from strands import Agent, tool
from strands.models.model import Model
from structlog.testing import capture_logs

from fuzeguard.integrations._shared.runs import KeyedRuns
from fuzeguard.integrations.strands import STATE_KEY, LoopGuard
from tests.helpers.served import ANSWER, CONCURRENT, LEGIT, LOOPING, next_call
from tests.helpers.stuck_agents import (
    ACTIONS,
    LEGIT_ANSWER,
    VARIANTS,
    WRAP_UP,
    Tally,
    lookup,
    model_loop_calls,
    script,
    tools,
)

GIVE_UP = 25  # Strands has no turn limit of its own: the stuck model gives up after 25 turns


def _events(step: tuple[str, dict[str, Any]] | None, call_id: str,
            text: str = ANSWER) -> list[dict[str, Any]]:
    """A model turn as Strands stream events: a tool call, or a text answer."""
    if step is None:
        return [{"messageStart": {"role": "assistant"}},
                {"contentBlockDelta": {"delta": {"text": text}}}, {"contentBlockStop": {}},
                {"messageStop": {"stopReason": "end_turn"}}]
    name, args = step
    return [{"messageStart": {"role": "assistant"}},
            {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": call_id}}}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}},
            {"contentBlockStop": {}}, {"messageStop": {"stopReason": "tool_use"}}]


def _results(messages: list[Any]) -> list[str]:
    """The text of each tool result in ``messages``, as the model reads it."""
    return [" ".join(c.get("text", "") for c in block["toolResult"]["content"])
            for message in messages for block in message["content"] if "toolResult" in block]


class Scripted(Model):
    """The scripted models' common part (no configuration, no structured output)."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class Stuck(Scripted):
    """Calls a tool every turn, following ``script`` (until it gives up); keeps what it read."""

    def __init__(self, variant: str, wrap_up: str = "") -> None:
        self.variant, self.turns = variant, 0
        self.shown: list[str] = []
        self.wrap_up = wrap_up  # its answer when offered no tool (else it calls one again)
        self.asked = ""

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        self.shown.extend(_results(messages[-1:]))
        if not (args[0] if args else kwargs.get("tool_specs")):  # asked for a final answer
            self.asked = messages[-1]["content"][-1].get("text", "")
            if self.wrap_up:
                self.turns += 1
                for event in _events(None, "", self.wrap_up):
                    yield event
                return
        step = None if self.turns >= GIVE_UP else script(self.variant, self.turns)
        self.turns += step is not None
        for event in _events(step, f"c{self.turns}", "I give up."):
            yield event


class Served(Scripted):
    """The model of a served agent: each request follows ``served.next_call`` from its own
    messages (one model serves every request, as in a server)."""

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        start = max(i for i, m in enumerate(messages)
                    if m["role"] == "user" and any("text" in b for b in m["content"]))
        results = _results(messages[start:])
        await asyncio.sleep(0)  # let the other requests interleave
        for event in _events(next_call(messages[start]["content"][0]["text"], len(results)),
                             f"c{len(results)}"):
            yield event


def _agent(model: Model, tally: Tally, guard: LoopGuard, name: str = "shopper") -> Agent:
    return Agent(model=model, tools=[tool(f) for f in tools(tally)], hooks=[guard], name=name,
                 callback_handler=None)


def stuck(action: str, variant: str) -> dict[str, Any]:
    tally = Tally()
    model = Stuck(variant)
    agent = _agent(model, tally, LoopGuard(on_loop=ACTIONS[action], on_detect=tally.on_detect))
    result = agent("find me a laptop")
    text = str(result).strip()
    error = result.state.get(STATE_KEY)
    return {
        "total": tally.total, "after": tally.after_detection, "turns": model.turns,
        "ended": "final answer by the guard" if text.startswith("Stopped:")
        else f"the model gave up after {GIVE_UP} turns",
        "text": text, "shown": model.shown,
        "error": None if error is None else {
            "type": type(error).__name__, "layer": error.detection.layer,
            "calls": error.stats.calls, "killed": error.stats.killed,
        },
    }


def wrap_up(**options: Any) -> dict[str, Any]:
    """A stuck model that writes a final answer when asked for one after the kill."""
    tally = Tally()
    model = Stuck("same", wrap_up=WRAP_UP)
    result = _agent(model, tally, LoopGuard(on_loop="kill", **options))("find me a laptop")
    return {"text": str(result).strip(), "total": tally.total, "turns": model.turns,
            "asked": model.asked}


def served() -> dict[str, Any]:
    tally = Tally()
    model, guard = Served(), LoopGuard()

    async def ask(text: str) -> str:
        return str(await _agent(model, tally, guard).invoke_async(text)).strip()

    async def server() -> dict[str, Any]:
        answers = await asyncio.gather(*(ask(LEGIT) for _ in range(CONCURRENT)), ask(LOOPING))
        return {"answers": list(answers[:-1]), "looping": answers[-1], "later": await ask(LEGIT),
                "tool_runs": tally.total}

    return asyncio.run(server())


class Delegating(Scripted):
    """An outer agent's model: asks its ``researcher`` tool (an inner agent; its argument named
    ``argument``) once, then answers with what it got back."""

    def __init__(self, argument: str) -> None:
        self.argument = argument

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        results = _results(messages)
        step = None if results else ("researcher", {self.argument: "laptops"})
        for event in _events(step, "r1", results[-1] if results else ""):
            yield event


def _killed(logs: list[dict[str, Any]]) -> list[str]:
    """The names of the runs killed, in order."""
    return [e["run_name"] for e in logs if e["event"] == "fuzeguard.run_killed"]


def nested() -> dict[str, Any]:
    """An agent invoked inside a tool of another, both with the same guard."""
    tally = Tally()
    guard = LoopGuard()
    inner = _agent(Stuck("same"), tally, guard, name="researcher")

    @tool
    def researcher(request: str) -> str:
        """Research a question.

        Args:
            request: what to research
        """
        return str(inner(request)).strip()

    outer = Agent(model=Delegating("request"), tools=[researcher], hooks=[guard], name="boss",
                  callback_handler=None)
    with capture_logs() as logs:
        text = str(outer("find me a laptop")).strip()
    return {"text": text, "tool_runs": tally.total, "killed": _killed(logs)}


def nested_unguarded() -> dict[str, Any]:
    """An agent called as a tool (``as_tool()``) that has no hooks, its caller with a guard; then
    the same agent on its own."""
    tally = Tally()
    model = Stuck("same")
    inner = Agent(model=model, tools=[tool(f) for f in tools(tally)], name="researcher",
                  description="researches a question", callback_handler=None)

    outer = Agent(model=Delegating("input"), tools=[inner.as_tool()], hooks=[LoopGuard()],
                  name="boss", callback_handler=None)
    with capture_logs() as logs:
        text = str(outer("find me a laptop")).strip()
    guarded = tally.total
    model.turns = 0  # its script starts again
    with capture_logs() as alone:
        inner("find me a laptop")
    return {"text": text, "tool_runs": guarded, "alone": tally.total - guarded, "give_up": GIVE_UP,
            "alone_logged": len(alone), "killed": _killed(logs)}


def parallel() -> dict[str, Any]:
    """A model that sends the same search three times per turn, under the ladder."""
    tally = Tally()

    class Parallel(Scripted):
        turns = 0

        async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
            self.turns += 1
            yield {"messageStart": {"role": "assistant"}}
            for i in range(3):
                use = {"name": "search", "toolUseId": f"c{self.turns}-{i}"}
                yield {"contentBlockStart": {"start": {"toolUse": use}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": '{"query": "laptops"}'}}}}
                yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}

    model = Parallel()
    agent = _agent(model, tally, LoopGuard(on_loop=["warn", "skip", "kill"]))
    with capture_logs() as logs:
        text = str(agent("find me a laptop")).strip()
    return {"text": text, "tool_runs": tally.total, "turns": model.turns,
            "actions": [e["action"] for e in logs if e["event"] == "fuzeguard.loop_detected"]}


def conversation() -> list[str]:
    """Five requests of one conversation, keyed as one run, each searching "laptops" once."""
    tally = Tally()
    model, guard, conversations = Served(), LoopGuard(), KeyedRuns("chat")
    texts = []
    for _ in range(5):
        with conversations.run_for("thread-1"):
            texts.append(str(_agent(model, tally, guard)(LEGIT)).strip())
    return texts


class ModelLoop(Scripted):
    """Follows ``model_loop_calls``, reporting some token usage each turn; asked for a final
    answer (no tool offered), answers ``WRAP_UP``."""

    def __init__(self, kind: str) -> None:
        self.kind, self.turns = kind, 0

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        self.turns += 1
        offered = args[0] if args else kwargs.get("tool_specs")
        calls = model_loop_calls(self.kind, self.turns) if offered else []
        yield {"messageStart": {"role": "assistant"}}
        if not calls:
            yield {"contentBlockDelta": {"delta": {"text": LEGIT_ANSWER if offered else WRAP_UP}}}
            yield {"contentBlockStop": {}}
        for k, (name, args_) in enumerate(calls):
            use = {"name": name, "toolUseId": f"c{self.turns}-{k}"}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args_)}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if calls else "end_turn"}}
        yield {"metadata": {"usage": {"inputTokens": 90, "outputTokens": 10, "totalTokens": 100},
                            "metrics": {"latencyMs": 1}}}


def model_loop(kind: str, **options: Any) -> dict[str, Any]:
    """A model that loops without a tool ever doing anything new (``model_loop_calls``)."""
    tally = Tally()
    model = ModelLoop(kind)
    agent = Agent(model=model, tools=[tool(f) for f in [*tools(tally), lookup]],
                  hooks=[LoopGuard(**options)], name="shopper", callback_handler=None)
    with capture_logs() as logs:
        result = agent("find me a laptop")
    error = result.state.get(STATE_KEY)
    return {
        "text": str(result).strip(), "turns": model.turns, "tool_runs": dict(tally.runs),
        "killed": [[e["run_name"], e["fn"]] for e in logs if e["event"] == "fuzeguard.run_killed"],
        "detected": [e["event"] for e in logs if e["event"] in ("fuzeguard.run_killed",
                                                                 "fuzeguard.loop_detected")],
        "limits": [[e["run_name"], e["call_index"]] for e in logs
                   if e["event"] == "fuzeguard.limit_reached"],
        "error": None if error is None else [error.detection.fn, error.stats.cost],
    }


def traced_model_loop() -> str:
    """``model_loop("unknown")`` traced to a folder (``fuze replay`` reads it): the folder."""
    folder = Path.cwd() / "traces"
    os.environ["FUZE_TRACE"] = f"{folder}/"
    try:
        assert model_loop("unknown")["text"] == WRAP_UP
    finally:
        del os.environ["FUZE_TRACE"]
    return str(folder)


def main(out: str) -> None:
    with capture_logs():
        measured = {
            "stuck": {f"{a}/{v}": stuck(a, v) for a in ACTIONS for v in VARIANTS},
            "served": served(),
            "nested": nested(),
            "nested unguarded": nested_unguarded(),
            "conversation": conversation(),
            "parallel": parallel(),
            "wrap up": wrap_up(),
            "canned": wrap_up(wrap_up=False),
            "model loop": {kind: model_loop(kind) for kind in ("unknown", "invalid", "batch", "legit")},
            "max model calls": model_loop("legit", max_model_calls=5),
            "traced": traced_model_loop(),
        }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(measured, f)


if __name__ == "__main__":
    main(sys.argv[1])
