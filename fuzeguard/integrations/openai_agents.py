"""OpenAI Agents SDK: ``LoopGuard``, a pair of tool guardrails for every function tool of an agent.

``LoopGuard(...).protect(agent)`` adds a tool input guardrail and a tool output guardrail to each
``FunctionTool`` of the agent (the tools' functions are not touched). The input guardrail judges
the call before it runs: a skip is ``reject_content`` (the model gets the detection's message as
the tool's output; the tool does not run); a kill is ``raise_exception``, so ``Runner.run`` raises
``ToolInputGuardrailTripwireTriggered`` whatever the tool's ``failure_error_function`` is, with
the ``LoopDetected`` (detection and run stats) as ``exc.output.output_info``. The output
guardrail records what the tool returned. Calls are judged in the current ``fuzeguard.run()``.

Install with ``pip install 'fuzeguard[openai-agents]'``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from agents import Agent, FunctionTool, ToolGuardrailFunctionOutput
from agents.tool_guardrails import (
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard._private.run import current_run
from fuzeguard.integrations._calls import Outcome, ToolCalls

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import ToolOptions

_MAX_IN_FLIGHT = 1024  # calls whose output never came (the tool raised): forgotten oldest first


class LoopGuard:
    """Guard the function tools of OpenAI Agents SDK agents against loops.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name. Don't also ``guard()`` the tools' functions: each call would count twice.
    """

    def __init__(self, **options: Unpack[ToolOptions]) -> None:
        self.calls = ToolCalls(**options)
        self._in_flight: OrderedDict[str, Outcome] = OrderedDict()
        self._lock = threading.Lock()
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._before, name="fuzeguard"
        )
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._after, name="fuzeguard"
        )

    def protect(self, agent: Agent[Any]) -> Agent[Any]:
        """Add the guardrails to every function tool of ``agent`` (once); returns the agent."""
        for tool in agent.tools:
            if isinstance(tool, FunctionTool):
                self.tool(tool)
        return agent

    def tool(self, tool: FunctionTool) -> FunctionTool:
        """Add the guardrails to one function tool (once); returns the tool."""
        inputs = list(tool.tool_input_guardrails or [])
        if self.input_guardrail not in inputs:
            tool.tool_input_guardrails = [*inputs, self.input_guardrail]
        outputs = list(tool.tool_output_guardrails or [])
        if self.output_guardrail not in outputs:
            tool.tool_output_guardrails = [*outputs, self.output_guardrail]
        return tool

    def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        outcome = self.calls.begin(context.tool_name, _arguments(context.tool_arguments))
        if outcome.killed is not None:
            error = LoopDetected(outcome.killed, current_run().stats())
            return ToolGuardrailFunctionOutput.raise_exception(output_info=error)
        if outcome.skipped is not None:
            value = outcome.skipped.value
            return ToolGuardrailFunctionOutput.reject_content(
                value if isinstance(value, str) else json.dumps(value, default=str),
                output_info=value,
            )
        with self._lock:
            self._in_flight[context.tool_call_id] = outcome
            while len(self._in_flight) > _MAX_IN_FLIGHT:
                self._in_flight.popitem(last=False)
        return ToolGuardrailFunctionOutput.allow()

    def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        with self._lock:
            outcome = self._in_flight.pop(data.context.tool_call_id, None)
        if outcome is not None:
            outcome.done(data.output)
        return ToolGuardrailFunctionOutput.allow()


def _arguments(text: str) -> dict[str, Any]:
    """The tool call's arguments as the model sent them (JSON text)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}
