"""LangChain / LangGraph 1.x: ``LoopGuardMiddleware``, an ``AgentMiddleware`` for ``create_agent``.

It guards every tool call of the agent without touching the tools (``wrap_tool_call`` /
``awrap_tool_call``): a skip is answered with a ``ToolMessage`` carrying the detection's message;
a kill is answered with a ``ToolMessage`` (``status="error"``) and then, as with the built-in
``ToolCallLimitMiddleware``, ``exit_behavior`` decides: ``"end"`` (default) ends the agent with a
final ``AIMessage`` saying why (the model is not asked again), ``"error"`` raises
``LoopDetected`` from ``invoke``, ``"continue"`` lets the model go on (every later call is
refused: a kill is sticky). Calls are judged in the current ``fuzeguard.run()``.

Install with ``pip install 'fuzeguard[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard._private.records import Detection
from fuzeguard._private.run import current_run
from fuzeguard.integrations._calls import Outcome, ToolCalls

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import ToolOptions

ExitBehavior = Literal["end", "error", "continue"]
_MARK = "fuzeguard"  # key in a refused call's ToolMessage.artifact (never sent to the model)


def final_message(detection: Detection) -> str:
    """The final ``AIMessage`` text of an agent ended by a kill (shown to the user)."""
    return (
        f"Stopped: the agent was looping ({detection.layer} at tool call {detection.call_index}, "
        f"`{detection.fn}`). {detection.message}"
    )


class LoopGuardMiddleware(AgentMiddleware):
    """Guard every tool of a LangChain agent against loops.

    ``create_agent(model, tools, middleware=[LoopGuardMiddleware(on_loop=["warn", "skip",
    "kill"])])``. Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...),
    applied to each tool by its name (``[functions.NAME]`` in fuze.toml applies too), plus
    ``exit_behavior``. Don't also ``guard()`` the tool functions: each call would count twice.
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", **options: Unpack[ToolOptions]) -> None:
        super().__init__()
        if exit_behavior not in ("end", "error", "continue"):
            raise ValueError(
                f"exit_behavior must be 'end', 'error' or 'continue', got {exit_behavior!r}"
            )
        self.exit_behavior = exit_behavior
        self.calls = ToolCalls(**options)

    # ------------------------------------------------------------------ tool calls

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        outcome, result = self.calls.call(
            call["name"], call.get("args"), lambda: handler(request), shown=_shown
        )
        return result if outcome.runs else self._answer(call, outcome)

    async def awrap_tool_call(
        self, request: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        call = request.tool_call
        outcome, result = await self.calls.acall(
            call["name"], call.get("args"), lambda: handler(request), shown=_shown
        )
        return result if outcome.runs else self._answer(call, outcome)

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
        if self.exit_behavior == "error":
            raise LoopDetected(detection, current_run().stats())
        return ToolMessage(
            content=detection.message,
            tool_call_id=call["id"],
            name=call["name"],
            status="error",
            artifact={_MARK: "kill"},
        )

    # ------------------------------------------------------------------ ending the agent

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        final = self._final_if_killed(request.messages)
        return final if final is not None else handler(request)

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        final = self._final_if_killed(request.messages)
        return final if final is not None else await handler(request)

    def _final_if_killed(self, messages: list[Any]) -> AIMessage | None:
        """After a tool step in which a call was killed, answer the model call with a final
        ``AIMessage`` (no tool calls: the agent ends there) instead of asking the model again.

        Done inside the model step rather than in a ``before_model`` hook with
        ``jump_to="end"``: a hook is one more graph step per turn, and under LangChain's
        recursion limit of 25 that leaves the model 8 turns instead of 13.
        """
        if self.exit_behavior != "end":
            return None
        for message in reversed(messages):
            if not isinstance(message, ToolMessage):
                break
            artifact = message.artifact
            if isinstance(artifact, dict) and artifact.get(_MARK) == "kill":
                detection = current_run().killed
                text = final_message(detection) if detection is not None else (
                    f"Stopped: the agent was looping. {message.content}"
                )
                return AIMessage(text)
        return None


def _shown(result: Any) -> Any:
    """What the model is shown of a tool's answer: a ``ToolMessage``'s content and status (its
    id changes on every call); anything else (a ``Command``) as it is."""
    if isinstance(result, ToolMessage):
        return {"content": result.content, "status": result.status}
    return result
