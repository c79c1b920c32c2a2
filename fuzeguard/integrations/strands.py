"""AWS Strands Agents: ``LoopGuard``, a hook provider that guards every tool of an agent.

``Agent(model=model, tools=[search], hooks=[LoopGuard(on_loop="kill")])``: the hooks judge each
tool call before it runs (``BeforeToolCallEvent``) and see its result (``AfterToolCallEvent``);
the tools are not touched. Each invocation (``agent(...)``, ``invoke_async``, ``stream_async``) is
judged in a run of its own (``_runs.py``): a run the user opened around it wins (``KeyedRuns``
makes a conversation of several invocations one run), and an agent invoked inside a tool of
another (an agent as a tool) gets a child run, when it has the same hooks. An agent called as a
tool through ``agent.as_tool()`` (or given in ``tools=``, which Strands wraps the same way) that
has no ``LoopGuard`` of its own is guarded by the calling agent's: ``BeforeToolCallEvent`` names
the wrapper as ``selected_tool``, whose ``agent`` gets, once, a hook provider that does nothing
unless the agent runs inside such a tool call, where its hooks are the caller's (a child run).
An agent run by a ``@tool`` function of your own is not reached: give it the hooks too.

- a skip cancels the call and answers it with the detection's message (a normal result);
- a warn lets the call run and adds a text note to its result, for the model;
- a kill cancels the call with the stop message and ends the invocation after that tool batch
  (``AfterToolsEvent.end_turn``) with a final answer the application can show as the result's
  message: the model's own, asked in one call with no tool (the conversation, the batch's tool
  results and a request for a final answer with the detection's message as the reason;
  ``wrap_up=True``, the default, within ``wrap_up_timeout`` seconds), else the canned one
  (``wrap_up=False``, or when the model fails, is late, answers nothing or asks for a tool).
  ``result.state["loop_detected"]`` is the ``LoopDetected`` (the detection, and the stats of the
  run it killed).

Each model call ends a turn of a run the invocation opened (the ladder steps once per turn), and
is recorded when its response comes (``AfterModelCallEvent``; ``_model_calls``, in a run of its
own beside the invocation's): its tool calls, or a digest of its text, and its token usage
(``metadata.usage``). A call the framework rejects is judged by meaning: one asking for a tool the
agent does not have (Strands answers ``Unknown tool: NAME``, and its ``BeforeToolCallEvent`` has no
``selected_tool``: not judged as a tool call), or with arguments a ``@tool`` function does not
take (its ``AfterToolCallEvent`` carries Strands' ``Validation failed for input parameters``
error). The same rejected call again ends the invocation like a kill: the batch's tools are
cancelled and it ends after the batch with the final answer. ``max_model_calls`` (off by
default) cancels the model call past the limit (``BeforeModelCallEvent.cancel``) with the final
answer instead. A text answer always ends a Strands invocation, so no text is judged as a loop;
Strands has no hook before a structured-output call, which is not recorded.
Install with ``pip install 'fuzeguard[strands]'``.
"""

from __future__ import annotations

import contextvars
import inspect
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from strands import Agent
from strands.hooks import (
    AfterInvocationEvent,
    AfterModelCallEvent,
    AfterToolCallEvent,
    AfterToolsEvent,
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    HookRegistry,
)
from strands.types.tools import ToolResultContent

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard.integrations._shared.calls import ToolCalls, stop_message, wrap_up_request
from fuzeguard.integrations._shared.hooked import Invocation, Invocations
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

STATE_KEY = "loop_detected"  # where a kill's LoopDetected is left in the result's state
# How Strands answers a ``@tool`` function's call whose arguments do not validate (its own text).
ARGUMENTS_REJECTED = "Validation failed for input parameters"


class LoopGuard:
    """Guard every tool of a Strands agent against loops (a Strands ``HookProvider``).

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus ``wrap_up``,
    ``wrap_up_timeout`` and ``max_model_calls`` (see the module docstring). Don't also ``guard()``
    the tools' functions: each call would count twice.
    """

    def __init__(self, *, wrap_up: bool = True, wrap_up_timeout: float = DEFAULT_TIMEOUT,
                 max_model_calls: int | None = None, **options: Unpack[ToolOptions]) -> None:
        self.wrap_up = WrapUp(wrap_up, wrap_up_timeout)
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)
        self._invocations = Invocations()
        self._cancelled: set[int] = set()  # invocations whose model call the guard cancelled
        self._reaching: dict[Hashable, contextvars.Token[LoopGuard | None]] = {}  # by call id

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        for event_type, name in _HOOKS:
            registry.add_callback(event_type, getattr(self, name))

    def _invocation(self, state: dict[str, Any]) -> Invocation:
        # The same invocation_state dict reaches every hook of one invocation.
        return self._invocations.get(id(state))

    def _started(self, event: BeforeInvocationEvent) -> None:
        self._invocations.start(id(event.invocation_state), event.agent.name)

    def _ended(self, event: AfterInvocationEvent) -> None:
        key = id(event.invocation_state)
        found = self._invocations.find(key)
        if found is not None:
            self.model_calls.close(found.run)
        self._cancelled.discard(key)
        self._invocations.end(key)

    async def _model_call(self, event: BeforeModelCallEvent) -> None:
        invocation = self._invocation(event.invocation_state)
        if invocation.owned:  # the model turns of a run the invocation opened
            invocation.run.end_turn()
        detection = self.model_calls.over_limit(invocation.run)
        if detection is None:
            return
        self._stopped(event.invocation_state, detection, self.model_calls.run_of(invocation.run))
        self._cancelled.add(id(event.invocation_state))
        event.cancel = await self._final(event.agent, [], detection)

    def _model_answered(self, event: AfterModelCallEvent) -> None:
        response = event.stop_response
        if response is None or id(event.invocation_state) in self._cancelled:
            return
        run = self._invocation(event.invocation_state).run
        blocks = response.message.get("content") or []
        calls = [(block["toolUse"]["name"], block["toolUse"].get("input"))
                 for block in blocks if "toolUse" in block]
        known = event.agent.tool_registry.registry
        usage = (response.message.get("metadata") or {}).get("usage") or {}
        self.model_calls.record(
            run, calls, None if calls else "".join(b.get("text", "") for b in blocks),
            rejected=any(name not in known for name, _ in calls), final=not calls,
            tokens=usage.get("totalTokens"),
        )

    def _ending(self, invocation: Invocation) -> Detection | None:
        """The detection that ends the invocation: its run's kill, or its model calls'."""
        return invocation.run.killed or self.model_calls.run_of(invocation.run).killed

    def _before_tool(self, event: BeforeToolCallEvent) -> None:
        invocation = self._invocation(event.invocation_state)
        ended = self.model_calls.run_of(invocation.run).killed
        if ended is not None:  # a model call ended the invocation: none of its tools runs
            event.cancel_tool = stop_message(ended)
            return
        if event.selected_tool is None:  # an unknown tool: judged as the model call that asked
            return
        use = event.tool_use
        outcome = invocation.begin(self.calls, use["name"], use.get("input") or {}, use["toolUseId"])
        if outcome.skipped is not None:
            value = outcome.skipped.value
            event.cancel_tool = value if isinstance(value, str) else str(value)
        elif outcome.killed is not None:
            event.cancel_tool = stop_message(outcome.killed)
        elif _reached(event.selected_tool):  # the tool runs in this task, after this hook
            self._reaching[use["toolUseId"]] = _reaching.set(self)

    def _after_tool(self, event: AfterToolCallEvent) -> None:
        token = self._reaching.pop(event.tool_use["toolUseId"], None)
        if token is not None:
            try:
                _reaching.reset(token)
            except ValueError:  # ended in another context than it began in: nothing to undo
                pass
        invocation = self._invocation(event.invocation_state)
        if ARGUMENTS_REJECTED in str(event.exception or ""):  # the model call's, rejected
            use = event.tool_use
            self.model_calls.rejection(invocation.run, [(use["name"], use.get("input"))])
        outcome = invocation.end(event.tool_use["toolUseId"])
        if outcome is None:
            return
        result = event.result
        if outcome.skipped is not None:  # answered by the guard: a result, not a cancellation
            event.result = {**result, "status": "success"}
            return
        if event.exception is not None:
            outcome.fail(event.exception)
            return
        outcome.done([block.get("text", block) for block in result.get("content", [])])
        notes = outcome.notes()
        if notes:
            blocks: list[ToolResultContent] = [{"text": note} for note in notes]
            event.result = {**result, "content": [*result.get("content", []), *blocks]}

    async def _after_tools(self, event: AfterToolsEvent) -> None:
        invocation = self._invocation(event.invocation_state)
        detection = self._ending(invocation)
        if detection is None:
            return
        run = invocation.run if invocation.run.killed else self.model_calls.run_of(invocation.run)
        self._stopped(event.invocation_state, detection, run)
        event.end_turn = await self._final(event.agent, event.message["content"], detection)

    def _stopped(self, state: dict[str, Any], detection: Detection, run: Any) -> None:
        """Leave the kill's ``LoopDetected`` in the result's state."""
        request_state = state.get("request_state")
        if isinstance(request_state, dict):
            request_state[STATE_KEY] = LoopDetected(detection, run.stats())

    async def _final(self, agent: Any, results: list[Any], detection: Detection) -> str:
        """The final answer: the model's own (``wrap_up``) or the canned one."""
        return await self.wrap_up.afinal(detection, lambda: _ask(agent, results, detection))


_HOOKS: tuple[tuple[type[Any], str], ...] = (
    (BeforeInvocationEvent, "_started"), (AfterInvocationEvent, "_ended"),
    (BeforeModelCallEvent, "_model_call"), (AfterModelCallEvent, "_model_answered"),
    (BeforeToolCallEvent, "_before_tool"), (AfterToolCallEvent, "_after_tool"),
    (AfterToolsEvent, "_after_tools"),
)
# The LoopGuard whose tool call runs an agent that has none of its own (``agent.as_tool()``):
# that agent's invocations here are guarded by it (``_Reached``).
_reaching: contextvars.ContextVar[LoopGuard | None] = contextvars.ContextVar(
    "fuzeguard_strands_reaching", default=None)
_reached_agents: weakref.WeakSet[Any] = weakref.WeakSet()  # the agents given a ``_Reached``
_reached_lock = new_lock()


class _Reached:
    """The hook provider added to an agent called as a tool that has no ``LoopGuard``: inside
    such a tool call (``_reaching``), its hooks are the caller's ``LoopGuard``'s; elsewhere none."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        for event_type, name in _HOOKS:
            registry.add_callback(event_type, _delegate(name))


def _delegate(name: str) -> Callable[[Any], Any]:
    """The hook that calls the reaching ``LoopGuard``'s hook ``name`` (sync or async like it)."""
    if inspect.iscoroutinefunction(getattr(LoopGuard, name)):
        async def reached_async(event: Any) -> None:
            guard = _reaching.get()
            if guard is not None:
                await getattr(guard, name)(event)

        return reached_async

    def reached(event: Any) -> None:
        guard = _reaching.get()
        if guard is not None:
            getattr(guard, name)(event)

    return reached


def _reached(tool: Any) -> bool:
    """Whether ``tool`` runs an agent (``agent.as_tool()``) that has no ``LoopGuard``: that
    agent then has ``_Reached`` (added once)."""
    agent = getattr(tool, "agent", None) if getattr(tool, "tool_type", None) == "agent" else None
    if not isinstance(agent, Agent):
        return False
    with _reached_lock:
        if agent in _reached_agents:
            return True
        probe = BeforeInvocationEvent(agent=agent)
        if any(isinstance(getattr(hook, "__self__", None), LoopGuard)
               for hook in agent.hooks.get_callbacks_for(probe)):
            return False  # guarded by a LoopGuard of its own
        agent.hooks.add_hook(_Reached())
        _reached_agents.add(agent)
    return True


async def _ask(agent: Any, results: list[Any], detection: Detection) -> str | None:
    """One model call with no tool: the conversation, this batch's tool ``results`` (if any) and
    the request for a final answer (in the conversation's last message when it is the user's:
    the tool results a model call past ``max_model_calls`` would have read). The model's text,
    or None if it asked for a tool again."""
    messages = list(agent.messages)
    if not results and messages and messages[-1].get("role") == "user":
        results = list(messages.pop()["content"])
    asked = {"role": "user", "content": [*results, {"text": wrap_up_request(detection)}]}
    texts: list[str] = []
    async for chunk in agent.model.stream([*messages, asked], None, agent.system_prompt):
        if "toolUse" in chunk.get("contentBlockStart", {}).get("start", {}):
            return None
        texts.append(chunk.get("contentBlockDelta", {}).get("delta", {}).get("text", ""))
    return "".join(texts)
