"""LangChain: the tool calls of an agent that a tool runs (a sub-agent used as a tool), judged by
the outer agent's ``LoopGuardMiddleware`` when the inner agent has no middleware of its own.

A tool function that invokes another agent (``inner.invoke(...)`` inside a ``@tool``) runs a
graph the outer middleware never wraps. LangChain hands the tool's run configuration to what the
tool invokes, callbacks included, so the middleware adds one callback handler, ``InnerTools``, to
the configuration of each tool call it lets run; the inner agent's tool calls reach it before
they run (``on_tool_start``) and after (``on_tool_end`` / ``on_tool_error``):

- they are judged in a **child run** of the outer invocation's run (``"langchain-agent/inner"``,
  opened at the first of them, closed when the outer tool call ends), with the middleware's
  options, and each inner model call starts a turn of it;
- a call that goes ahead is recorded with what the inner model is shown of its result (a
  warning is logged and traced; a callback cannot add a note to the inner tool's result);
- a **skip or a kill ends the inner agent**: a callback cannot answer the call in the tool's
  place, so the handler raises ``LoopDetected`` before the tool runs, the inner agent stops, and
  the middleware answers the outer tool call with the inner agent's stop message; the outer agent
  goes on (its own run is not killed);
- a call judged elsewhere is left alone: an inner agent with its own middleware (its invocation's
  run is current then), or a ``fuzeguard.run()`` the tool opened itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager

from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._shared.calls import Once, Outcome, ToolCalls
from fuzeguard.integrations._shared.runs import open_run, within

NAME = "langchain-agent/inner"


class InnerTools(BaseCallbackHandler):
    """Judges the tool calls of the agents one outer tool call runs (see the module docstring)."""

    raise_error = True  # a skip or a kill raised in on_tool_start stops the inner tool call
    run_inline = True  # in the inner agent's own thread and context, where its run is current

    def __init__(self, calls: ToolCalls, outer: Run, call_id: str,
                 shown: Callable[[Any], Any]) -> None:
        self.calls = calls
        self.outer = outer
        self.call_id = call_id
        self.shown = shown
        self.child: Run | None = None
        self.stopped: LoopDetected | None = None  # what the handler raised to end the inner agent
        self._outer_seen = False  # the outer tool call's own start, the first this handler sees
        self._pending: dict[Any, Outcome] = {}
        self._lock = new_lock()

    def _ours(self) -> bool:
        """Whether a call made here is for this handler: the outer invocation's run is current
        (no inner middleware's run and no run the tool opened is on top of it)."""
        return open_run() is self.outer

    def _child_run(self) -> Run:
        with self._lock:
            if self.child is None:
                self.child = Run(NAME, store=None, parent=self.outer)
            return self.child

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, *, run_id: Any,
                      tool_call_id: str | None = None, inputs: dict[str, Any] | None = None,
                      **kwargs: Any) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        if not self._outer_seen:  # the outer tool call itself starts first
            self._outer_seen = True
            return
        if (tool_call_id and tool_call_id == self.call_id) or not self._ours():
            return
        child = self._child_run()
        with within(child):
            outcome = self.calls.begin(name, inputs if inputs is not None else {"input": input_str})
        if outcome.runs:
            self._pending[run_id] = outcome
            return
        if outcome.killed is not None:
            stop = outcome.error()
        else:  # a skip: the inner call cannot be answered in its place, so the inner agent ends
            detections = child.detections
            if not detections:
                return
            stop = LoopDetected(detections[-1], child.stats())
        self.stopped = stop
        raise stop

    def on_tool_end(self, output: Any, *, run_id: Any, **kwargs: Any) -> None:
        outcome = self._pending.pop(run_id, None)
        if outcome is not None:
            outcome.done(self.shown(output))

    def on_tool_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        outcome = self._pending.pop(run_id, None)
        if outcome is not None:
            outcome.fail(error)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self._new_turn()

    def on_llm_start(self, serialized: Any, prompts: Any, **kwargs: Any) -> None:
        self._new_turn()

    def _new_turn(self) -> None:
        """An inner model call starts a turn of the child run (the ladder steps once per turn)."""
        if self.child is not None and self._ours():
            self.child.end_turn()

    def close(self) -> None:
        if self.child is not None:
            self.child.close()


class InnerAgents:
    """Adds an ``InnerTools`` handler to each outer tool call's configuration (``watching``), and
    says once per tool that it runs an agent whose calls the middleware judges
    (``fuzeguard.inner_agent``)."""

    def __init__(self, calls: ToolCalls) -> None:
        self.calls = calls
        self._said = Once()

    @contextmanager
    def watching(self, request: Any, outer: Run, shown: Callable[[Any], Any]) -> Iterator[InnerTools]:
        """Inside: the tool call of ``request`` runs with the handler among its callbacks (which
        LangChain passes on to an agent the tool invokes); the handler's child run is closed at
        the end."""
        call = request.tool_call
        handler = InnerTools(self.calls, outer, call.get("id") or "", shown)
        config = getattr(getattr(request, "runtime", None), "config", None)
        if not isinstance(config, dict):
            yield handler
            return
        before = config.get("callbacks")
        config["callbacks"] = _with_handler(before, handler)
        try:
            yield handler
        finally:
            config["callbacks"] = before
            if handler.child is not None:
                self._say(call.get("name") or "tool")
            handler.close()

    def _say(self, tool: str) -> None:
        if not self._said.first(tool):
            return
        emit("info", "fuzeguard.inner_agent", fn=tool,
             message=f"the tool {tool!r} runs an agent without LoopGuardMiddleware: its tool calls "
             "are judged by the outer agent's middleware in a child run, and a loop there ends "
             "that agent (the outer agent reads its stop message as the tool's result)")


def _with_handler(callbacks: Any, handler: InnerTools) -> Any:
    """The tool call's callbacks with ``handler`` added, inherited by what the tool invokes."""
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return manager
    return [*(callbacks or ()), handler]
