"""The scenario the notes-to-the-model tests play in every framework (``test_notes_to_model.py``,
and in their own environments ``strands_extras.py`` and ``crewai_extras.py``): see
``test_notes_to_model.py``'s docstring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from structlog.testing import capture_logs

import fuzeguard

FIRST = "look up k1 k2 k3 k4 k5"
SECOND = "look up k6"
WARNING = "50% of the call budget used (2 of 4 calls): wrap up"
NOTE = "Resumed with two more calls: look up k6 only, then answer."


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


class Script:
    """What the scripted model does, and what it read of the tools' results.

    The prompt lists the keys to look up; the model looks up the next one that has no result
    yet in the request, one a turn, then answers. ``read`` keeps every tool result text it was
    shown, by its key (a result shown again in a later request's history is the same text)."""

    def __init__(self) -> None:
        self.read: dict[str, set[str]] = {}

    def next_key(self, prompt: str, results: list[str]) -> str | None:
        keys = prompt.split()[2:]
        for text in results:
            for key in keys:
                if f"value of {key}" in text:
                    self.read.setdefault(key, set()).add(text)
        done = sum(1 for key in keys if any(f"value of {key}" in t for t in results))
        return keys[done] if done < len(keys) else None

    def check(self) -> None:
        """The warning was read once, with k2's result; the note once, with k6's."""
        texts = [text for found in self.read.values() for text in found]
        assert sum(text.count(WARNING) for text in texts) == 1, self.read
        assert sum(text.count(NOTE) for text in texts) == 1, self.read
        assert any(WARNING in text for text in self.read["k2"])
        assert any(NOTE in text for text in self.read["k6"])


def scenario(invoke: Callable[[str], Any], tool: str = "lookup") -> None:
    """Run the two invocations in one run, resumed in between (see the module docstring)."""
    with capture_logs(), fuzeguard.run("notes", max_calls=4, warn_at=[0.5]) as run:
        invoke(FIRST)
        assert run.killed is not None and run.killed.pattern == "max_calls"
        run.resume(extra_calls=2, note=NOTE)
        invoke(SECOND)
        assert run.killed is None
        assert run.notes() == []  # every note went to the model
    assert run.stats().calls_by_fn == {tool: 5}
