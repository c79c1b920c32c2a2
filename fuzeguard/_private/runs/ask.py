"""The ``ask`` action: a person decides what happens to a call a layer flagged.

``on_loop = ["warn", "ask", "kill"]`` puts a question to the run's ``ask`` callback
(``fuzeguard.run(ask=...)``) at that step of the ladder. The callback gets a ``Question`` (the
detection, the call's function and the run) and answers ``"continue"``, ``"skip"`` or ``"kill"``
— directly, or later through a ``concurrent.futures.Future`` it returns, or as a coroutine
function. It runs in a worker thread of its own (an async one in an event loop of its own there),
and the guard waits for it at most ``ask_timeout`` seconds: no answer in time, an answer that is
not one of the three, a callback that raises (``asyncio.CancelledError`` of a dismissed answer
included) or no callback at all, and the answer is ``"kill"``. An async tool awaits the answer off
its event loop's thread: the loop's other tasks go on meanwhile, and an answer the app gives
through that loop arrives.

A callback still running from a question it did not answer in time counts as hanging: until it
returns, later questions to it are answered ``"kill"`` at once, logged, rather than leave one more
thread (holding its run) behind each, as ``on_detect`` hooks are skipped.

There is no "allow always": ``continue`` lets this call go ahead with a warning and raises the
bar for the pattern — the guard warns, and asks again only once the pattern has been detected
twice as many times as when it asked.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock

if TYPE_CHECKING:
    import concurrent.futures

    from fuzeguard._private.protocols import RunHandle

Answer = Literal["continue", "skip", "kill"]
ANSWERS: tuple[str, ...] = ("continue", "skip", "kill")
# What the answer to an unanswered question is.
NO_ANSWER: Answer = "kill"
# The action a continue takes for the call it was asked about.
ACTION_OF = {"continue": "warn", "skip": "skip", "kill": "kill"}

# Callbacks that did not answer in time, by id, with the thread still running them.
_hanging: dict[int, threading.Thread] = {}
_hanging_lock = new_lock()


@dataclass(frozen=True, slots=True)
class Question:
    """What the ``ask`` callback is asked about: ``detection`` (which layer fired, why, and
    its message for the model), the function ``fn`` about to be called, and the ``run`` (its
    ``report()`` and ``stats()``)."""

    detection: Detection
    fn: str
    run: RunHandle


AskHook = Callable[
    [Question], Union[Answer, str, "concurrent.futures.Future[str]", Awaitable[str]]
]


def answer(hook: AskHook | None, question: Question, timeout: float) -> Answer:
    """Ask ``hook`` and wait at most ``timeout`` seconds; ``"kill"`` whenever there is no good
    answer in time (each such case logged)."""
    run = question.run
    if hook is None:
        _log(run, question, "no ask callback is set (fuzeguard.run(ask=...)); the answer is kill")
        return NO_ANSWER
    if _hanging and _still_hanging(hook):
        _log(run, question, "the ask callback is still running from an earlier question it did "
             "not answer within ask_timeout; the answer is kill")
        return NO_ANSWER
    import concurrent.futures  # only here: a run that never asks need not load it

    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            value = context.run(hook, question)
            if inspect.isawaitable(value):
                import asyncio  # only here: importing it costs every start-up tens of ms

                value = asyncio.run(_awaited(value))
            if isinstance(value, concurrent.futures.Future):
                value = value.result(timeout=timeout)
            done.set_result(value)
        except BaseException as exc:
            done.set_exception(exc)

    worker = threading.Thread(target=work, name="fuzeguard-ask", daemon=True)
    worker.start()
    try:
        value = done.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        if worker.is_alive():
            with _hanging_lock:
                _hanging[id(hook)] = worker
        _log(run, question, f"no answer within ask_timeout ({timeout:g}s); the answer is kill")
        return NO_ANSWER
    except BaseException as exc:  # raised in the callback's thread, not this one's interruption
        _log(run, question, "the ask callback raised; the answer is kill",
             error=exception_text(exc))
        return NO_ANSWER
    if value not in ANSWERS:
        _log(run, question, f'the ask callback answered {value!r}, not "continue", "skip" or '
             '"kill"; the answer is kill')
        return NO_ANSWER
    emit("info", "fuzeguard.asked", run_id=run.id, run_name=run.name, fn=question.fn,
         layer=question.detection.layer, answer=value)
    return value  # type: ignore[no-any-return]


def _still_hanging(hook: AskHook) -> bool:
    """Whether ``hook`` is still running from a question it did not answer in time."""
    with _hanging_lock:
        for key in [k for k, t in _hanging.items() if not t.is_alive()]:
            del _hanging[key]
        return id(hook) in _hanging


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _log(run: RunHandle, question: Question, message: str, **fields: Any) -> None:
    emit("warning", "fuzeguard.ask_unanswered", run_id=run.id, run_name=run.name,
         fn=question.fn, layer=question.detection.layer, message=message, **fields)
