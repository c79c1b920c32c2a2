"""smolagents: ``LoopGuard``, which guards every tool of an agent and its managed agents, and the
older ``guarded_tool`` / ``stop_on_kill`` pair.

``LoopGuard(on_loop="skip").protect(agent)`` guards every tool of a ``ToolCallingAgent`` or
``CodeAgent`` (``@tool`` functions and ``Tool`` subclasses alike) and of its managed agents, at any
depth: each agent gets its own copies of its tools, whose ``forward`` is guarded (the originals are
not touched). Each ``agent.run()`` is a run of its own; a ``fuzeguard.run()`` current at the call
wins, and a managed agent gets a child run of its manager's. The run follows the agent's tools into
the threads they run in (a ``CodeAgent`` runs its code in a worker thread).

A skip answers the call with the detection's message; a warned text result carries a short note
for the model (after any other result, the note is added to the step's observations, which the
model reads next: a ``CodeAgent``'s code gets the result as it is); a kill answers the call with
the stop message and ends ``agent.run()`` after that step with a final answer as its result: the
model's own, asked through smolagents' own request for a final answer (``provide_final_answer``,
as at ``max_steps``: the agent's memory and no tool), with the detection's message as the reason
(``wrap_up=True``, the default, within ``wrap_up_timeout`` seconds), else the canned one
(``wrap_up=False``, or when the model fails, is late or answers nothing); or, with
``exit_behavior="error"``, it raises ``LoopDetected`` (its stats are the killed run's). With
``stream=True`` the final answer is the last ``FinalAnswerStep`` (the canned one). To make the runs of one
conversation one run: ``with conversations.run_for(conversation_id): agent.run(...)``
(``fuzeguard.integrations.KeyedRuns``).

Model calls (``_model_calls``): each agent step (``ActionStep``) is a model call, recorded by
the step callback in the invocation's ``"NAME/model"`` run: the tool calls of its
``model_output_message`` (a ``CodeAgent``'s: its code, as ``python_interpreter``), else a digest
of its text, and ``token_usage.total_tokens`` as its cost. A step whose ``error`` says the tool
does not exist (``AgentToolExecutionError`` "Unknown tool"), the arguments are not the tool's
(``AgentToolCallError``: smolagents checks them before the tool runs, so the guarded tool never
sees them) or the output cannot be parsed (``AgentParsingError``) is a rejected call; a text
that is neither final nor rejected is ``model.text``. The same rejected call again ends the run
after that step as a kill does (the model's final answer; a streamed run's is the canned one).
``max_model_calls`` (off by default; smolagents' own ``max_steps`` asks for a final answer too)
ends the run the same way after the step that reaches it, before the next model call. Not
recorded: planning steps (``planning_interval``).

Older: ``guarded_tool(fn)`` is ``smolagents.tool(guard(fn))``, and ``stop_on_kill`` is a step
callback that raises ``LoopDetected`` once the current run is killed.

Install with ``pip install 'fuzeguard[smolagents]'``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from smolagents import Tool, tool
from smolagents.memory import ActionStep, FinalAnswerStep
from smolagents.utils import (
    AgentMaxStepsError,
    AgentParsingError,
    AgentToolCallError,
    AgentToolExecutionError,
)

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.guard import guard
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._shared.calls import (
    ExitBehavior,
    ToolCalls,
    final_answer,
    stop_message,
    with_notes,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import exit_behavior as exit_behavior_of
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.runs import invocation, new_run, user_run, within
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp, answer

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import GuardOptions, ToolOptions

_MARK = "_fuzeguard_protected"


class LoopGuard:
    """Guard every tool of smolagents agents against loops (``protect(agent)``).

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name, plus ``exit_behavior``, ``wrap_up``, ``wrap_up_timeout`` and
    ``max_model_calls``. Don't also ``guard()`` the tools' functions: each call would count twice.
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 wrap_up_timeout: float = DEFAULT_TIMEOUT, max_model_calls: int | None = None,
                 **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.wrap_up = WrapUp(wrap_up, wrap_up_timeout)
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)

    def protect(self, agent: Any) -> Any:
        """Guard ``agent``'s tools and runs, and those of its managed agents (once); returns it."""
        if getattr(agent, _MARK, False):
            return agent
        setattr(agent, _MARK, True)
        box: list[Run | None] = [None]  # the run of the agent's invocation under way
        notes: list[str] = []  # notes that came with results that are not text, for the step
        for name, found in list(agent.tools.items()):
            if name != "final_answer" and isinstance(found, Tool):
                agent.tools[name] = self._tool(found, box, notes)
        for managed in getattr(agent, "managed_agents", {}).values():
            self.protect(managed)
        agent.step_callbacks.register(ActionStep, _after_step(box, notes, self.model_calls))
        agent.run = self._run(agent.run, box, getattr(agent, "name", None) or "smolagents-run")
        return agent

    def _tool(self, original: Tool, box: list[Run | None], notes: list[str]) -> Tool:
        """A copy of ``original`` whose calls are guarded, in the run in ``box``; the notes for
        the model that come with a result that is not text wait in ``notes`` for the step's
        end (``_after_step``)."""
        copied = copy.copy(original)
        forward = original.forward
        calls = self.calls
        name = original.name

        @functools.wraps(forward)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            arguments = dict(zip(original.inputs, args, strict=False)) | kwargs
            run = box[0]
            if run is None:
                outcome, result = calls.call(name, arguments, lambda: forward(*args, **kwargs))
            else:
                with within(run):
                    outcome, result = calls.call(name, arguments, lambda: forward(*args, **kwargs))
            if outcome.runs:
                if isinstance(result, str):
                    return with_notes(result, outcome)
                notes.extend(outcome.notes())
                return result
            if outcome.skipped is not None:
                return outcome.skipped.value
            assert outcome.killed is not None
            return stop_message(outcome.killed)

        copied.forward = guarded
        return copied

    def _run(self, run_agent: Callable[..., Any], box: list[Run | None], name: str) -> Callable[..., Any]:
        guard_self = self

        @functools.wraps(run_agent)
        def run(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("stream"):
                return guard_self._stream(run_agent, box, name, args, kwargs)
            previous = box[0]
            with invocation(name) as current:
                box[0] = current
                _new_turn(current)
                try:
                    return run_agent(*args, **kwargs)
                except LoopDetected as exc:
                    if guard_self.exit_behavior == "error":
                        raise
                    return guard_self._final(getattr(run_agent, "__self__", None), exc.detection)
                finally:
                    box[0] = previous
                    guard_self.model_calls.close(current)

        return run

    def _final(self, agent: Any, detection: Detection) -> str:
        """The final answer after a kill: the model's own, from smolagents' own request for a
        final answer (``provide_final_answer``, what it asks at ``max_steps``: the agent's memory,
        no tool), the task followed by the request with the detection's message as the reason
        (``wrap_up``); else the canned one."""
        if not self.wrap_up.wanted(detection) or not hasattr(agent, "provide_final_answer"):
            return final_answer(detection)
        task = f"{getattr(agent, 'task', '') or ''}\n\n{wrap_up_request(detection)}".strip()
        reply = self.wrap_up.ask(detection, lambda: agent.provide_final_answer(task))
        content = getattr(reply, "content", None)
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        if getattr(reply, "tool_calls", None) or not isinstance(content, str) or content.startswith(
                "Error in generating final LLM output"):  # smolagents' text for a failed call
            content = None
        return answer(detection, content)

    def _stream(self, run_agent: Callable[..., Any], box: list[Run | None], name: str,
                args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Any]:
        mine = user_run()
        current = mine if mine is not None else new_run(name)
        box[0] = current
        if mine is None:
            current.end_turn()  # as _new_turn: the guard's own run
        with within(current):
            steps = run_agent(*args, **kwargs)
        try:
            while True:
                with within(current):
                    try:
                        step = next(steps)
                    except StopIteration:
                        return
                    except LoopDetected as exc:
                        if self.exit_behavior == "error":
                            raise
                        yield FinalAnswerStep(output=final_answer(exc.detection))
                        return
                yield step
        finally:
            box[0] = None
            self.model_calls.close(current)
            if mine is None:
                current.close()


def _new_turn(run: Run) -> None:
    """The agent's next step is a model turn of a run the guard opened: the ladder steps once
    per turn for the tool calls it asks for together (a run the user opened is left alone)."""
    if user_run() is None:
        run.end_turn()


def _after_step(box: list[Run | None], notes: list[str], model_calls: ModelCalls) -> Callable[..., None]:
    """The step callback: the notes that came with results that are not text go into the step's
    observations (what the model reads of the step next); the step's model call is recorded; a
    killed run, or a model call that ends it, ends the agent's run."""

    def stop(step: Any, agent: Any = None) -> None:
        if notes:
            taken = notes.copy()
            del notes[:len(taken)]  # one a tool still running adds meanwhile waits for its step
            seen = step.observations
            step.observations = "\n\n".join([seen, *taken] if seen else taken)
        run = box[0]
        if run is None:
            return
        detection = run.killed
        if detection is not None:
            raise LoopDetected(detection, run.stats())
        detection = _model_call(model_calls, run, step)
        if detection is not None:
            raise LoopDetected(detection, model_calls.run_of(run).stats())
        _new_turn(run)

    return stop


def _model_call(model_calls: ModelCalls, run: Run, step: Any) -> Detection | None:
    """Record the model call of ``step`` (``_model_calls``): the detection that ends the agent's
    run after it (a repeated rejection, or ``max_model_calls`` reached), or None."""
    message = getattr(step, "model_output_message", None)
    if message is None or step.is_final_answer or isinstance(step.error, AgentMaxStepsError):
        return None  # no model call of its own, or the run ends with it anyway
    asked = message.tool_calls or []
    calls = [(call.function.name, call.function.arguments) for call in asked] or [
        (call.name, call.arguments) for call in step.tool_calls or []]
    text = message.content if isinstance(message.content, str) else str(step.model_output or "")
    usage = step.token_usage
    return model_calls.record(
        run, calls, None if calls else text, rejected=_rejected(step.error), final=False,
        tokens=usage.total_tokens if usage is not None else None,
    ) or model_calls.over_limit(run)


def _rejected(error: Any) -> bool:
    """Whether a step's ``error`` says smolagents refused what the model asked for: a tool that
    does not exist, arguments the tool does not take, an output it cannot parse."""
    if isinstance(error, (AgentParsingError, AgentToolCallError)):
        return True
    return isinstance(error, AgentToolExecutionError) and str(error).startswith("Unknown tool ")


def stop_on_kill(step: Any, agent: Any = None) -> None:
    """Step callback: raise ``LoopDetected`` once the current run is killed."""
    run = current_run()
    detection = run.killed
    if detection is not None:
        raise LoopDetected(detection, run.stats())


def guarded_tool(fn: Callable[..., Any], **options: Unpack[GuardOptions]) -> Tool:
    """``smolagents.tool(guard(fn, **options))``: a tool whose calls are guarded (the function
    needs smolagents' docstring with an ``Args:`` section, as for ``@tool``)."""
    return tool(guard(fn, **options))
