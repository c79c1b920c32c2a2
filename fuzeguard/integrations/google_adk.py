"""Google ADK: ``LoopGuardPlugin``, a runner plugin that guards every tool of every agent it runs.

``Runner(app=App(name="shop", root_agent=agent, plugins=[LoopGuardPlugin(on_loop="kill")]), ...)``:
the plugin's callbacks see every tool call of the runner's agents,
sub-agents and agents called through ``AgentTool`` (which inherit the runner's plugins); the tools
are not touched. Each ``run_async`` is judged in a run of its own (``_runs.py``): a run the user
opened around it wins (``KeyedRuns`` makes a conversation of several invocations one run), and an
agent called through ``AgentTool`` gets a child run.

- a skip answers the call with ``{"result": message}``: the tool does not run, the model reads it;
- a warn lets the call run and adds ``{"loop_warning": message}`` to its result, for the model;
- a kill answers the call with ``{"error": stop message}``, and ``run_async`` ends with a final
  response event the application can show: with ``wrap_up=True`` (the default) the next model
  call is made with no tool declared and a request for a final answer, with the detection's
  message as the reason, last (ADK makes that call, so the model's own timeout bounds it), and
  the model's text is that event; a tool it still asks for is answered with the stop message, and
  the model call after it, as every model call with ``wrap_up=False``, is answered by the plugin
  with the canned final text (the model is not asked); ``killed(session_id)``
  is the ``LoopDetected`` of the session's last killed invocation (ADK wraps an exception raised
  in a plugin in a ``RuntimeError``, so the plugin does not raise it).

Each model call ends a turn of a run the invocation opened (the ladder steps once per turn).

Model calls (``_model_calls``): ``after_model_callback`` records each model response (not a
streamed partial one) in the invocation's ``"NAME/model"`` run: its function calls, else a
digest of its text, and ``usage_metadata.total_token_count`` as its cost. A call that names a
tool the agent was not offered in that request is recorded as rejected: ADK answers it with its
own "Tool '...' not found" error (the tool is not judged a second time as a tool call), and the
same rejected call again ends the invocation as a kill does: its calls are answered with the
stop message and the next model call is the final answer's. ``max_model_calls`` (off by
default; ADK's own ``RunConfig.max_llm_calls`` raises ``LlmCallsLimitExceededError`` instead)
ends the invocation in ``before_model_callback`` instead of the call past the limit, which is
made as the final answer's. Not judged as model calls: arguments a tool does not take (ADK's
``FunctionTool`` answers a missing argument with an error result, judged as that tool's call:
the same call failing the same way ends the run as a tool loop), and text answers (ADK takes a
response without function calls as the final one, so text never repeats within an invocation).
Install with ``pip install 'fuzeguard[google-adk]'``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard.integrations._shared.calls import (
    ToolCalls,
    final_answer,
    stop_message,
    warning_note,
    wrap_up_request,
)
from fuzeguard.integrations._shared.hooked import Invocations
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.wrap_up import WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

_MAX_KILLED = 1024  # sessions whose last kill is kept for ``killed``


class LoopGuardPlugin(BasePlugin):
    """Guard every tool call of an ADK runner against loops.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus ``wrap_up`` (see the
    module docstring) and ``max_model_calls`` (a whole number, or None: no limit). Don't also
    ``guard()`` the tools' functions: each call would count twice.
    """

    def __init__(self, *, name: str = "fuzeguard", wrap_up: bool = True,
                 max_model_calls: int | None = None, **options: Unpack[ToolOptions]) -> None:
        super().__init__(name)
        self.wrap_up = WrapUp(wrap_up)  # ADK makes the call: the model's timeout holds
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)
        self._invocations = Invocations()
        self._killed: OrderedDict[str, LoopDetected] = OrderedDict()
        self._wrapped: OrderedDict[str, None] = OrderedDict()  # invocations asked for an answer
        self._lock = new_lock()

    def killed(self, session_id: str) -> LoopDetected | None:
        """The ``LoopDetected`` of the last invocation of session ``session_id`` that a kill
        ended (its detection, and the stats of the run it killed), or None."""
        return self._killed.get(session_id)

    # ------------------------------------------------------------------ one run per invocation

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        agent = invocation_context.agent
        self._invocations.start(invocation_context.invocation_id, agent.name if agent else "adk")
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        self._end(invocation_context.invocation_id)

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        self._end(invocation_context.invocation_id)

    def _end(self, invocation_id: str) -> None:
        invocation = self._invocations.find(invocation_id)
        if invocation is not None:
            self.model_calls.close(invocation.run)
        self._invocations.end(invocation_id)

    # ------------------------------------------------------------------ tool calls

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        invocation = self._invocations.get(tool_context.invocation_id)
        if invocation.ended is not None:  # a model call ended the invocation
            return {"error": stop_message(invocation.ended)}
        if invocation.offered is not None and tool.name not in invocation.offered:
            return None  # rejected by ADK ("not found"), judged as the model call it came in
        outcome = invocation.begin(self.calls, tool.name, tool_args, tool_context.function_call_id)
        if outcome.skipped is not None:
            return {"result": outcome.skipped.value}
        if outcome.killed is not None:
            return {"error": stop_message(outcome.killed)}
        return None

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: Any,
    ) -> dict[str, Any] | None:
        invocation = self._invocations.get(tool_context.invocation_id)
        outcome = invocation.end(tool_context.function_call_id)
        if outcome is None:
            return None
        outcome.done(result)
        detection = outcome.warning
        notes = outcome.run_notes()
        if detection is None and not notes:
            return None
        # ADK shows the model a tool's dict as it is, anything else as {"result": value}.
        shown = result if isinstance(result, dict) else {"result": result}
        if detection is not None:
            shown = {**shown, "loop_warning": warning_note(detection)}
        if notes:
            shown = {**shown, "note": "\n\n".join(notes)}
        return shown

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        invocation = self._invocations.get(tool_context.invocation_id)
        outcome = invocation.end(tool_context.function_call_id)
        if outcome is not None:
            outcome.fail(error)
        return None

    # ------------------------------------------------------------------ ending the invocation

    def _wrapping(self, invocation_id: str) -> bool:
        """Whether the invocation's model call after the kill is its first (asked for a final
        answer): True once per invocation."""
        with self._lock:
            if invocation_id in self._wrapped:
                return False
            self._wrapped[invocation_id] = None
            while len(self._wrapped) > _MAX_KILLED:
                self._wrapped.popitem(last=False)
        return True

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """A new model turn; after a kill (or ``max_model_calls`` reached), the final answer
        instead of asking the model."""
        invocation = self._invocations.get(callback_context.invocation_id)
        invocation.offered = frozenset(llm_request.tools_dict)
        run = invocation.run
        detection = run.killed or invocation.ended
        if detection is None:
            detection = invocation.ended = self.model_calls.over_limit(run)
        if detection is None:
            if invocation.owned:  # the model turns of a run the invocation opened
                run.end_turn()
            return None
        judged = run if run.killed is not None else self.model_calls.run_of(run)
        with self._lock:
            self._killed[callback_context.session.id] = LoopDetected(detection, judged.stats())
            while len(self._killed) > _MAX_KILLED:
                self._killed.popitem(last=False)
        if self.wrap_up.wanted(detection) and self._wrapping(callback_context.invocation_id):
            # ADK makes this call with no tool declared and the request for a final answer
            # last; a tool the model still asks for is answered with the stop message, and the
            # call after it with the canned final answer.
            asked = types.Part(text=wrap_up_request(detection))
            llm_request.contents.append(types.Content(role="user", parts=[asked]))
            if llm_request.config is not None:
                llm_request.config.tools = None
                llm_request.config.tool_config = None
            return None
        return LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=final_answer(detection))]),
            turn_complete=True,
        )

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """Record the model call (``_model_calls``); one that ends the invocation is kept, its
        calls answered with the stop message, and the next model call is the final answer's."""
        content = llm_response.content
        if llm_response.partial or content is None:
            return None
        invocation = self._invocations.get(callback_context.invocation_id)
        run = invocation.run
        if run.killed is not None or invocation.ended is not None:
            return None  # the final answer's call
        parts = content.parts or []
        calls = [(part.function_call.name or "", dict(part.function_call.args or {}))
                 for part in parts if part.function_call is not None]
        text = "".join(part.text for part in parts if part.text and not part.thought)
        offered = invocation.offered
        usage = llm_response.usage_metadata
        invocation.ended = self.model_calls.record(
            run, calls, None if calls else text,
            rejected=offered is not None and any(name not in offered for name, _ in calls),
            final=not calls, tokens=usage.total_token_count if usage is not None else None,
        )
        return None
