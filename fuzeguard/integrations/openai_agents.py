"""OpenAI Agents SDK: ``LoopGuard``, a pair of tool guardrails for every function tool of an agent tree.

``LoopGuard(...).protect(agent)`` adds a tool input guardrail and a tool output guardrail to each
``FunctionTool`` of the agent, of the agents it hands off to and of the agents it uses as tools,
at any depth (the tools' functions are not touched). The input guardrail judges the call before it
runs: a skip is ``reject_content`` (the model gets the detection's message as the tool's output;
the tool does not run). The output guardrail records what the tool returned; a warned call's
output carries a short note for the model.

A kill answers the call with the stop message and, with ``exit_behavior="end"`` (default), ends
``Runner.run`` after that tool step with a ``final_output`` (the agents' ``tool_use_behavior`` is
wrapped for it): the model's own final answer (``wrap_up=True``, the default), asked in one model
call offered no tool and made of the run's last model call, its response, the step's tool
outputs and a request for a final answer with the detection's message as the reason (``protect``
adds agent hooks that keep that last call, and record each model call, ``_model_calls``; the
agent's own hooks are still called), within
``wrap_up_timeout`` seconds; else the canned final answer (``wrap_up=False``, or when the model
fails, is late, answers nothing or asks for a tool again). No tool runs after the kill. The run
ends the same way after a tool step when ``max_model_calls`` (off by default) model calls were
made, instead of the next one. Calls
allowed in the same step still run and are recorded. A tool shared by agents that different
guards protect is judged by the guard of the agent calling it (the first that protected that
agent), so each guard ends its own agents' runs. ``exit_behavior="error"`` raises instead:
``ToolInputGuardrailTripwireTriggered`` with the ``LoopDetected`` (detection, and the stats of the
run it killed) as ``exc.output.output_info``.

Each ``Runner.run`` is a run of its own (kept for the run's usage object, which every tool call of
that run shares); a ``fuzeguard.run()`` current at ``Runner.run`` wins, and an agent used as a tool
runs in a child run of the run that called it. To make the invocations of one conversation one
run: ``with conversations.run_for(conversation_id): await Runner.run(...)``
(``fuzeguard.integrations.KeyedRuns``).

Install with ``pip install 'fuzeguard[openai-agents]'``.
"""

from __future__ import annotations

import contextvars
import json
import weakref
from typing import TYPE_CHECKING, Any

from agents import (
    Agent,
    AgentHooks,
    FunctionTool,
    Handoff,
    ItemHelpers,
    Model,
    ModelSettings,
    ModelTracing,
    ToolGuardrailFunctionOutput,
)
from agents.agent import ToolsToFinalOutputResult
from agents.models.multi_provider import MultiProvider
from agents.tool_guardrails import (
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._shared.calls import (
    ExitBehavior,
    Outcome,
    ToolCalls,
    stop_message,
    with_notes,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import (
    exit_behavior as exit_behavior_of,
)
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.runs import InvocationRuns, adopt, user_run
from fuzeguard.integrations._shared.wrap_up import DEFAULT_TIMEOUT, WrapUp, answer

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

_OWNER = "_fuzeguard_guard"  # the LoopGuard that protected an agent first, on the agent
# The ToolContext of the tool call the current task runs (set in the task that runs it): a
# ``Runner.run`` started inside it is a nested invocation, whose run is kept for that call.
_calling: contextvars.ContextVar[Any] = contextvars.ContextVar("fuzeguard_oai_call", default=None)


class LoopGuard:
    """Guard the function tools of OpenAI Agents SDK agents against loops.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name, plus ``exit_behavior``, ``wrap_up``, ``wrap_up_timeout`` and
    ``max_model_calls`` (see the module docstring). Don't also ``guard()`` the tools' functions: each
    call would count twice.
    """

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 wrap_up_timeout: float = DEFAULT_TIMEOUT, max_model_calls: int | None = None,
                 **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.wrap_up = WrapUp(wrap_up, wrap_up_timeout)
        self.calls = ToolCalls(**options)
        self.runs = InvocationRuns()
        # Each run's last model call (the agent, its instructions, input and response): what the
        # request for a final answer after a kill is made of.
        self._exchanges: weakref.WeakKeyDictionary[Run, list[Any]] = weakref.WeakKeyDictionary()
        self.model_calls = ModelCalls(max_model_calls)
        # A run whose model calls ended it (a repeated rejected call): ended after the tool step.
        self._ended: weakref.WeakKeyDictionary[Run, Detection] = weakref.WeakKeyDictionary()
        # A call that goes ahead, by its ToolContext (the same object reaches both guardrails).
        self._in_flight: weakref.WeakKeyDictionary[Any, Outcome] = weakref.WeakKeyDictionary()
        self._lock = new_lock()
        self.input_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._before, name="fuzeguard"
        )
        self.output_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._after, name="fuzeguard"
        )

    def protect(self, agent: Agent[Any]) -> Agent[Any]:
        """Add the guardrails to every function tool of ``agent`` and of every agent it hands off
        to or uses as a tool (once); returns the agent."""
        seen: set[int] = set()
        todo: list[Any] = [agent]
        while todo:
            current = todo.pop()
            if not isinstance(current, Agent) or id(current) in seen:
                continue
            seen.add(id(current))
            if getattr(current, _OWNER, None) is None:
                setattr(current, _OWNER, self)  # its tools' calls are this guard's to judge
            self._end_on_kill(current)
            if not isinstance(current.hooks, _Exchanges):
                current.hooks = _Exchanges(self, current.hooks)
            for tool in current.tools:
                if isinstance(tool, FunctionTool):
                    self.tool(tool)
                    todo.append(getattr(tool, "_agent_instance", None))  # an agent as a tool
            for target in current.handoffs:
                if isinstance(target, Handoff):
                    ref = getattr(target, "_agent_ref", None)
                    todo.append(ref() if ref is not None else None)
                else:
                    todo.append(target)
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

    def _end_on_kill(self, agent: Agent[Any]) -> None:
        """Make a tool step in which the run was killed the agent's last: its final output is the
        final answer (the agent's own ``tool_use_behavior`` decides otherwise)."""
        if self.exit_behavior != "end" or getattr(agent.tool_use_behavior, "_fuzeguard", False):
            return
        agent.tool_use_behavior = _EndOnKill(self, agent.tool_use_behavior)

    def _run_of(self, context: Any, *, create: bool = True) -> Run | None:
        """The run of the invocation ``context`` belongs to: the user's run, else the run kept for
        the invocation's usage object (shared by its tool calls and its handoffs) or, for an
        invocation started inside a tool call (an agent used as a tool, which shares its caller's
        usage), the run kept for that call: a child of the caller's run."""
        mine = user_run()
        if mine is not None:
            return mine
        calling = _calling.get()
        owner = context.usage if calling is None else calling
        found = self.runs.find(owner)
        if found is not None or not create:
            return found
        run = self.runs.kept(owner, "openai-agents-run")
        run.end_turn()  # turns are marked from the first (see _EndOnKill): one ladder step per turn
        return run

    def _record(self, run: Run, agent: Any, response: Any) -> None:
        """Record a model call of the run (``_model_calls``); a detection ends the run after the
        tool step (``_EndOnKill``)."""
        calls = [(item.name, _arguments(item.arguments)) for item in response.output
                 if getattr(item, "type", None) == "function_call"]
        offered = {getattr(tool, "name", None) for tool in agent.tools}
        text = "".join(ItemHelpers.extract_last_text(item) or "" for item in response.output)
        usage = getattr(response, "usage", None)
        detection = self.model_calls.record(
            run, calls, None if calls else text,
            rejected=any(name not in offered for name, _ in calls), final=not calls,
            tokens=getattr(usage, "total_tokens", None),
        )
        if detection is not None:
            self._ended[run] = detection

    def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        owner = getattr(data.agent, _OWNER, None)
        if owner is not None and owner is not self:
            # A tool shared by agents that different guards protect: the calling agent's guard
            # judges the call (and ends that agent's run on a kill), once.
            return ToolGuardrailFunctionOutput.allow()
        context = data.context
        run = self._run_of(context)
        assert run is not None
        if user_run() is None:
            adopt(run)  # each tool call runs in a task of its own, started from this one
            _calling.set(context)
        outcome = self.calls.begin(context.tool_name, _arguments(context.tool_arguments))
        if outcome.killed is not None:
            if self.exit_behavior == "error":
                return ToolGuardrailFunctionOutput.raise_exception(output_info=outcome.error())
            return ToolGuardrailFunctionOutput.reject_content(
                stop_message(outcome.killed), output_info=outcome.error()
            )
        if outcome.skipped is not None:
            value = outcome.skipped.value
            return ToolGuardrailFunctionOutput.reject_content(
                value if isinstance(value, str) else json.dumps(value, default=str),
                output_info=value,
            )
        if outcome.pending is not None:
            with self._lock:
                self._in_flight[context] = outcome
        return ToolGuardrailFunctionOutput.allow()

    def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        with self._lock:
            outcome = self._in_flight.pop(data.context, None)
        if outcome is None:
            return ToolGuardrailFunctionOutput.allow()
        outcome.done(data.output)
        text = data.output if isinstance(data.output, str) else str(data.output)
        noted = with_notes(text, outcome)
        if noted is not text:  # a warning or the run's notes for the model
            return ToolGuardrailFunctionOutput.reject_content(noted)
        return ToolGuardrailFunctionOutput.allow()


class _EndOnKill:
    """An agent's ``tool_use_behavior`` that ends the run with the final answer after a tool step
    in which it was killed, and otherwise does what the agent's own behaviour does."""

    _fuzeguard = True

    def __init__(self, guard: LoopGuard, inner: Any) -> None:
        self.guard = guard
        self.inner = inner

    async def __call__(self, context: Any, results: list[Any]) -> ToolsToFinalOutputResult:
        run = self.guard._run_of(context, create=False)
        detection = None if run is None else (
            run.killed or self.guard._ended.get(run) or self.guard.model_calls.over_limit(run))
        if detection is not None:
            assert run is not None
            exchange = self.guard._exchanges.get(run)
            written = None
            if self.guard.wrap_up.wanted(detection) and exchange is not None and len(exchange) == 4:
                written = await self.guard.wrap_up.aask(
                    detection, lambda: _ask_final(exchange, results, detection))
            return ToolsToFinalOutputResult(is_final_output=True,
                                            final_output=answer(detection, written))
        if run is not None and user_run() is None:
            run.end_turn()  # a tool step is over: the model's next turn begins
        inner = self.inner
        if inner == "run_llm_again":
            return ToolsToFinalOutputResult(is_final_output=False, final_output=None)
        if inner == "stop_on_first_tool":
            first = results[0].output if results else None
            return ToolsToFinalOutputResult(is_final_output=bool(results), final_output=first)
        if isinstance(inner, dict):  # StopAtTools
            names = inner.get("stop_at_tool_names", [])
            for result in results:
                if result.tool.name in names or result.tool.qualified_name in names:
                    return ToolsToFinalOutputResult(is_final_output=True, final_output=result.output)
            return ToolsToFinalOutputResult(is_final_output=False, final_output=None)
        decided = inner(context, results)
        if hasattr(decided, "__await__"):
            decided = await decided
        return decided  # type: ignore[no-any-return]


class _Exchanges(AgentHooks):
    """An agent's hooks (its own ones still called) that keep each run's last model call for the
    request for a final answer after a kill."""

    def __init__(self, guard: LoopGuard, inner: Any) -> None:
        self.guard = guard
        self.inner = inner

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        run = self.guard._run_of(context)  # the run opens at the first model call
        if run is not None:
            self.guard._exchanges[run] = [agent, system_prompt, list(input_items)]
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        run = self.guard._run_of(context)
        exchange = None if run is None else self.guard._exchanges.get(run)
        if exchange is not None and len(exchange) == 3:
            exchange.append(response)
        if run is not None:
            self.guard._record(run, agent, response)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)


def _passing(name: str) -> Any:
    async def hook(self: _Exchanges, *args: Any, **kwargs: Any) -> None:
        if self.inner is not None:
            await getattr(self.inner, name)(*args, **kwargs)

    hook.__name__ = name
    return hook


for _name in ("on_start", "on_end", "on_handoff", "on_tool_start", "on_tool_end"):
    setattr(_Exchanges, _name, _passing(_name))


async def _ask_final(exchange: list[Any], results: list[Any], detection: Detection) -> str | None:
    """One model call without tools: the run's last model call, its response, the tool step's
    outputs (the killed call's is the stop message) and the request for a final answer. The
    model's text, or None if it asked for a tool again."""
    agent, instructions, items, response = exchange
    outputs = [r.run_item.to_input_item() for r in results if getattr(r, "run_item", None)]
    asked: Any = {"role": "user", "content": wrap_up_request(detection)}
    model = agent.model if isinstance(agent.model, Model) else MultiProvider().get_model(agent.model)
    settings = agent.model_settings if isinstance(agent.model_settings, ModelSettings) else ModelSettings()
    reply = await model.get_response(
        instructions, [*items, *response.to_input_items(), *outputs, asked], settings, [], None, [],
        ModelTracing.DISABLED, previous_response_id=None, conversation_id=None, prompt=None,
    )
    if any(getattr(item, "type", None) == "function_call" for item in reply.output):
        return None
    return "".join(ItemHelpers.extract_last_text(item) or "" for item in reply.output)


def _arguments(text: str) -> dict[str, Any]:
    """The tool call's arguments as the model sent them (JSON text)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}
