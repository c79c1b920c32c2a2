"""A hand-written agent loop with plain ``guard()``: ``python examples/frameworks/plain.py``.

The "model" is a script that asks for the same search again and again; the guard warns, answers
for the tool, then ends the run.
"""

from _tool import search

import fuzeguard
from fuzeguard import LoopDetected, guard

guarded_search = guard(search, on_loop=["warn", "skip", "kill"])

with fuzeguard.run("plain-agent") as run:
    try:
        for turn in range(1, 11):
            answer = guarded_search("laptops")  # what the model asked for this turn
            print(f"turn {turn}: {answer}")
    except LoopDetected as exc:
        print(f"stopped at call {exc.detection.call_index} by {exc.detection.layer}")
print(run.stats())
