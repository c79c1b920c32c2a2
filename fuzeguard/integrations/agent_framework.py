"""Microsoft Agent Framework: ``LoopGuard``, three middleware that guard every tool of an agent.

``Agent(client=client, tools=[search], middleware=LoopGuard(on_loop="kill").middleware)`` (add
your own middleware to that list as you like; the tools are not touched):

- agent middleware: each ``agent.run(...)`` is judged in a run of its own (``_runs.py``): a run the
  user opened around it wins (``KeyedRuns`` makes a conversation of several runs one run), and an
  agent called as a tool of another (``agent.as_tool()``) gets a child run. An agent called as a
  tool that has no ``LoopGuard`` of its own is guarded by the calling agent's: the function
  middleware finds it in the tool ``as_tool()`` made (the framework keeps it in the tool function's
  closure) and adds to it, once, an agent middleware that does nothing unless the agent runs
  inside such a tool call, where it brings in the caller's three middleware for that run. An
  agent run by a tool function of your own (``await inner.run(...)`` in a ``@tool``) is not
  reached: give it ``middleware=guard.middleware`` too;
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

Each model call ends a turn of a run the invocation opened (the ladder steps once per turn), and
is recorded (``_model_calls``, in a run of its own beside the invocation's): a model that keeps
asking for a function the agent does not have (the framework answers ``Requested function ... not
found`` and runs nothing: no function middleware sees it), or with arguments the function does not
take (the framework answers ``Argument parsing failed``, seen in the next model call's messages),
or that reaches ``max_model_calls`` (off by default, asked before the call is made), is ended like
a kill, instead of its response. (The framework's own ``max_consecutive_errors_per_request``, 3 by
default, sends ``tool_choice="none"`` to the model call after the third failed step in a row.) A
streamed model call is recorded when its stream is finalized (its updates are out already): the
invocation ends at its next model call, with the canned answer.

A streaming run (``agent.run(..., stream=True)``, as ``agent.as_tool()`` makes) keeps its run
current where it is consumed until the stream's cleanup. Install with
``pip install 'fuzeguard[agent-framework]'``.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agent_framework import (
    AgentContext,
    AgentMiddleware,
    BaseAgent,
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

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import make_current, restore_current
from fuzeguard.integrations._shared.calls import (
    ExitBehavior,
    ToolCalls,
    final_answer,
    stop_message,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import exit_behavior as exit_behavior_of
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.runs import (
    _opened,
    invocation,
    invocation_run,
    new_run,
    open_run,
    user_run,
)
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

Next = Callable[[], Awaitable[None]]
# How the framework answers a function call whose arguments do not validate (its stable text).
ARGUMENTS_REJECTED = "Error: Argument parsing failed."


class LoopGuard:
    """Guard every tool of an Agent Framework agent against loops: give ``middleware`` (agent,
    function and chat middleware, all three needed) to the agent.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus ``exit_behavior``,
    ``wrap_up``, ``wrap_up_timeout`` and ``max_model_calls`` (see the module docstring). Don't
    also ``guard()`` the tools' functions: each call would count twice. (The framework's
    ``MiddlewareBundle`` would keep the three together, but it is experimental.)
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 wrap_up_timeout: float = DEFAULT_TIMEOUT, max_model_calls: int | None = None,
                 **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)
        self.middleware: list[AgentMiddleware | FunctionMiddleware | ChatMiddleware] = []
        self.middleware += [
            _Runs(self.model_calls), _Tools(self.calls, self.middleware),
            _Ending(self.exit_behavior, WrapUp(wrap_up, wrap_up_timeout), self.model_calls),
        ]


Middleware = list[AgentMiddleware | FunctionMiddleware | ChatMiddleware]
# The middleware of the LoopGuard whose tool call is running an agent that has none of its own
# (``agent.as_tool()``): that agent's runs here are guarded by them (``_Reached``).
_reaching: contextvars.ContextVar[Middleware | None] = contextvars.ContextVar(
    "fuzeguard_agent_framework_reaching", default=None)


class _Runs(AgentMiddleware):
    """One run per agent invocation (its model calls' run closed with it)."""

    def __init__(self, model_calls: ModelCalls) -> None:
        self.model_calls = model_calls

    async def process(self, context: AgentContext, call_next: Next) -> None:
        name = getattr(context.agent, "name", None) or "agent"
        if not context.stream:
            with invocation(name) as run:
                try:
                    await call_next()
                finally:
                    self.model_calls.close(run)
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
            self.model_calls.close(run)
            run.close()

        context.stream_cleanup_hooks.append(cleanup)
        await call_next()


class _Reached(AgentMiddleware):
    """Added to an agent called as a tool that has no ``LoopGuard``: inside such a tool call
    (``_reaching``), its run is guarded by the caller's middleware; elsewhere it does nothing."""

    async def process(self, context: AgentContext, call_next: Next) -> None:
        middleware = _reaching.get()
        if middleware is None:
            await call_next()
            return
        runs, *others = middleware
        kwargs = dict(context.client_kwargs or {})
        kwargs["middleware"] = [*(kwargs.get("middleware") or ()), *others]
        context.client_kwargs = kwargs
        await runs.process(context, call_next)  # type: ignore[arg-type]


_REACHED = _Reached()


def _reached(function: Any) -> bool:
    """Whether ``function`` is a tool made by ``agent.as_tool()`` whose agent has no
    ``LoopGuard`` (it then has ``_Reached``, added once)."""
    closure = getattr(getattr(function, "func", None), "__closure__", None) or ()
    agents = [found for found in map(_contents, closure) if isinstance(found, BaseAgent)]
    if len(agents) != 1:
        return False
    agent = agents[0]
    present = list(agent.middleware or ())
    if any(isinstance(m, _Runs) for m in present):
        return False  # guarded by a LoopGuard of its own
    if _REACHED not in present:
        agent.middleware = [*present, _REACHED]
    return True


def _contents(cell: Any) -> Any:
    """What a closure cell holds (None while it is empty)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


class _Tools(FunctionMiddleware):
    """Judges each tool call before it runs; an agent it runs that has no ``LoopGuard`` is
    guarded by this one (``middleware``) during the call."""

    def __init__(self, calls: ToolCalls, middleware: Middleware) -> None:
        self.calls = calls
        self.middleware = middleware

    async def process(self, context: FunctionInvocationContext, call_next: Next) -> None:
        if _reached(context.function):
            token = _reaching.set(self.middleware)
            try:
                await self._judged(context, call_next)
            finally:
                _reaching.reset(token)
            return
        await self._judged(context, call_next)

    async def _judged(self, context: FunctionInvocationContext, call_next: Next) -> None:
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
    """Records each model call (a new turn) and ends a killed invocation at its next model call,
    or at the model call that loops or goes past ``max_model_calls``."""

    def __init__(self, exit_behavior: str, wrap_up: WrapUp, model_calls: ModelCalls) -> None:
        self.exit_behavior = exit_behavior
        self.wrap_up = wrap_up
        self.model_calls = model_calls

    async def process(self, context: ChatContext, call_next: Next) -> None:
        run = current_run()
        recorded = open_run() is not None  # model calls outside any run are not recorded
        detection = run.killed or (
            (self.model_calls.run_of(run).killed or self._before(run, context.messages))
            if recorded else None)
        if detection is None:
            if run is invocation_run():  # the model turns of a run the invocation opened
                run.end_turn()
            await call_next()
            if not recorded:
                return
            options = context.options
            if context.stream:
                if isinstance(context.result, ResponseStream):
                    context.result.with_result_hook(
                        lambda response: self._streamed(run, options, response))
                return
            detection = self._recorded(run, options, context.result)
            if detection is None:
                return
        if self.exit_behavior == "error":
            raise LoopDetected(detection, run.stats())
        if context.stream:  # the canned answer: a streamed run is not asked again
            update = ChatResponseUpdate(role="assistant",
                                        contents=[Content.from_text(final_answer(detection))])
            context.result = ResponseStream(_once(update), finalizer=ChatResponse.from_updates)
        else:
            context.result = _final(
                await self.wrap_up.afinal(detection, lambda: _ask(context, detection, call_next)))

    def _before(self, run: Any, messages: Sequence[Message]) -> Detection | None:
        """Before a model call: the detection that ends the invocation instead (the last
        response's calls the framework rejected for their arguments, ``max_model_calls``)."""
        invalid = _invalid(messages)
        detection = self.model_calls.rejection(run, invalid) if invalid else None
        return self._ending(detection or self.model_calls.over_limit(run))

    def _recorded(self, run: Any, options: Any, response: Any) -> Detection | None:
        """Record the model call that answered ``response`` (``_model_calls``): the detection
        that ends the invocation instead, or None."""
        if not isinstance(response, ChatResponse):
            return None
        offered = {getattr(tool, "name", None) or getattr(tool, "__name__", None)
                   for tool in (options or {}).get("tools") or ()}
        calls = [(c.name or "?", c.arguments) for m in response.messages for c in m.contents
                 if c.type == "function_call"]
        usage = response.usage_details or {}
        return self._ending(self.model_calls.record(
            run, calls, None if calls else response.text,
            rejected=any(name not in offered for name, _ in calls), final=not calls,
            tokens=usage.get("total_token_count"),
        ))

    def _streamed(self, run: Any, options: Any, response: ChatResponse) -> None:
        """A streamed model call, recorded once its stream is finalized (its updates are out
        already): a detection ends the invocation at its next model call."""
        self._recorded(run, options, response)

    def _ending(self, detection: Detection | None) -> Detection | None:
        """A model-call detection as ``exit_behavior`` takes it: raised with ``"error"``."""
        if detection is not None and self.exit_behavior == "error":
            raise LoopDetected(detection, self.model_calls.run_of(current_run()).stats())
        return detection


def _invalid(messages: Sequence[Message]) -> list[tuple[str, Any]]:
    """The calls of the model's last response that the framework answered with its argument
    validation error (the function did not run), as the messages of the next model call show."""
    if len(messages) < 2:
        return []
    asked = {c.call_id: (c.name or "?", c.arguments) for c in messages[-2].contents
             if c.type == "function_call"}
    return [asked[c.call_id] for c in messages[-1].contents
            if c.type == "function_result" and c.call_id in asked
            and str(c.result).startswith(ARGUMENTS_REJECTED)]


def _final(text: str) -> ChatResponse:
    """A response with the final answer as the model's text."""
    return ChatResponse(messages=[Message(role="assistant", contents=[text])])


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
