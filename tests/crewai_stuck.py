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
from tests.stuck_agents import ACTIONS, VARIANTS, Tally, script, tools

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
        with fuzeguard.run("task"):
            Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
        ended = f"kickoff returned after max_iter {agent.max_iter}"
    except Exception as exc:  # what CrewAI raises is what is measured
        ended = f"kickoff raised {type(exc).__name__}"
    finally:
        guard.unregister()
    return {"total": tally.total, "after": tally.after_detection, "turns": llm.turns,
            "ended": ended, "shown": llm.shown}


if __name__ == "__main__":
    measured = {f"{a}/{v}": crew_run(a, v) for a in ACTIONS for v in VARIANTS}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(measured, f)
