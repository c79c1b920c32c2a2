"""Microsoft Agent Framework: ``LoopGuard``, three middleware that guard every tool of an agent.

``Agent(client=client, tools=[search], middleware=LoopGuard(on_loop="kill").middleware)`` (add
your own middleware to that list as you like; the tools are not touched):

- agent middleware: each ``agent.run(...)`` is judged in a run of its own (``_runs.py``): a run the
  user opened around it wins (``KeyedRuns`` makes a conversation of several runs one run), and an
  agent called as a tool of another (``agent.as_tool()``) gets a child run;
- function middleware: judges each tool call before it runs. A skip answers the call with the
  detection's message (the tool does not run); a warn lets it run and adds a text note to its
  result, for the model; a kill answers it with the stop message;
- chat middleware: the model call after a kill is answered with a final assistant message, so
  ``agent.run`` returns a response with a final answer: the model's own, that call made once
  with no tool and a request for a final answer with the detection's message as the reason
  (``wrap_up=True``, the default, within ``wrap_up_timeout`` seconds; not for a streaming run),
  else the canned one saying why the agent stopped (``wrap_up=False``, or when the model fails,
  is late, answers nothing or asks for a tool again). With ``exit_behavior="error"`` that model
  call raises ``LoopDetected`` out of ``agent.run`` instead.

Each model call ends a turn of a run the invocation opened (the ladder steps once per turn). A
streaming run (``agent.run(..., stream=True)``, as ``agent.as_tool()`` makes) keeps its run current
where it is consumed until the stream's cleanup. Install with ``pip install 'fuzeguard[agent-framework]'``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agent_framework import (
    AgentContext,
    AgentMiddleware,
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    ResponseStream,
)

from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import current_run, make_current, restore_current
from fuzeguard.integrations._shared.calls import (
    ExitBehavior,
    ToolCalls,
    final_answer,
    stop_message,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import exit_behavior as exit_behavior_of
from fuzeguard.integrations._shared.runs import _opened, invocation, invocation_run, new_run, user_run
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp, answer

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

Next = Callable[[], Awaitable[None]]


class LoopGuard:
    """Guard every tool of an Agent Framework agent against loops: give ``middleware`` (agent,
    function and chat middleware, all three needed) to the agent.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus ``exit_behavior``,
    ``wrap_up`` and ``wrap_up_timeout``. Don't also ``guard()`` the tools' functions: each call
    would count twice. (The framework's ``MiddlewareBundle`` would keep the three together, but
    it is experimental.)
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 wrap_up_timeout: float = DEFAULT_TIMEOUT, **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.calls = ToolCalls(**options)
        self.middleware: list[AgentMiddleware | FunctionMiddleware | ChatMiddleware] = [
            _Runs(), _Tools(self.calls),
            _Ending(self.exit_behavior, WrapUp(wrap_up, wrap_up_timeout)),
        ]


class _Runs(AgentMiddleware):
    """One run per agent invocation."""

    async def process(self, context: AgentContext, call_next: Next) -> None:
        name = getattr(context.agent, "name", None) or "agent"
        if not context.stream:
            with invocation(name):
                await call_next()
            return
        # A stream is consumed after this returns, in the consumer's context (an agent called as
        # a tool streams): its run stays current there until the stream's cleanup.
        if user_run() is not None:
            await call_next()
            return
        run = new_run(name)
        tokens = (_opened.set(run), make_current(run))

        def cleanup() -> None:
            try:
                restore_current(tokens[1])
                _opened.reset(tokens[0])
            except ValueError:  # consumed in another context than it began in: nothing to undo
                pass
            run.close()

        context.stream_cleanup_hooks.append(cleanup)
        await call_next()


class _Tools(FunctionMiddleware):
    """Judges each tool call before it runs."""

    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls

    async def process(self, context: FunctionInvocationContext, call_next: Next) -> None:
        arguments = context.arguments
        mapping = arguments.model_dump() if hasattr(arguments, "model_dump") else dict(arguments)
        outcome = self.calls.begin(context.function.name, mapping)
        if outcome.skipped is not None:
            value = outcome.skipped.value
            context.result = value if isinstance(value, str) else str(value)
            return
        if outcome.killed is not None:
            context.result = stop_message(outcome.killed)
            return
        if outcome.pending is not None:
            outcome.pending.enter()  # add_cost() inside the tool counts for this call
        try:
            await call_next()
        except BaseException as exc:
            outcome.fail(exc)
            raise
        outcome.done(_shown(context.result))
        notes = outcome.notes()
        if notes:
            context.result = _with_text(context.result, "\n\n".join(notes))


class _Ending(ChatMiddleware):
    """Ends a killed invocation at its next model call; each model call is a new turn."""

    def __init__(self, exit_behavior: str, wrap_up: WrapUp) -> None:
        self.exit_behavior = exit_behavior
        self.wrap_up = wrap_up

    async def process(self, context: ChatContext, call_next: Next) -> None:
        run = current_run()
        detection = run.killed
        if detection is None:
            if run is invocation_run():  # the model turns of a run the invocation opened
                run.end_turn()
            await call_next()
            return
        if self.exit_behavior == "error":
            raise LoopDetected(detection, run.stats())
        text = final_answer(detection)
        if not context.stream and self.wrap_up.wanted(detection):
            written = await self.wrap_up.aask(detection, lambda: _ask(context, detection, call_next))
            text = answer(detection, written)
        if context.stream:
            update = ChatResponseUpdate(role="assistant", contents=[Content.from_text(text)])
            context.result = ResponseStream(_once(update), finalizer=ChatResponse.from_updates)
        else:
            context.result = ChatResponse(messages=[Message(role="assistant", contents=[text])])


async def _ask(context: ChatContext, detection: Any, call_next: Next) -> str | None:
    """The model call, made once with no tool: the conversation and the request for a final
    answer. The model's text, or None if it asked for a tool again."""
    context.messages = [*context.messages, Message(role="user",
                                                   contents=[wrap_up_request(detection)])]
    context.options = {key: value for key, value in (context.options or {}).items()
                       if key not in ("tools", "tool_choice")}
    await call_next()
    result = context.result
    messages = getattr(result, "messages", None) or []
    if any(c.type == "function_call" for m in messages for c in m.contents):
        return None
    return getattr(result, "text", None)


async def _once(update: ChatResponseUpdate) -> AsyncIterator[ChatResponseUpdate]:
    yield update


def _shown(result: Any) -> Any:
    """What the model reads of a tool's result: the text of its contents."""
    if isinstance(result, list):
        return [getattr(item, "text", None) or str(item) for item in result]
    return result


def _with_text(result: Any, note: str) -> Any:
    """A tool's result with a text note after it (a list of contents keeps its items)."""
    if isinstance(result, list):
        return [*result, Content.from_text(note)]
    return f"{result}\n\n{note}"
