"""Run with CrewAI (see ``crewai_env.py``): a crew whose scripted LLM loops forever, under each
action, with ``LoopGuard`` hooks; writes what it measured to the JSON file named by
``sys.argv[1]``. Not a test module: ``test_integration_crewai.py`` runs it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Set before CrewAI is imported: no telemetry or trace export (there is no network here).
os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true",
                  CREWAI_TRACING_ENABLED="false")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool
from pydantic import Field

import fuzeguard
from fuzeguard.integrations.crewai import LoopGuard
from tests.helpers.stuck_agents import (
    ACTIONS,
    LEGIT_ANSWER,
    VARIANTS,
    Tally,
    check_model_calls_replayed,
    killed_runs,
    lookup,
    looped,
    model_loop_calls,
    script,
    tools,
)

WRAP_UP = "what I found before I was stopped, for"  # a request model's final answer after a kill
GUARD_TEXT = ("You called", "You are going", "You have", "The last", "Tool calls in this session")


class StuckLLM(BaseLLM):
    """A ReAct-style LLM (no function calling) that calls a tool every turn, following ``script``."""

    variant: str = "same"
    turns: int = 0
    shown: list[str] = Field(default_factory=list)

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> str:
        for message in messages if isinstance(messages, list) else [{"content": messages}]:
            text = str(message.get("content", ""))
            for marker in GUARD_TEXT:
                at = text.find(marker)
                if at >= 0 and text[at:] not in self.shown:
                    self.shown.append(text[at:])
        name, args = script(self.variant, self.turns)
        self.turns += 1
        return f"Thought: I should look this up\nAction: {name}\nAction Input: {json.dumps(args)}"

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return False

    def get_context_window_size(self) -> int:
        return 8192


def crew_run(action: str, variant: str) -> dict[str, Any]:
    tally = Tally()
    guard = LoopGuard(on_loop=ACTIONS[action], on_detect=tally.on_detect).register()
    llm = StuckLLM(model="stuck", variant=variant, shown=[])
    crew_tools = [tool(fn.__name__)(fn) for fn in tools(tally)]
    agent = Agent(role="shopper", goal="find a laptop", backstory="a careful shopper",
                  tools=crew_tools, llm=llm, verbose=False)
    task = Task(description="find me a laptop", expected_output="a laptop", agent=agent)
    try:
        with fuzeguard.run("task") as run:
            try:
                out = Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
                ended = ("kickoff returned the final answer" if str(out).startswith("Stopped:")
                         else f"kickoff returned after max_iter {agent.max_iter}")
            except Exception as exc:  # what CrewAI raises is what is measured
                ended = f"kickoff raised {type(exc).__name__}"
            calls = run.stats().calls
    finally:
        guard.unregister()
    return {"total": tally.total, "after": tally.after_detection, "turns": llm.turns,
            "ended": ended, "shown": llm.shown, "calls": calls}




class RequestLLM(BaseLLM):
    """A server's LLM (ReAct): a task "loop" searches for ever; any other task searches once, then
    answers with what it found."""

    shown: list[str] = Field(default_factory=list)

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> str:
        texts = [str(m.get("content", "")) for m in messages] if isinstance(messages, list) \
            else [str(messages)]
        self.shown.append("\n".join(texts))
        asked = "loop" if any("TASK loop" in t for t in texts) else next(
            t.split("TASK ")[1].split()[0] for t in texts if "TASK " in t)
        if texts[-1].startswith("[fuzeguard] Your tool calls were stopped"):
            return f"Thought: I must stop\nFinal Answer: {WRAP_UP} {asked}"
        if asked != "loop" and any("Observation:" in t or "3 results" in t for t in texts[2:]):
            return f"Thought: I now know the final answer\nFinal Answer: answer to {asked}"
        return 'Thought: I should look this up\nAction: search\nAction Input: {"query": "laptops"}'

    def supports_function_calling(self) -> bool:
        return False

    def supports_stop_words(self) -> bool:
        return False

    def get_context_window_size(self) -> int:
        return 8192


def plain_kickoff(**options: Any) -> dict[str, Any]:
    """A looping crew with only the hooks added, ended by ``crew.kickoff()`` itself: what it
    returned or raised, tool runs, and the LLM's calls."""
    tally = Tally()
    guard = LoopGuard(**options).register()
    crew, llm = request_crew("loop", tally)
    try:
        ended = kicked_off(crew)
    finally:
        guard.unregister()
    return {"ended": ended, "total": tally.total, "llm calls": len(llm.shown),
            "last asked": llm.shown[-1].splitlines()[-1]}


def kicked_off(crew: Crew) -> str:
    """How ``crew.kickoff()`` ended: what it returned, or what it raised."""
    try:
        return f"returned {crew.kickoff().raw}"
    except Exception as exc:
        return f"raised {type(exc).__name__}" + (
            " (a LoopDetected)" if isinstance(exc, fuzeguard.LoopDetected) else "")


def request_crew(text: str, tally: Tally) -> tuple[Crew, RequestLLM]:
    llm = RequestLLM(model="request", shown=[])
    crew_tools = [tool(fn.__name__)(fn) for fn in tools(tally)]
    agent = Agent(role="shopper", goal="answer", backstory="careful", tools=crew_tools, llm=llm,
                  verbose=False, max_iter=15)
    task = Task(description=f"TASK {text}", expected_output="an answer", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False), llm


def server() -> dict[str, Any]:
    """6 legitimate kickoffs and 1 looping one at once, in threads, with only the hooks added
    (no fuzeguard.run()); then a later one."""
    from concurrent.futures import ThreadPoolExecutor

    tally = Tally()
    guard = LoopGuard().register()

    def request(text: str) -> str:
        crew, _ = request_crew(text, tally)
        try:
            return str(crew.kickoff())
        except Exception as exc:
            return type(exc).__name__

    try:
        with ThreadPoolExecutor(7) as pool:
            answers = list(pool.map(request, [*(f"r{i}" for i in range(6)), "loop"]))
        later = request("later")
    finally:
        guard.unregister()
    return {"answers": answers, "later": later, "total": tally.total}


def with_kickoff(**options: Any) -> dict[str, Any]:
    """``guard.kickoff`` of a looping crew: what it returned, tool runs, what the LLM was shown."""
    tally = Tally()
    guard = LoopGuard(**options).register()
    crew, llm = request_crew("loop", tally)
    try:
        out = guard.kickoff(crew)
        ended = f"returned {str(out)[:48]}"
    except Exception as exc:
        ended = f"raised {type(exc).__name__}"
    finally:
        guard.unregister()
    return {"ended": ended, "total": tally.total, "shown": llm.shown}


def two_guards() -> dict[str, Any]:
    """Two guards registered: each call is judged once (the run's calls as with one guard)."""
    tally = Tally()
    first, second = LoopGuard().register(), LoopGuard().register()
    crew, _ = request_crew("loop", tally)
    try:
        with fuzeguard.run("t") as run:
            try:
                ended = f"returned {crew.kickoff().raw}"
            except Exception as exc:
                ended = f"raised {type(exc).__name__}"
            calls = run.stats().calls
    finally:
        first.unregister()
        second.unregister()
    return {"total": tally.total, "calls": calls, "ended": ended}


class ModelLoopLLM(StuckLLM):
    """A ReAct LLM that loops without a tool ever doing anything new (``model_loop``; one action
    a response, so ``batch`` asks for its two calls in turn); asked for a final answer, it answers
    ``WRAP_UP``."""

    kind: str = "unknown"

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> str:
        self.turns += 1
        last = str(messages[-1].get("content", "")) if isinstance(messages, list) else str(messages)
        if last.startswith("[fuzeguard] Your tool calls were stopped"):
            return f"Thought: I must stop\nFinal Answer: {WRAP_UP} model loop"
        if self.kind == "batch":
            name, args = [("tool_a", {"query": "laptops"}), ("tool_b", {"query": "laptops"})][
                (self.turns - 1) % 2]
        else:
            calls = model_loop_calls(self.kind, self.turns)
            if not calls:
                return f"Thought: I now know the final answer\nFinal Answer: {LEGIT_ANSWER}"
            (name, args), = calls
        return f"Thought: I should look this up\nAction: {name}\nAction Input: {json.dumps(args)}"


def model_loop_crew(kind: str, **options: Any) -> dict[str, Any]:
    """A crew whose LLM loops without a tool doing anything new, with only the hooks added: its
    output (or what it raised), the LLM calls, the tool runs, and the runs ended."""
    from structlog.testing import capture_logs

    tally = Tally()
    guard = LoopGuard(**options).register()
    llm = ModelLoopLLM(model="model-loop", kind=kind)
    crew_tools = [tool(fn.__name__)(fn) for fn in [*tools(tally), lookup]]
    agent = Agent(role="shopper", goal="find a laptop", backstory="a careful shopper",
                  tools=crew_tools, llm=llm, verbose=False, max_iter=30)
    task = Task(description="find me a laptop", expected_output="a laptop", agent=agent)
    try:
        with capture_logs() as logs:
            ended = kicked_off(Crew(agents=[agent], tasks=[task], verbose=False))
    finally:
        guard.unregister()
    return {"ended": ended, "llm calls": llm.turns, "runs": dict(tally.runs),
            "killed": killed_runs(logs), "looped": looped(logs),
            "limits": [[e["run_name"], e["call_index"]] for e in logs
                       if e["event"] == "fuzeguard.limit_reached"]}


def traced_model_loop() -> dict[str, Any]:
    """``model_loop_crew("unknown")`` traced: the model calls' run replayed as any run."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        os.environ["FUZE_TRACE"] = f"{folder}/"
        try:
            ended = model_loop_crew("unknown")["ended"]
            check_model_calls_replayed(Path(folder))
        except AssertionError as exc:
            return {"ended": ended, "replayed": f"failed: {exc}"}
        finally:
            del os.environ["FUZE_TRACE"]
    return {"ended": ended, "replayed": "the same kill"}


def refused_option() -> str:
    """What ``LoopGuard(max_model_calls=0)`` raises."""
    try:
        LoopGuard(max_model_calls=0)
    except ValueError as exc:
        return str(exc)
    return "accepted"


def extra() -> dict[str, Any]:
    return {
        "server": server(),
        "kickoff": with_kickoff(),
        "kickoff error": with_kickoff(exit_behavior="error"),
        "skip": with_kickoff(on_loop="skip"),
        "warn": with_kickoff(on_loop="warn"),
        "two guards": two_guards(),
        "plain kickoff": plain_kickoff(),
        "plain kickoff canned": plain_kickoff(wrap_up=False),
        "plain kickoff error": plain_kickoff(exit_behavior="error"),
        **{f"model loop {kind}": model_loop_crew(kind)
           for kind in ("unknown", "invalid", "batch", "legit")},
        "model loop limit": model_loop_crew("legit", max_model_calls=5),
        "model loop error": model_loop_crew("unknown", exit_behavior="error"),
        "model loop traced": traced_model_loop(),
        "max_model_calls=0": refused_option(),
    }


if __name__ == "__main__":
    measured: dict[str, Any] = {f"{a}/{v}": crew_run(a, v) for a in ACTIONS for v in VARIANTS}
    measured.update(extra())
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(measured, f)
