"""Pydantic AI: ``LoopGuard``, a capability that guards every tool of an agent, and
``loop_guard()``, a ``WrapperToolset`` that guards the tools of one toolset.

``Agent(model, tools=[...], capabilities=[LoopGuard(on_loop="skip")])`` guards every tool the agent
has (``tools=``, ``@agent.tool`` / ``@agent.tool_plain``, ``toolsets=``), without touching them: the
capability wraps the run's assembled toolset. Each ``agent.run()`` / ``run_sync()`` is a run of its
own (``wrap_run``); a ``fuzeguard.run()`` current at the call wins, and an agent run inside a tool
of another gets a child run. A skip returns the detection's message as the tool's result; a warned
text result carries a short note for the model (any other result, a ``ToolReturn`` whose
``content`` the model reads after it); a kill ends the run with a final answer as its
``output``: the model's own, asked once in one request without tools, with the detection's
message as the reason (``wrap_up=True``, the default, within ``wrap_up_timeout`` seconds), or the
canned one (``wrap_up=False``, or when the model fails, is late or asks for a tool again); no
tool runs after the kill. ``exit_behavior="error"`` raises ``LoopDetected`` instead. The
capability records each model response too (``_model_calls``): a model that keeps asking for a
tool the agent does not have, or that reaches ``max_model_calls`` (off by default), ends the run
the same way. To make the runs of one conversation one run:
``with conversations.run_for(conversation_id): agent.run_sync(...)``
(``fuzeguard.integrations.KeyedRuns``).

``Agent(model, toolsets=[loop_guard(FunctionToolset([search, fetch]), on_loop="skip")])`` guards one
toolset only: a kill raises ``LoopDetected`` (its stats are the killed run's), which Pydantic AI
lets end ``agent.run()`` (only ``ModelRetry`` goes back to the model). Without the capability, each
run is still judged in a run of its own (kept for the run's usage object).

Install with ``pip install 'fuzeguard[pydantic-ai]'``.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext, ToolReturn
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.run import AgentRunResult
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard.integrations._inner.pydantic_ai import InnerAgents, guarded_here
from fuzeguard.integrations._shared.calls import (
    ExitBehavior,
    GuardedTwice,
    Outcome,
    ToolCalls,
    guarded,
    stop_message,
    with_notes,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import exit_behavior as exit_behavior_of
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.runs import InvocationRuns, invocation, invocation_run, open_run, within
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions



@dataclass
class LoopGuardToolset(WrapperToolset[Any]):
    """Guard every tool of ``wrapped`` against loops; build it with ``loop_guard()``."""

    calls: ToolCalls = field(default_factory=ToolCalls)
    runs: InvocationRuns = field(default_factory=InvocationRuns)
    inner: InnerAgents = field(default_factory=InnerAgents)  # agents a tool runs unguarded

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        guarded_here()  # a tool of a guarded agent: an agent a tool of another runs is guarded
        if open_run() is None:  # neither the user's run nor LoopGuard's: the run's own
            with within(self.runs.kept(ctx.usage, "pydantic-ai-run")):
                return await self._call(name, tool_args, ctx, tool)
        return await self._call(name, tool_args, ctx, tool)

    async def _call(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if guarded(_function(tool)):
            # Judged once, by the function's own guard: its kill ends the run the same way.
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        with self.inner.watching(name, ctx.usage):
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
    tool by its name, plus ``exit_behavior`` (``"end"``: a kill ends the run with a final answer
    as its output; ``"error"``: it raises ``LoopDetected``), ``wrap_up`` and ``wrap_up_timeout``
    (whether that answer is the model's own, see the module docstring) and ``max_model_calls``.
    Don't also ``guard()`` the tools' functions or wrap them with ``loop_guard()``: each call
    would count twice.
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 wrap_up_timeout: float = DEFAULT_TIMEOUT, max_model_calls: int | None = None,
                 **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.wrap_up = WrapUp(wrap_up, wrap_up_timeout)
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)
        self._exchange: list[Any] = []  # the run's last model request and response (for_run)
        self._guarded_twice = GuardedTwice("the LoopGuard capability")
        self._inner = InnerAgents()

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        for name in _guarded_tools(toolset):  # said as the run starts, before any tool runs
            self._guarded_twice.say(name)
        return LoopGuardToolset(toolset, self.calls, inner=self._inner)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> AgentRunResult[Any]:
        guarded_here()
        with invocation("pydantic-ai-run"):
            return await handler()  # type: ignore[no-any-return]

    async def for_run(self, ctx: RunContext[Any]) -> LoopGuard:
        """A copy for one run, which keeps the run's last model exchange (for ``wrap_up``)."""
        mine = copy.copy(self)
        mine._exchange = []
        return mine

    async def before_model_request(self, ctx: RunContext[Any], request_context: Any) -> Any:
        run = invocation_run()
        if run is not None:
            run.end_turn()  # the ladder steps once per model turn
        messages = request_context.messages
        self._exchange = list(messages)
        current = open_run()
        if current is None:
            return request_context
        retried = _retried(messages, request_context.model_request_parameters.tool_defs)
        detection = self.model_calls.rejection(current, retried) if retried else None
        failure = _failed_output(messages)
        if detection is None and failure is not None:
            detection = self.model_calls.failed_output(current, failure)
        detection = detection or self.model_calls.over_limit(current)
        if detection is not None:  # ended by on_run_error, as a kill
            raise LoopDetected(detection, self.model_calls.run_of(current).stats())
        return request_context

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: Any,
                                  response: ModelResponse) -> ModelResponse:
        self._exchange = [*request_context.messages, response]
        run = open_run()
        if run is None:
            return response
        offered = set(request_context.model_request_parameters.tool_defs)
        calls = [(call.tool_name, call.args) for call in response.tool_calls]
        usage = getattr(response, "usage", None)
        detection = self.model_calls.record(
            run, calls, None if calls else response.text,
            rejected=any(name not in offered for name, _ in calls), final=not calls,
            tokens=getattr(usage, "total_tokens", None),
        )
        if detection is None:
            return response
        if self.exit_behavior == "error":
            raise LoopDetected(detection, self.model_calls.run_of(run).stats())
        # The looping response is dropped: the run ends with the final answer as its text.
        self._exchange = list(request_context.messages)
        return ModelResponse(parts=[TextPart(await self._final(ctx, detection))])

    async def _final(self, ctx: RunContext[Any], detection: Detection) -> str:
        """The final answer after a kill: the model's own (``wrap_up``) or the canned one."""
        history = self._exchange or ctx.messages
        return await self.wrap_up.afinal(detection, lambda: _ask_final(ctx, history, detection),
                                         _written)

    async def after_run(self, ctx: RunContext[Any], *, result: Any) -> Any:
        run = open_run()
        if run is not None:
            self.model_calls.close(run)
        return result

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        if not isinstance(error, LoopDetected) or self.exit_behavior != "end":
            raise error
        return AgentRunResult(output=await self._final(ctx, error.detection))


async def _ask_final(ctx: RunContext[Any], history: list[Any], detection: Detection) -> ModelResponse:
    """One model request without tools: the run's messages (``history``), the killed step's calls
    answered with the stop message (a provider refuses a call left unanswered), and the request
    for a final answer."""
    parts: list[Any] = []
    last = history[-1] if history else None
    if isinstance(last, ModelResponse):
        refused = stop_message(detection)
        parts = [ToolReturnPart(call.tool_name, refused, tool_call_id=call.tool_call_id)
                 for call in last.tool_calls]
    parts.append(UserPromptPart(wrap_up_request(detection)))
    model = ctx.model
    if not isinstance(model, Model):
        raise TypeError(f"a {type(model).__name__} takes no single request")
    settings: Any = ctx.model_settings if isinstance(ctx.model_settings, dict) else None
    parameters = ModelRequestParameters(function_tools=[], allow_text_output=True, output_mode="text")
    messages: list[Any] = [*history, ModelRequest(parts=parts)]
    prepare = getattr(model, "prepare_messages", None)
    if prepare is not None:  # Pydantic AI's own parts (a retry's feedback) in every model's shape
        messages = prepare(messages, parameters)
    return await model.request(messages, settings, parameters)


def _function(tool: Any) -> Any:
    """The function a function toolset's tool calls (its schema's; a combined toolset's tool is
    looked through), or None."""
    for _ in range(16):  # toolsets nest a few levels at most
        inner = getattr(tool, "source_tool", None)
        if inner is None:
            break
        tool = inner
    return getattr(getattr(getattr(tool, "call_func", None), "__self__", None), "function", None)


def _guarded_tools(toolset: Any) -> list[str]:
    """The names of the tools in ``toolset`` (combined and wrapped toolsets looked into) whose
    function has ``@guard``."""
    found: list[str] = []
    todo = [toolset]
    while todo and len(found) < 1024:
        current = todo.pop()
        todo.extend(getattr(current, "toolsets", ()) or ())
        wrapped = getattr(current, "wrapped", None)
        if wrapped is not None:
            todo.append(wrapped)
        tools = getattr(current, "tools", None)
        if isinstance(tools, dict):
            found += [name for name, tool in tools.items() if guarded(getattr(tool, "function", None))]
    return found


def _retried(messages: list[Any], offered: Any) -> list[tuple[str, Any]]:
    """The calls of the model's last response to tools it was ``offered`` that Pydantic AI sent
    back for a retry (invalid arguments), as the request now being made answers them (a call to
    a tool not offered was judged as rejected when the response came)."""
    if len(messages) < 2 or not isinstance(messages[-2], ModelResponse):
        return []
    asked = {call.tool_call_id: (call.tool_name, call.args) for call in messages[-2].tool_calls
             if call.tool_name in offered}
    return [asked[part.tool_call_id] for part in getattr(messages[-1], "parts", ())
            if getattr(part, "tool_call_id", None) in asked and (
                isinstance(part, RetryPromptPart)
                or getattr(part, "outcome", None) == "retried")]


def _failed_output(messages: list[Any]) -> Any:
    """How the model's last answer failed the output's validation, as the request now being made
    sends it back for a retry (a text answer: native or prompted structured output, an output
    validator's ``ModelRetry``): the errors without the values the model wrote, or the retry's
    text; None when the last answer was not sent back."""
    if len(messages) < 2 or not isinstance(messages[-2], ModelResponse) or messages[-2].tool_calls:
        return None
    sent_back = [part for part in getattr(messages[-1], "parts", ())
                 if type(part).__name__ == "RetryFeedbackPart"  # Pydantic AI 2.x
                 or (isinstance(part, RetryPromptPart) and part.tool_name is None)]
    if not sent_back:
        return None
    content = sent_back[-1].content
    if isinstance(content, list):
        return [{key: error.get(key) for key in ("type", "loc", "msg")} for error in content
                if isinstance(error, dict)]
    return str(content)


def _written(reply: ModelResponse | None) -> str | None:
    """The text of the model's final answer (None if it asked for a tool again)."""
    if reply is None or reply.tool_calls:
        return None
    return reply.text
