"""AWS Strands Agents: ``LoopGuard``, a hook provider that guards every tool of an agent.

``Agent(model=model, tools=[search], hooks=[LoopGuard(on_loop="kill")])``: the hooks judge each
tool call before it runs (``BeforeToolCallEvent``) and see its result (``AfterToolCallEvent``);
the tools are not touched. Each invocation (``agent(...)``, ``invoke_async``, ``stream_async``) is
judged in a run of its own (``_runs.py``): a run the user opened around it wins (``KeyedRuns``
makes a conversation of several invocations one run), and an agent invoked inside a tool of
another (an agent as a tool) gets a child run, when it has the same hooks.

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

Each model call ends a turn of a run the invocation opened (the ladder steps once per turn).
Install with ``pip install 'fuzeguard[strands]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strands.hooks import (
    AfterInvocationEvent,
    AfterToolCallEvent,
    AfterToolsEvent,
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    HookRegistry,
)
from strands.types.tools import ToolResultContent

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard.integrations._shared.calls import ToolCalls, stop_message, wrap_up_request
from fuzeguard.integrations._shared.hooked import Invocation, Invocations
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp, answer

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

STATE_KEY = "loop_detected"  # where a kill's LoopDetected is left in the result's state


class LoopGuard:
    """Guard every tool of a Strands agent against loops (a Strands ``HookProvider``).

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus ``wrap_up`` and
    ``wrap_up_timeout``. Don't also ``guard()`` the tools' functions: each call would count twice.
    """

    def __init__(self, *, wrap_up: bool = True, wrap_up_timeout: float = DEFAULT_TIMEOUT,
                 **options: Unpack[ToolOptions]) -> None:
        self.wrap_up = WrapUp(wrap_up, wrap_up_timeout)
        self.calls = ToolCalls(**options)
        self._invocations = Invocations()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeInvocationEvent, self._started)
        registry.add_callback(AfterInvocationEvent, self._ended)
        registry.add_callback(BeforeModelCallEvent, self._model_call)
        registry.add_callback(BeforeToolCallEvent, self._before_tool)
        registry.add_callback(AfterToolCallEvent, self._after_tool)
        registry.add_callback(AfterToolsEvent, self._after_tools)

    def _invocation(self, state: dict[str, Any]) -> Invocation:
        # The same invocation_state dict reaches every hook of one invocation.
        return self._invocations.get(id(state))

    def _started(self, event: BeforeInvocationEvent) -> None:
        self._invocations.start(id(event.invocation_state), event.agent.name)

    def _ended(self, event: AfterInvocationEvent) -> None:
        self._invocations.end(id(event.invocation_state))

    def _model_call(self, event: BeforeModelCallEvent) -> None:
        invocation = self._invocation(event.invocation_state)
        if invocation.owned:  # the model turns of a run the invocation opened
            invocation.run.end_turn()

    def _before_tool(self, event: BeforeToolCallEvent) -> None:
        use = event.tool_use
        outcome = self._invocation(event.invocation_state).begin(
            self.calls, use["name"], use.get("input") or {}, use["toolUseId"]
        )
        if outcome.skipped is not None:
            value = outcome.skipped.value
            event.cancel_tool = value if isinstance(value, str) else str(value)
        elif outcome.killed is not None:
            event.cancel_tool = stop_message(outcome.killed)

    def _after_tool(self, event: AfterToolCallEvent) -> None:
        outcome = self._invocation(event.invocation_state).end(event.tool_use["toolUseId"])
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
        run = self._invocation(event.invocation_state).run
        detection = run.killed
        if detection is None:
            return
        request_state = event.invocation_state.get("request_state")
        if isinstance(request_state, dict):
            request_state[STATE_KEY] = LoopDetected(detection, run.stats())
        written = None
        if self.wrap_up.wanted(detection):
            written = await self.wrap_up.aask(detection, lambda: _ask(event, detection))
        event.end_turn = answer(detection, written)


async def _ask(event: AfterToolsEvent, detection: Detection) -> str | None:
    """One model call with no tool: the conversation, this batch's tool results and the request
    for a final answer. The model's text, or None if it asked for a tool again."""
    agent = event.agent
    asked = {"role": "user", "content": [*event.message["content"],
                                         {"text": wrap_up_request(detection)}]}
    texts: list[str] = []
    async for chunk in agent.model.stream([*agent.messages, asked], None, agent.system_prompt):
        if "toolUse" in chunk.get("contentBlockStart", {}).get("start", {}):
            return None
        texts.append(chunk.get("contentBlockDelta", {}).get("delta", {}).get("text", ""))
    return "".join(texts)
