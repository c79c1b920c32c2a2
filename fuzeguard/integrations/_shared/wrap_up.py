"""A final answer the model writes after a kill: one model call, without tools, bounded in time.

smolagents and CrewAI, at their own limits, ask the model once more for a final answer written
from what it found; users ask for the same when a loop is stopped. Where the framework lets the
integration make one more model call, a kill ends the agent with the model's answer to
``wrap_up_request`` (the detection's message is the reason; no tool is offered, and no tool runs
after the kill), within ``timeout`` seconds; the canned ``final_answer`` stays the fallback when
the model fails, takes longer, answers nothing, or asks for a tool again. ``WrapUp(enabled=False)``
keeps the canned answer (the model is not asked again), and so does a kill by a cost or time
budget (``max_cost``, ``max_duration``: one more model call would go past it). The kill's
``LoopDetected`` stays available as before.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.log import emit
from fuzeguard.integrations._shared.calls import final_answer

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0  # seconds the model gets for its final answer


class WrapUp:
    """Whether a kill asks the model for its final answer (``enabled``), and for how long."""

    __slots__ = ("enabled", "timeout")

    def __init__(self, enabled: bool = True, timeout: float = DEFAULT_TIMEOUT) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"wrap_up takes True or False, got {enabled!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < 1e9:
            raise ValueError(f"wrap_up_timeout takes a number of seconds above 0, got {timeout!r}: "
                             f"the default is {DEFAULT_TIMEOUT:g}")
        self.enabled = enabled
        self.timeout = float(timeout)

    def wanted(self, detection: Detection) -> bool:
        """Whether a kill by ``detection`` asks the model for its final answer: not when it is off,
        nor when a cost or time budget ended the run (one more model call would go past it)."""
        return self.enabled and not (
            detection.kind == "limit" and detection.pattern in ("max_cost", "max_duration"))

    def ask(self, detection: Detection, call: Callable[[], T]) -> T | None:
        """``call()`` (the model's final answer), in a thread of this context, or None if it
        failed or took longer than ``timeout`` (its late answer is dropped)."""
        box: list[T | Exception] = []
        context = contextvars.copy_context()

        def work() -> None:
            try:
                box.append(context.run(call))
            except Exception as exc:
                box.append(exc)

        thread = threading.Thread(target=work, name="fuzeguard-wrap-up", daemon=True)
        thread.start()
        thread.join(self.timeout)
        return self._taken(detection, box[0] if box else None)

    async def aask(self, detection: Detection, call: Callable[[], Awaitable[T]]) -> T | None:
        """``ask`` for a coroutine."""
        result: T | Exception | None
        try:
            result = await asyncio.wait_for(call(), self.timeout)
        except asyncio.TimeoutError:
            result = None
        except Exception as exc:
            result = exc
        return self._taken(detection, result)

    def final(self, detection: Detection, call: Callable[[], T],
              read: Callable[[T], Any] = lambda reply: reply) -> str:
        """The final answer after a kill by ``detection``: the model's own when ``wanted``
        (``call()`` asked within ``timeout``, its reply's text taken by ``read``), else the
        canned one."""
        if not self.wanted(detection):
            return final_answer(detection)
        reply = self.ask(detection, call)
        return answer(detection, None if reply is None else read(reply))

    async def afinal(self, detection: Detection, call: Callable[[], Awaitable[T]],
                     read: Callable[[T], Any] = lambda reply: reply) -> str:
        """``final`` for a coroutine."""
        if not self.wanted(detection):
            return final_answer(detection)
        reply = await self.aask(detection, call)
        return answer(detection, None if reply is None else read(reply))

    def _taken(self, detection: Detection, result: T | Exception | None) -> T | None:
        if result is None or isinstance(result, Exception):
            emit("warning", "fuzeguard.wrap_up_failed", fn=detection.fn, run_id=detection.run_id,
                 error=f"no answer within {self.timeout:g} s" if result is None
                 else exception_text(result),
                 message="the model was asked for its final answer after the kill and gave none; "
                 "the agent ends with the canned final answer")
            return None
        return result


def answer(detection: Detection, text: Any) -> str:
    """The final answer: the model's text if it wrote one, else the canned ``final_answer``."""
    if isinstance(text, str) and text.strip():
        return text
    return final_answer(detection)
