"""Layer 1, ``iterations``: a hard cap on how often one function may run in a run (Fuze layer 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuzeguard._private.layer import LayerSettings, RunView, Section, setting
from fuzeguard._private.records import Call, Detection


@dataclass(frozen=True, slots=True)
class Iterations(LayerSettings):
    """Flag the call that would run a function more than ``max_iterations`` times in one run.

    Catches simple infinite loops and unbounded recursion whatever their arguments.
    """

    name: ClassVar[str] = "iterations"
    section: ClassVar[Section] = "defaults"

    max_iterations: int = setting(
        25,
        type="int",
        minimum=1,
        origin="Fuze layer 1",
        doc="How many times one function may run in one run; the next call is a loop.",
    )

    def check(self, run: RunView, call: Call) -> Detection | None:
        count = run.calls_of(call.fn) + 1
        if count <= self.max_iterations:
            return None
        return Detection(
            layer=self.name,
            fn=call.fn,
            count=count,
            threshold=self.max_iterations,
            pattern=call.fn,
            message=(
                f"You have already called `{call.fn}` {count - 1} times in this task, its limit "
                f"({self.max_iterations}). Stop calling it: use what you have, or try another approach."
            ),
        )
