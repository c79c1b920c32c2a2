"""Run with CrewAI (see ``crewai_env.py``): the notes a run keeps for the model reaching it
(``notes_scenario.py``) with ``LoopGuard`` hooks and a scripted ReAct LLM; writes what it measured
to the JSON file named by ``sys.argv[1]``. Not a test module: ``test_notes_to_model.py`` runs it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# Set before CrewAI is imported: no telemetry or trace export (there is no network here).
os.environ.update(CREWAI_DISABLE_TELEMETRY="true", OTEL_SDK_DISABLED="true",
                  CREWAI_TRACING_ENABLED="false")

from crewai import Agent, Crew, Task
from crewai.tools import tool
from structlog.testing import capture_logs

from fuzeguard.integrations.crewai import LoopGuard
from tests.helpers.crewai_stuck import StuckLLM
from tests.helpers.notes_scenario import Script, lookup, scenario

script = Script()


class NotesLLM(StuckLLM):
    """A ReAct-style LLM that looks up the keys its task names, one a turn (``Script``)."""

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> str:
        texts = [str(m.get("content", "")) for m in messages] if isinstance(messages, list) \
            else [str(messages)]
        prompt = next(t[t.index("look up k"):].splitlines()[0] for t in texts if "look up k" in t)
        results = [part.split("\nThought:")[0] for t in texts for part in t.split("Observation:")[1:]]
        key = script.next_key(prompt, results)
        if key is None:
            return "Thought: I now know the final answer\nFinal Answer: done"
        return f"Thought: I should look this up\nAction: lookup\nAction Input: {json.dumps({'key': key})}"


def kickoff(prompt: str) -> None:
    agent = Agent(role="clerk", goal="look keys up", backstory="careful",
                  tools=[tool("lookup")(lookup)], llm=NotesLLM(model="notes"), verbose=False)
    task = Task(description=prompt, expected_output="the values", agent=agent)
    try:
        Crew(agents=[agent], tasks=[task], verbose=False).kickoff()
    except Exception:  # a kill ends the kickoff as CrewAI does: the scenario checks the run
        pass


def main(out: str) -> None:
    guard = LoopGuard().register()
    try:
        with capture_logs():
            scenario(kickoff)
    finally:
        guard.unregister()
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"notes": {key: sorted(texts) for key, texts in script.read.items()}}, f)


if __name__ == "__main__":
    main(sys.argv[1])
