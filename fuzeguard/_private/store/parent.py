"""A subagent's run in this process: its calls and cost count toward its parent's budgets too.

The run keeps its own state (and its own loops: the parent's history is the parent's); each call
it makes is first checked against the ``max_calls`` and ``max_cost`` of every run above it, then
counted in them, and the cost of its calls is added to theirs.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, ClassVar

from fuzeguard._private.meaning.records import Call, CallRecord, Decision, Detection
from fuzeguard._private.runs import state
from fuzeguard._private.runs.runstate import _REFUSED

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.protocols import RunInternals


def parent_limit(
    parent: str, what: str, used: float, limit: float, call: Call, run_id: str,
    own: bool = False,
) -> Detection:
    """The detection for a call refused because a parent run used up its budget; ``own``: the
    shared run's own budget, used up by other processes since this one last saw it."""
    who = f"The shared run {parent}" if own else f"The parent run {parent}"
    text = (f"{who} has made {used:g} tool calls" if what == "max_calls"
            else f"{who} has spent {used:g}")
    return Detection(
        layer="limits", fn=call.fn, kind="limit", count=int(used) + 1 if what == "max_calls" else None,
        threshold=limit, pattern=what if own else f"parent.{what}", run_id=run_id,
        call_index=call.index,
        action="kill",
        message=f"{text}, its limit ({what} = {limit:g}). Stop and report what you have so far.",
    )


def limit_decision(plan: Plan, call: Call, detection: Detection) -> Decision:
    observe = plan.observe or state.mode_override == "observe"
    return Decision("call" if observe else "kill", call.index, detection, (detection,))


class ParentStore:
    """A run with a parent run in this process (see the module docstring)."""

    asks: ClassVar[bool] = False  # judged under the locks of every run above: no one is asked

    def __init__(self, parent: RunInternals) -> None:
        self.ancestors: list[RunInternals] = []
        run: RunInternals | None = parent
        while run is not None:
            self.ancestors.append(run)
            store = run._store
            run = store.ancestors[0] if isinstance(store, ParentStore) else None

    def open(self, run: RunInternals) -> None:
        pass

    def _over(self, run: RunInternals, call: Call) -> Detection | None:
        for parent in self.ancestors:
            values = parent.config.settings_for(None)
            name = parent.name or parent.id
            max_calls, max_cost = values["max_calls"], values["max_cost"]
            if max_calls is not None and parent._calls >= max_calls:
                return parent_limit(name, "max_calls", parent._calls, max_calls, call, run.id)
            if max_cost is not None and parent._cost >= max_cost:
                return parent_limit(name, "max_cost", parent._cost, max_cost, call, run.id)
        return None

    def decide(
        self, run: RunInternals, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        with ExitStack() as locks:  # the run's lock, then its parent's, and so on up
            locks.enter_context(run._lock)
            for parent in self.ancestors:
                locks.enter_context(parent._lock)
            call, decision = run._judge(plan, args_fp, arguments, kind)
            if decision is _REFUSED:
                return call, decision  # a failing layer under fail_closed: RunInternals._decided refuses
            if decision.action in ("call", "warn"):
                over = self._over(run, call)
                if over is not None:
                    decision = limit_decision(plan, call, over)
            run._count(call, decision)
            if decision.action in ("call", "warn"):
                for parent in self.ancestors:
                    parent._calls += 1
            return call, decision

    async def adecide(
        self, run: RunInternals, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None = None
    ) -> tuple[Call, Decision]:
        return self.decide(run, plan, args_fp, arguments, kind)  # no round trip to await

    async def aflush(self, run: RunInternals, everything: bool = False) -> None:
        pass

    async def aopen(self, run: RunInternals) -> None:
        pass

    def flag(self, run: RunInternals, plan: Plan, call: Call, detection: Detection) -> Decision:
        with run._lock:
            decision = run._judge_flag(plan, call, detection)
            run._count_flag(decision)
            return decision

    def complete(self, run: RunInternals, record: CallRecord, plan: Plan, call: Call) -> None:
        with run._lock:
            run._book(record)
        if record.cost:
            self._spend(record.cost)

    def discard(self, run: RunInternals, index: int) -> None:
        with run._lock:
            run._drop(index)

    def add_cost(self, run: RunInternals, amount: float) -> None:
        with run._lock:
            run._cost += amount
        self._spend(amount)

    def _spend(self, amount: float) -> None:
        for parent in self.ancestors:
            with parent._lock:
                parent._spent(amount)

    def end_turn(self, run: RunInternals) -> None:
        with run._lock:
            run._end_turn()

    def reset(self, run: RunInternals) -> None:
        with run._lock:
            run._reset()

    def refresh(self, run: RunInternals) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {}

    def close(self, run: RunInternals) -> None:
        pass

    def end(self, run: RunInternals) -> None:
        pass

    def annotate(self, run: RunInternals, line: dict[str, Any]) -> None:
        pass
