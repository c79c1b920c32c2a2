"""CrewAI: ``LoopGuard``, tool-call and LLM-call hooks that guard every tool of every crew.

CrewAI answers a repeated identical tool call from its tool cache, so a guarded function never
sees the repeats. ``before_tool_call`` runs before that cache: ``LoopGuard(...).register()`` adds
hooks that judge every tool call, cached or not (the tools are not touched). A skip blocks the call
and ``after_tool_call`` replaces CrewAI's "blocked" text with the detection's message, which the
model reads; a warned result carries a short note. A kill blocks the call and answers it with the
stop message; the agent's next LLM call is then its last: the ``before_llm_call`` hook adds the
request for a final answer (``wrap_up_request``, the detection's message as the reason), and the
``after_llm_call`` hook makes the reply the task's final answer: the model's own words
(``wrap_up=True``, the default) unless it asked for a tool again, else the canned
``final_answer`` (CrewAI gives hooks no way to answer a model call themselves, so with
``wrap_up=False`` the call is still made and its reply replaced). No tool runs after the kill,
and a further LLM call of that agent is blocked. So ``crew.kickoff()`` returns a ``CrewOutput``
whose ``raw`` is that answer; ``exit_behavior="error"`` raises the kill's ``LoopDetected`` out of
``kickoff()`` instead. ``guard.kickoff(crew, ...)`` / ``await guard.kickoff_async(crew, ...)``
run a kickoff in a run of their own and end the same way.

Model calls (``_model_calls``): ``after_llm_call`` records each LLM call of an agent that
answers in text (CrewAI's ReAct format), read as CrewAI reads it, in the kickoff's
``"NAME/model"`` run: its action (tool name and input), else a digest of its text. An action
naming a tool the agent does not have (CrewAI answers it with "You tried to use the tool ...,
but it doesn't exist", and no tool hook sees it) is a rejected call: the same one again ends the
agent as a kill does (its next LLM call is the final answer's). CrewAI takes an output it
cannot parse as the final answer, so a text never loops. ``max_model_calls`` (off by default;
CrewAI's own ``max_iter`` forces a final answer too) makes the LLM call past the limit the
final answer's. Not recorded: token usage (the hooks are given none), and the responses of an
LLM with native function calling that ask for tools (CrewAI does not pass such a response to
``after_llm_call`` hooks; their calls are judged by the tool hooks). With several guards
registered, each records the model calls in its own model calls' run.

Each kickoff is a run of its own: the one ``guard.kickoff`` opens, else one kept for the crew
(started afresh at each of its kickoffs); a ``fuzeguard.run()`` current at the kickoff wins.
Hooks are process-wide in CrewAI: ``unregister()`` removes them, and when several guards are
registered each call is judged by the first one only.

Install with ``pip install 'fuzeguard[crewai]'``.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from crewai.agents.parser import AgentAction
from crewai.crews.crew_output import CrewOutput
from crewai.hooks import (
    register_after_llm_call_hook,
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
    unregister_after_llm_call_hook,
    unregister_after_tool_call_hook,
    unregister_before_llm_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.hooks.dispatch import HookAborted
from crewai.utilities.agent_utils import format_answer
from crewai.utilities.string_utils import sanitize_tool_name

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._shared.calls import (
    ExitBehavior,
    Outcome,
    ToolCalls,
    final_answer,
    stop_message,
    with_notes,
    wrap_up_request,
)
from fuzeguard.integrations._shared.calls import exit_behavior as exit_behavior_of
from fuzeguard.integrations._shared.model_calls import ModelCalls
from fuzeguard.integrations._shared.runs import InvocationRuns, invocation, open_run, user_run, within
from fuzeguard.integrations._shared.wrap_up import WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

_MAX_IN_FLIGHT = 1024
# Calls being judged, by id of their tool_input dict (shared by every hook of one call): the guard
# that judges each, so that a second registered guard leaves it alone.
_claims: OrderedDict[int, tuple[Any, LoopGuard, Outcome | Detection | None]] = OrderedDict()
_claims_lock = new_lock()


class LoopGuard:
    """Guard every CrewAI tool call against loops. Options are those of ``guard()`` (``on_loop``,
    thresholds, ``on_detect``...), applied to each tool by its name, plus ``exit_behavior`` and
    ``wrap_up`` (how a kill ends the agent, see the module docstring) and ``max_model_calls``.
    Don't also ``guard()`` the tools' functions: each call would count twice (and CrewAI's cache
    hides repeats from them)."""

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 max_model_calls: int | None = None, **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.wrap_up = WrapUp(wrap_up)  # CrewAI makes the call: its own timeout holds
        self.model_calls = ModelCalls(max_model_calls)
        self.calls = ToolCalls(**options)
        self.runs = InvocationRuns()
        # The runs a model call ended (a repeated rejection, max_model_calls): as a kill.
        self._ended: weakref.WeakKeyDictionary[Run, Detection] = weakref.WeakKeyDictionary()

    def register(self) -> LoopGuard:
        """Add the hooks (process-wide, as CrewAI's hooks are); returns ``self``."""
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)
        register_before_llm_call_hook(self.before_llm_call)
        register_after_llm_call_hook(self.after_llm_call)
        return self

    def unregister(self) -> None:
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)
        unregister_before_llm_call_hook(self.before_llm_call)
        unregister_after_llm_call_hook(self.after_llm_call)

    # ------------------------------------------------------------------ one run per kickoff

    def kickoff(self, crew: Any, **kwargs: Any) -> Any:
        """``crew.kickoff(**kwargs)`` in a run of its own; a kill returns the final answer."""
        with invocation("crewai-kickoff") as run:
            try:
                return crew.kickoff(**kwargs)
            except Exception as exc:
                return self._raised(run, exc)
            finally:
                self.model_calls.close(run)

    async def kickoff_async(self, crew: Any, **kwargs: Any) -> Any:
        """``await crew.kickoff_async(**kwargs)`` in a run of its own, like ``kickoff``."""
        with invocation("crewai-kickoff") as run:
            try:
                return await crew.kickoff_async(**kwargs)
            except Exception as exc:
                return self._raised(run, exc)
            finally:
                self.model_calls.close(run)

    def _raised(self, run: Run, error: Exception) -> Any:
        """What a kickoff that raised gives: the final answer when the run was killed."""
        detection = self._detection(run)
        if detection is None:
            raise error
        if self.exit_behavior == "error":
            raise LoopDetected(detection, self._judged(run).stats()) from error
        return CrewOutput(raw=final_answer(detection))

    def _detection(self, run: Run) -> Detection | None:
        """What ended ``run``'s agent: its kill, or a model call's detection; else None."""
        return run.killed or self._ended.get(run)

    def _judged(self, run: Run) -> Run:
        """The run whose detection ended ``run``'s agent: itself, or its model calls' run."""
        return run if run.killed is not None else self.model_calls.run_of(run)

    def _run_of(self, context: Any, *, create: bool = True) -> Run | None:
        """The run of the kickoff a hook's context belongs to (see the module docstring)."""
        current = open_run()
        if current is not None:
            return current
        owner = getattr(context, "crew", None) or getattr(context, "agent", None)
        if owner is None:
            return None
        if not create:
            return self.runs.find(owner)
        if self.runs.find(owner) is None:
            self._fresh_at_kickoff(owner)
        return self.runs.kept(owner, "crewai-kickoff")

    def _fresh_at_kickoff(self, crew: Any) -> None:
        """Add to the crew's ``before_kickoff_callbacks`` one that ends its run, so that each of
        its later kickoffs starts a new one (once per crew and guard)."""
        callbacks = getattr(crew, "before_kickoff_callbacks", None)
        if not isinstance(callbacks, list) or any(
            getattr(c, "fuzeguard_guard", None) is self for c in callbacks
        ):
            return
        owner = weakref.ref(crew)

        def fresh(inputs: Any) -> Any:
            found = owner()
            if found is not None:
                kept = self.runs.find(found)
                if kept is not None:
                    self.model_calls.close(kept)
                self.runs.end(found)
            return inputs

        fresh.fuzeguard_guard = self  # type: ignore[attr-defined]
        callbacks.append(fresh)

    # ------------------------------------------------------------------ hooks

    def before_tool_call(self, context: Any) -> bool | None:
        key = id(context.tool_input)
        with _claims_lock:
            claim = _claims.get(key)
            if claim is not None and claim[0] is context.tool_input and claim[1] is not self:
                return None  # another guard judges this call
        run = self._run_of(context)
        ended = None if run is None else self._ended.get(run)
        if ended is not None:  # a model call ended the agent: no tool runs
            outcome: Outcome | Detection = ended
        elif run is None:
            outcome = self.calls.begin(context.tool_name, context.tool_input)
        else:
            with within(run):
                outcome = self.calls.begin(context.tool_name, context.tool_input)
        with _claims_lock:
            # The after hook gets another context object with the same tool_input dict.
            _claims[key] = (context.tool_input, self, outcome)
            while len(_claims) > _MAX_IN_FLIGHT:
                _claims.popitem(last=False)
        return None if isinstance(outcome, Outcome) and outcome.runs else False

    def after_tool_call(self, context: Any) -> str | None:
        with _claims_lock:
            claim = _claims.get(id(context.tool_input))
            if claim is None or claim[0] is not context.tool_input or claim[1] is not self:
                return None
            del _claims[id(context.tool_input)]
        outcome = claim[2]
        assert outcome is not None
        if isinstance(outcome, Detection):
            return stop_message(outcome)
        if outcome.skipped is not None:
            value = outcome.skipped.value
            return value if isinstance(value, str) else str(value)
        if outcome.killed is not None:
            return stop_message(outcome.killed)
        outcome.done(context.raw_tool_result)
        if context.tool_result is None:
            return None
        text = str(context.tool_result)
        noted = with_notes(text, outcome)
        return noted if noted is not text else None

    def before_llm_call(self, context: Any) -> bool | None:
        run = self._run_of(context, create=self.model_calls.max_model_calls is not None)
        if run is None:
            return None
        detection = self._detection(run)
        if detection is None:
            detection = self.model_calls.over_limit(run)
            if detection is not None:
                self._ended[run] = detection
        if detection is None:
            if user_run() is None:
                run.end_turn()  # a model turn of a run the guard keeps: the ladder steps per turn
            return None
        if self.exit_behavior == "error":
            judged = self._judged(run)  # HookAborted: CrewAI lets it through
            raise _Killed(detection, judged.stats(), judged)
        request = wrap_up_request(detection)
        messages = context.messages
        if messages and _text(messages[-1]) == request:
            return None  # asked for already in this call (another registered guard)
        if any(_text(m) == request for m in messages):
            return False  # the agent's last call after the kill was made: no further one
        messages.append({"role": "user", "content": request})
        return None

    def after_llm_call(self, context: Any) -> str | None:
        """The reply to the request for a final answer becomes the task's final answer; any
        other reply is recorded as a model call."""
        messages = context.messages
        run = self._run_of(context) if messages else None
        if run is None:
            return None
        detection = self._detection(run)
        if detection is None:
            self._record(run, context)
            return None
        if _text(messages[-1]) != wrap_up_request(detection):
            return None
        reply = context.response if isinstance(context.response, str) else ""
        asked_for_tool = "Action:" in reply and "Final Answer:" not in reply
        if self.wrap_up.wanted(detection) and reply.strip() and not asked_for_tool:
            answer = reply.split("Final Answer:", 1)[-1].strip()
        else:
            answer = final_answer(detection)
        native = getattr(getattr(context.executor, "state", None), "use_native_tools", False)
        return answer if native is True else f"Thought: I must stop here.\nFinal Answer: {answer}"


    def _record(self, run: Run, context: Any) -> None:
        """Record the LLM call (``_model_calls``); one that ends the agent ends it as a kill."""
        response = context.response
        if not isinstance(response, str):
            return
        calls = _asked(response)
        tools = getattr(context.executor, "tools", None)
        offered = {sanitize_tool_name(t.name) for t in tools} if isinstance(tools, list) else None
        rejected = offered is not None and any(
            sanitize_tool_name(name) not in offered for name, _ in calls)
        detection = self.model_calls.record(
            run, calls, None if calls else response, rejected=rejected, final=not calls)
        if detection is not None:
            self._ended[run] = detection


class _Killed(HookAborted, LoopDetected):  # type: ignore[misc]  # HookAborted is Any here
    """The kill's ``LoopDetected`` raised from a CrewAI hook (``exit_behavior="error"``): CrewAI
    swallows any other exception a hook raises, and lets a ``HookAborted`` through."""

    def __init__(self, detection: Any, stats: Any, run: Run) -> None:
        LoopDetected.__init__(self, detection, stats, run)
        self.reason = detection.message
        self.source = None


def _text(message: Any) -> Any:
    return message.get("content") if isinstance(message, dict) else None


def _asked(response: str) -> list[tuple[str, Any]]:
    """The action of a ReAct ``response`` as CrewAI reads it (tool name, input); none when
    CrewAI takes it as the final answer (as it takes an output it cannot parse)."""
    parsed = format_answer(response)
    if not isinstance(parsed, AgentAction):
        return []
    try:
        arguments: Any = json.loads(parsed.tool_input)
    except ValueError:
        arguments = parsed.tool_input
    return [(parsed.tool, arguments)]
