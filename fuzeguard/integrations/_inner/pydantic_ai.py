"""Pydantic AI: an agent that a tool runs (a sub-agent used as a tool) without ``LoopGuard`` of
its own, found out by the outer agent's ``LoopGuard`` and said once (it cannot be guarded from
outside).

Pydantic AI gives a capability no hook into another agent: an agent run inside a tool function
(``await inner.run(..., usage=ctx.usage)``, Pydantic AI's way to delegate) calls its tools where
the outer capability never sees them. What the outer capability does see is the run's usage:
the inner run adds its model requests to it. So each tool call the capability lets run is
watched (``watching``): when the run's requests grew during the call and no guarded agent
started inside it (``LoopGuard.wrap_run`` and ``loop_guard``'s calls report themselves through
``guarded_here``), the tool ran an unguarded agent, and ``fuzeguard.inner_agent_unguarded`` says
so once per tool, with the fix: give the inner agent ``capabilities=[LoopGuard()]`` (its run is
then a child run of the outer one). An inner agent run without ``usage=ctx.usage`` leaves no
trace in the outer run: nothing can be said about it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fuzeguard._private.publish.log import emit
from fuzeguard.integrations._shared.calls import Once

# The tool call under way in this context, as a box counting the guarded agents started in it.
_watch: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "fuzeguard_pydantic_ai_tool", default=None
)


def guarded_here() -> None:
    """A guarded agent (or a call of a guarded toolset) starts here: not an unguarded one."""
    box = _watch.get()
    if box is not None:
        box[0] += 1


class InnerAgents:
    """Watches the tool calls of one ``LoopGuard`` for agents they run unguarded."""

    def __init__(self) -> None:
        self._said = Once()

    @contextmanager
    def watching(self, name: str, usage: Any) -> Iterator[None]:
        """Inside: the call of tool ``name``; ``usage`` is the run's usage object."""
        before = getattr(usage, "requests", None)
        box = [0]
        token = _watch.set(box)
        try:
            yield
        finally:
            _watch.reset(token)
            after = getattr(usage, "requests", None)
            if (isinstance(before, int) and isinstance(after, int) and after > before
                    and not box[0] and self._said.first(name)):
                emit("warning", "fuzeguard.inner_agent_unguarded", fn=name, requests=after - before,
                     message=f"the tool {name!r} ran an agent that has no LoopGuard "
                     f"({after - before} model requests): fuzeguard does not see its tool calls, "
                     "and nothing ends its loops. Give that agent capabilities=[LoopGuard()]: its "
                     "run is then a child run of this one")
