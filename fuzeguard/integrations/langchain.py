"""LangChain / LangGraph 1.x: ``LoopGuardMiddleware``, an ``AgentMiddleware`` for ``create_agent``.

It guards every tool call of the agent without touching the tools (``wrap_tool_call`` /
``awrap_tool_call``): a skip is answered with a ``ToolMessage`` carrying the detection's message;
a kill is answered with a ``ToolMessage`` (``status="error"``) and then, as with the built-in
``ToolCallLimitMiddleware``, ``exit_behavior`` decides: ``"end"`` (default) ends the agent with a
final ``AIMessage``: the model's own final answer, asked once without tools with the detection's
message as the reason (``wrap_up=True``, the default, within ``wrap_up_timeout`` seconds), or the
canned answer saying why (``wrap_up=False``, or when the model fails, is late or asks for a tool
again; no tool runs after the kill), ``"error"`` raises
``LoopDetected`` from ``invoke``, ``"continue"`` lets the model go on (every later call is
refused: a kill is sticky). Every refused call is answered, so no tool call is left unanswered in
the history; with ``"error"`` the exception is raised from the next model step, outside any tool
middleware (an outer ``ToolErrorMiddleware`` or ``ToolRetryMiddleware`` cannot catch it). A warned
call's ``ToolMessage`` carries a short note for the model, and so does the next ``ToolMessage``
after the run gathered notes for it (``run.notes()``: budget warnings, a resume's note).

Each model call is recorded too (``_model_calls``, in a run of its own beside the invocation's):
a model that keeps asking for a tool that does not exist or with arguments the tool does not take
(``invalid_tool_calls``), or that reaches ``max_model_calls`` (off by default), is ended like a
kill, instead of its response.

Each ``invoke`` / ``ainvoke`` of the agent is a run of its own (``before_agent`` opens it, its id
rides in the agent's state, ``after_agent`` closes it); a ``fuzeguard.run()`` current at the
invocation wins, and an agent invoked inside a tool of another gets a child run. To make the
invocations of one thread one run: ``with conversations.run_for(thread_id): agent.invoke(...)``
(``fuzeguard.integrations.KeyedRuns``).

Install with ``pip install 'fuzeguard[langchain]'``.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Annotated, Any, Literal

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from typing_extensions import NotRequired

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._inner.langchain import InnerAgents
from fuzeguard.integrations._shared.calls import (
    GuardedTwice,
    Outcome,
    ToolCalls,
    final_answer,
    guarded,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import (
    exit_behavior as exit_behavior_of,
)
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.runs import MAX_KEYED_RUNS, new_run, user_run, within
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

ExitBehavior = Literal["end", "error", "continue"]
_MARK = "fuzeguard"  # key in a refused call's ToolMessage.artifact (never sent to the model)
_KEY = "fuzeguard_run"  # the invocation's run id, in the agent's state (private to the middleware)
final_message = final_answer  # the final ``AIMessage`` text of an agent ended by a kill


class GuardState(AgentState):
    """The agent's state with the id of the invocation's run (never in input or output)."""

    fuzeguard_run: NotRequired[Annotated[str | None, PrivateStateAttr]]


class LoopGuardMiddleware(AgentMiddleware):
    """Guard every tool of a LangChain agent against loops.

    ``create_agent(model, tools, middleware=[LoopGuardMiddleware(on_loop=["warn", "skip",
    "kill"])])``. Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...),
    applied to each tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus
    ``exit_behavior``, ``wrap_up``, ``wrap_up_timeout`` and ``max_model_calls`` (see the module
    docstring). A tool
    whose function has ``@guard`` is judged by that guard alone (each call counted once; logged
    as ``fuzeguard.guarded_twice``), and its kill ends the agent here.
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 wrap_up_timeout: float = DEFAULT_TIMEOUT, max_model_calls: int | None = None,
                 **options: Unpack[ToolOptions]) -> None:
        super().__init__()
        self.exit_behavior = exit_behavior_of(exit_behavior, ("end", "error", "continue"))
        self.wrap_up = WrapUp(wrap_up, wrap_up_timeout)
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)
        self._runs: OrderedDict[str, Run] = OrderedDict()  # the invocations under way, by id
        self._guarded_twice = GuardedTwice("LoopGuardMiddleware")
        self._inner = InnerAgents(self.calls)  # agents a tool invokes without a middleware
        self._lock = new_lock()

    state_schema = GuardState

    # ------------------------------------------------------------------ one run per invocation

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Open the invocation's run (none when the user's run is current)."""
        if user_run() is not None:
            return {_KEY: None}
        key = os.urandom(8).hex()
        run = new_run("langchain-agent")
        with self._lock:
            self._runs[key] = run
            while len(self._runs) > MAX_KEYED_RUNS:  # invocations that raised never reach after
                self._runs.popitem(last=False)[1].close()
        return {_KEY: key}

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Close the invocation's run, and the run of its model calls."""
        key = state.get(_KEY)
        with self._lock:
            run = self._runs.pop(key, None) if key else None
        self.model_calls.close(run if run is not None else current_run())
        if run is not None:
            run.close()
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    def _run_of(self, state: Any) -> Run | None:
        key = state.get(_KEY) if isinstance(state, dict) else None
        return self._runs.get(key) if key else None

    def _inside(self, state: Any) -> AbstractContextManager[Any]:
        run = self._run_of(state)
        return nullcontext() if run is None else within(run)

    # ------------------------------------------------------------------ tool calls

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        with self._inside(request.state):
            if _guarded(request.tool):  # judged once, by the function's own guard
                try:
                    return handler(request)
                except LoopDetected as exc:
                    return self._answer(call, Outcome(killed=exc))
            with self._inner.watching(request, current_run(), _shown) as inner:
                try:
                    outcome, result = self.calls.call(
                        call["name"], call.get("args"), lambda: handler(request), shown=_shown
                    )
                except LoopDetected as exc:
                    if exc is not inner.stopped:
                        raise
                    return _inner_stopped(call, exc)
        return _noted(result, outcome) if outcome.runs else self._answer(call, outcome)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        call = request.tool_call
        with self._inside(request.state):
            if _guarded(request.tool):  # judged once, by the function's own guard
                try:
                    return await handler(request)
                except LoopDetected as exc:
                    return self._answer(call, Outcome(killed=exc))
            with self._inner.watching(request, current_run(), _shown) as inner:
                try:
                    outcome, result = await self.calls.acall(
                        call["name"], call.get("args"), lambda: handler(request), shown=_shown
                    )
                except LoopDetected as exc:
                    if exc is not inner.stopped:
                        raise
                    return _inner_stopped(call, exc)
        return _noted(result, outcome) if outcome.runs else self._answer(call, outcome)

    def _answer(self, call: Any, outcome: Outcome) -> ToolMessage:
        if outcome.skipped is not None:
            value = outcome.skipped.value
            return ToolMessage(
                content=value if isinstance(value, (str, list)) else str(value),
                tool_call_id=call["id"],
                name=call["name"],
                artifact={_MARK: "skip"},
            )
        detection = outcome.killed
        assert detection is not None
        return ToolMessage(
            content=detection.message,
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
            artifact={_MARK: "kill"},
        )

    # ------------------------------------------------------------------ ending the agent

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self._warn_guarded(request.tools)
        ended = self._kill_before(request.messages, request.state) or self._over_limit(request)
        if ended is None:
            response = handler(request)
            ended = self._judged(request, response)
            if ended is None:
                return response
        if isinstance(ended, AIMessage):
            return ended
        return AIMessage(self.wrap_up.final(ended, lambda: handler(_asking(request, ended)), _written))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        self._warn_guarded(request.tools)
        ended = self._kill_before(request.messages, request.state) or self._over_limit(request)
        if ended is None:
            response = await handler(request)
            ended = self._judged(request, response)
            if ended is None:
                return response
        if isinstance(ended, AIMessage):
            return ended
        return AIMessage(await self.wrap_up.afinal(ended, lambda: handler(_asking(request, ended)), _written))

    def _judged(self, request: Any, response: Any) -> Detection | None:
        """Record the model call (``_model_calls``): the detection that ends the agent instead of
        the response, or None (``exit_behavior="error"``: raised; ``"continue"``: never)."""
        message = _last_ai(response)
        if message is None:
            return None
        offered = {_tool_name(tool) for tool in request.tools or ()}
        # The structured output's calls are answered in the model step itself (response_format)
        answered = _answered(response)
        calls = [(c["name"], c.get("args")) for c in message.tool_calls]
        bad = [(c.get("name") or "?", c.get("args")) for c in message.invalid_tool_calls]
        usage = message.usage_metadata
        run = self._run_of(request.state) or current_run()
        detection = self.model_calls.record(
            run, calls + bad, None if calls or bad else message.text,
            rejected=bool(bad) or any(c["name"] not in offered and c.get("id") not in answered
                                      for c in message.tool_calls),
            final=not calls and not bad, tokens=usage.get("total_tokens") if usage else None,
        )
        failure = _failed_output(response, answered)
        if detection is None and failure:
            detection = self.model_calls.failed_output(run, failure)
        return self._ending(run, detection)

    def _over_limit(self, request: Any) -> Detection | None:
        """Before the model call: ``max_model_calls`` reached ends the agent instead."""
        run = self._run_of(request.state) or current_run()
        return self._ending(run, self.model_calls.over_limit(run))

    def _ending(self, run: Run, detection: Detection | None) -> Detection | None:
        """A model-call detection as ``exit_behavior`` takes it: returned (the agent ends),
        raised, or dropped (``"continue"``)."""
        if detection is None or self.exit_behavior == "continue":
            return None
        if self.exit_behavior == "error":
            raise LoopDetected(detection, self.model_calls.run_of(run).stats())
        return detection

    def _warn_guarded(self, tools: Any) -> None:
        """Say once per tool, at the first model call that offers it (before it can run), that
        a tool whose function has ``@guard`` is judged by that guard, not by the middleware."""
        for tool in tools or ():
            name = getattr(tool, "name", None)
            if name is not None and _guarded(tool):
                self._guarded_twice.say(name)

    def _new_turn(self, state: Any) -> None:
        """A model call starts a turn of the invocation's run: the ladder steps once per turn
        for the tool calls it asks for together."""
        run = self._run_of(state)
        if run is not None:
            run.end_turn()

    def _kill_before(self, messages: list[Any], state: Any) -> Detection | AIMessage | None:
        """After a tool step in which a call was killed: the kill's detection (the model call is
        then answered with a final ``AIMessage`` with no tool calls, so the agent ends there:
        the model's own final answer, asked without tools, or the canned one), or raise the
        kill's ``LoopDetected`` (``exit_behavior="error"``). None when no call was killed.

        Done inside the model step rather than in a ``before_model`` hook with
        ``jump_to="end"``: a hook is one more graph step per turn, and under LangChain's
        recursion limit of 25 that leaves the model 8 turns instead of 12.
        """
        self._new_turn(state)
        if self.exit_behavior == "continue":
            return None
        for message in reversed(messages):
            if not isinstance(message, ToolMessage):
                break
            artifact = message.artifact
            if isinstance(artifact, dict) and artifact.get(_MARK) == "kill":
                run = self._run_of(state) or current_run()
                detection = run.killed
                if detection is None:
                    return AIMessage(f"Stopped: the agent was looping. {message.content}")
                if self.exit_behavior == "error":
                    raise LoopDetected(detection, run.stats())
                return detection
        return None


def _inner_stopped(call: Any, stopped: LoopDetected) -> ToolMessage:
    """The answer to a tool call whose inner agent a loop ended (``_langchain_inner``): the
    inner agent's stop message, which the outer model reads as the tool's result."""
    return ToolMessage(content=final_message(stopped.detection), tool_call_id=call["id"],
                       name=call["name"], status="error", artifact={_MARK: "inner"})


def _last_ai(response: Any) -> AIMessage | None:
    """The model's message in a model call's response (a ``ModelResponse`` or the message)."""
    messages = getattr(response, "result", None) or [response]
    found = [m for m in messages if isinstance(m, AIMessage)]
    return found[-1] if found else None


def _answered(response: Any) -> dict[Any, ToolMessage]:
    """The tool calls a model step answered itself, by id: a structured output's
    (``response_format``), with its result or the error that sends it back for a retry."""
    return {m.tool_call_id: m for m in getattr(response, "result", None) or ()
            if isinstance(m, ToolMessage)}


_VALUE = re.compile(r"input_value=.*?, input_type=", re.S)


def _failed_output(response: Any, answered: dict[Any, ToolMessage]) -> list[str]:
    """How a structured output the model step sent back for a retry failed: each error's text
    without the values the model wrote (empty when the step took it)."""
    if getattr(response, "structured_response", None) is not None:
        return []
    return [_VALUE.sub("input_type=", str(m.content)) for m in answered.values()]


def _tool_name(tool: Any) -> Any:
    if isinstance(tool, dict):
        return tool.get("name") or (tool.get("function") or {}).get("name")
    return getattr(tool, "name", None)


def _asking(request: Any, detection: Detection) -> Any:
    """The model request for the final answer: the conversation so far and the request, with no
    tool and no structured output to call."""
    asked = HumanMessage(wrap_up_request(detection))
    return request.override(messages=[*request.messages, asked], tools=[], tool_choice=None,
                            response_format=None)


def _written(reply: Any) -> str | None:
    """The text of the model's reply to the request for a final answer (None if it asked for
    a tool again)."""
    messages = getattr(reply, "result", None) or [reply]
    last = messages[-1] if messages else None
    if not isinstance(last, AIMessage) or last.tool_calls:
        return None
    return last.text


def _guarded(tool: Any) -> bool:
    """Whether a LangChain tool runs a function that has ``@guard`` (sync or async)."""
    return any(guarded(getattr(tool, attr, None)) for attr in ("func", "coroutine"))


def _noted(result: Any, outcome: Outcome) -> Any:
    """A call's ``ToolMessage`` with the notes for the model (a warning, the run's notes) added
    to its text."""
    if not isinstance(result, ToolMessage):
        return result
    notes = outcome.notes()
    if not notes:
        return result
    content = result.content
    note = "\n\n".join(notes)
    if isinstance(content, str):
        return result.model_copy(update={"content": f"{content}\n\n{note}"})
    return result.model_copy(update={"content": [*content, {"type": "text", "text": note}]})


def _shown(result: Any) -> Any:
    """What the model is shown of a tool's answer: a ``ToolMessage``'s content and status (its
    id changes on every call); anything else (a ``Command``) as it is."""
    if isinstance(result, ToolMessage):
        return {"content": result.content, "status": result.status}
    return result
