"""CrewAI: ``LoopGuard``, tool-call and LLM-call hooks that guard every tool of every crew.

CrewAI answers a repeated identical tool call from its tool cache, so a guarded function never
sees the repeats. ``before_tool_call`` runs before that cache: ``LoopGuard(...).register()`` adds
hooks that judge every tool call, cached or not (the tools are not touched). A skip blocks the call
and ``after_tool_call`` replaces CrewAI's "blocked" text with the detection's message, which the
model reads. A kill blocks the call, answers it with the stop message, and a ``before_llm_call``
hook then blocks every further LLM call of the killed run, so the crew's agent gets no further
turn: CrewAI raises ``LLMCallBlockedError`` out of ``crew.kickoff()``. Calls are judged in the
current ``fuzeguard.run()``. Hooks are process-wide in CrewAI: ``unregister()`` removes them.

Install with ``pip install 'fuzeguard[crewai]'``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from crewai.hooks import (
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)

from fuzeguard._private.run import current_run
from fuzeguard.integrations._calls import Outcome, ToolCalls, stop_message

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import ToolOptions

_MAX_IN_FLIGHT = 1024


class LoopGuard:
    """Guard every CrewAI tool call against loops. Options are those of ``guard()`` (``on_loop``,
    thresholds, ``on_detect``...), applied to each tool by its name. Don't also ``guard()`` the
    tools' functions: each call would count twice (and CrewAI's cache hides repeats from them)."""

    def __init__(self, **options: Unpack[ToolOptions]) -> None:
        self.calls = ToolCalls(**options)
        self._in_flight: OrderedDict[int, tuple[Any, Outcome]] = OrderedDict()
        self._lock = threading.Lock()

    def register(self) -> LoopGuard:
        """Add the hooks (process-wide, as CrewAI's hooks are); returns ``self``."""
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)
        register_before_llm_call_hook(self.before_llm_call)
        return self

    def unregister(self) -> None:
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)
        unregister_before_llm_call_hook(self.before_llm_call)

    def before_tool_call(self, context: Any) -> bool | None:
        outcome = self.calls.begin(context.tool_name, context.tool_input)
        with self._lock:
            # The after hook gets another context object with the same tool_input dict.
            self._in_flight[id(context.tool_input)] = (context.tool_input, outcome)
            while len(self._in_flight) > _MAX_IN_FLIGHT:
                self._in_flight.popitem(last=False)
        return None if outcome.runs else False

    def after_tool_call(self, context: Any) -> str | None:
        with self._lock:
            entry = self._in_flight.pop(id(context.tool_input), None)
        if entry is None or entry[0] is not context.tool_input:
            return None
        outcome = entry[1]
        if outcome.skipped is not None:
            value = outcome.skipped.value
            return value if isinstance(value, str) else str(value)
        if outcome.killed is not None:
            return stop_message(outcome.killed)
        outcome.done(context.raw_tool_result)
        return None

    def before_llm_call(self, context: Any) -> bool | None:
        return False if current_run().killed is not None else None
