"""A server with only the integration added: what the framework tests of requests served
concurrently share.

Seven requests arrive at once at one agent in one process (asyncio tasks): six legitimate ones,
each searching "laptops" once before answering, and one whose model searches "laptops" forever.
Then one more legitimate request comes. With one run per invocation, the six are answered, the
looping one is ended within ``LOOP_LIMIT`` tool runs, and the later one is answered normally.
"""

from __future__ import annotations

from typing import Any

LEGIT = "find me one laptop"
LOOPING = "keep searching for laptops"
ANSWER = "Here is a laptop: the ThinkPad X1."
CONCURRENT = 6
LOOP_LIMIT = 5


def next_call(prompt: str, results_seen: int) -> tuple[str, dict[str, Any]] | None:
    """The scripted model's next tool call in a request (None: it answers ``ANSWER``)."""
    if prompt == LEGIT and results_seen >= 1:
        return None
    return "search", {"query": "laptops"}


def check_served(answers: list[str | None], later: str | None, tool_runs: int) -> None:
    """All six legitimate requests answered, the later one too, and the looping request ended
    within ``LOOP_LIMIT`` tool runs (``tool_runs`` counts every request's runs)."""
    assert len(answers) == CONCURRENT
    assert answers == [ANSWER] * CONCURRENT, answers
    assert later == ANSWER
    looping_runs = tool_runs - CONCURRENT - 1
    assert 1 <= looping_runs <= LOOP_LIMIT, f"the looping request ran {looping_runs} tools"
