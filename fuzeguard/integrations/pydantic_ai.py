"""Pydantic AI: ``LoopGuardToolset``, a ``WrapperToolset`` that guards every tool of a toolset.

``Agent(model, toolsets=[loop_guard(FunctionToolset([search, fetch]), on_loop="skip")])``: each
call of a tool of the wrapped toolset is judged before it runs (the tools are not touched). A skip
returns the detection's message as the tool's result, which the model reads; a kill raises
``LoopDetected``, which Pydantic AI lets end ``agent.run()`` / ``run_sync()`` (only ``ModelRetry``
goes back to the model). Calls are judged in the current ``fuzeguard.run()``.

Install with ``pip install 'fuzeguard[pydantic-ai]'``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard._private.run import current_run
from fuzeguard.integrations._calls import ToolCalls

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import ToolOptions


@dataclass
class LoopGuardToolset(WrapperToolset[Any]):
    """Guard every tool of ``wrapped`` against loops; build it with ``loop_guard()``."""

    calls: ToolCalls = field(default_factory=ToolCalls)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        outcome, result = await self.calls.acall(
            name, tool_args, lambda: self.wrapped.call_tool(name, tool_args, ctx, tool)
        )
        if outcome.runs:
            return result
        if outcome.skipped is not None:
            return outcome.skipped.value
        assert outcome.killed is not None
        raise LoopDetected(outcome.killed, current_run().stats())


def loop_guard(toolset: AbstractToolset[Any], **options: Unpack[ToolOptions]) -> LoopGuardToolset:
    """Wrap ``toolset`` so that every call of its tools is guarded. Options are those of
    ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each tool by its name.
    Don't also ``guard()`` the tools' functions: each call would count twice."""
    return LoopGuardToolset(toolset, ToolCalls(**options))
