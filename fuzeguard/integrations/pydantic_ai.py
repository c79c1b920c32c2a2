"""Pydantic AI: ``LoopGuard``, a capability that guards every tool of an agent, and
``loop_guard()``, a ``WrapperToolset`` that guards the tools of one toolset.

``Agent(model, tools=[...], capabilities=[LoopGuard(on_loop="skip")])`` guards every tool the agent
has (``tools=``, ``@agent.tool`` / ``@agent.tool_plain``, ``toolsets=``), without touching them: the
capability wraps the run's assembled toolset. Each ``agent.run()`` / ``run_sync()`` is a run of its
own (``wrap_run``); a ``fuzeguard.run()`` current at the call wins, and an agent run inside a tool
of another gets a child run. A skip returns the detection's message as the tool's result; a warned
text result carries a short note for the model (any other result, a ``ToolReturn`` whose
``content`` the model reads after it); a kill ends the run with the final answer as its
``output`` (the model is not asked again), or raises ``LoopDetected`` with
``exit_behavior="error"``. To make the runs of one conversation one run:
``with conversations.run_for(conversation_id): agent.run_sync(...)``
(``fuzeguard.integrations.KeyedRuns``).

``Agent(model, toolsets=[loop_guard(FunctionToolset([search, fetch]), on_loop="skip")])`` guards one
toolset only: a kill raises ``LoopDetected`` (its stats are the killed run's), which Pydantic AI
lets end ``agent.run()`` (only ``ModelRetry`` goes back to the model). Without the capability, each
run is still judged in a run of its own (kept for the run's usage object).

Install with ``pip install 'fuzeguard[pydantic-ai]'``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext, ToolReturn
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.run import AgentRunResult
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard.integrations._calls import (
    ExitBehavior,
    Outcome,
    ToolCalls,
    final_answer,
    with_notes,
)
from fuzeguard.integrations._calls import exit_behavior as exit_behavior_of
from fuzeguard.integrations._runs import InvocationRuns, invocation, invocation_run, open_run, within

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import ToolOptions



@dataclass
class LoopGuardToolset(WrapperToolset[Any]):
    """Guard every tool of ``wrapped`` against loops; build it with ``loop_guard()``."""

    calls: ToolCalls = field(default_factory=ToolCalls)
    runs: InvocationRuns = field(default_factory=InvocationRuns)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if open_run() is None:  # neither the user's run nor LoopGuard's: the run's own
            with within(self.runs.kept(ctx.usage, "pydantic-ai-run")):
                return await self._call(name, tool_args, ctx, tool)
        return await self._call(name, tool_args, ctx, tool)

    async def _call(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        outcome, result = await self.calls.acall(
            name, tool_args, lambda: self.wrapped.call_tool(name, tool_args, ctx, tool)
        )
        if outcome.runs:
            return _noted(result, outcome)
        if outcome.skipped is not None:
            return outcome.skipped.value
        raise outcome.error()


def _noted(result: Any, outcome: Outcome) -> Any:
    """The tool's result with the notes for the model: appended to a text; for any other result,
    sent as the ``content`` of a ``ToolReturn``, which the model reads after the result (the
    result itself unchanged)."""
    if isinstance(result, str):
        return with_notes(result, outcome)
    notes = outcome.notes()
    if not notes:
        return result
    text = "\n\n".join(notes)
    if not isinstance(result, ToolReturn):
        return ToolReturn(result, content=text)
    content = result.content  # the tool's own ``ToolReturn``: a copy with the notes after its content
    if content is None:
        return dataclasses.replace(result, content=text)
    if isinstance(content, str):
        return dataclasses.replace(result, content=f"{content}\n\n{text}")
    return dataclasses.replace(result, content=[*content, text])


def loop_guard(toolset: AbstractToolset[Any], **options: Unpack[ToolOptions]) -> LoopGuardToolset:
    """Wrap ``toolset`` so that every call of its tools is guarded. Options are those of
    ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each tool by its name.
    Don't also ``guard()`` the tools' functions: each call would count twice."""
    return LoopGuardToolset(toolset, ToolCalls(**options))


class LoopGuard(AbstractCapability[Any]):
    """Guard every tool of a Pydantic AI agent: ``Agent(..., capabilities=[LoopGuard(...)])``.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name, plus ``exit_behavior`` (``"end"``: a kill ends the run with the final answer
    as its output; ``"error"``: it raises ``LoopDetected``). Don't also ``guard()`` the tools'
    functions or wrap them with ``loop_guard()``: each call would count twice.
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.calls = ToolCalls(**options)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return LoopGuardToolset(toolset, self.calls)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> AgentRunResult[Any]:
        with invocation("pydantic-ai-run"):
            return await handler()  # type: ignore[no-any-return]

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        run = invocation_run()
        if run is not None:
            run.end_turn()  # the ladder steps once per model turn
        return request_context

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        if isinstance(error, LoopDetected) and self.exit_behavior == "end":
            return AgentRunResult(output=final_answer(error.detection))
        raise error
