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

Each kickoff is a run of its own: the one ``guard.kickoff`` opens, else one kept for the crew
(started afresh at each of its kickoffs); a ``fuzeguard.run()`` current at the kickoff wins.
Hooks are process-wide in CrewAI: ``unregister()`` removes them, and when several guards are
registered each call is judged by the first one only.

Install with ``pip install 'fuzeguard[crewai]'``.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

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
from fuzeguard.integrations._shared.runs import InvocationRuns, invocation, open_run, user_run, within
from fuzeguard.integrations._shared.wrap_up import WrapUp

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

_MAX_IN_FLIGHT = 1024
# Calls being judged, by id of their tool_input dict (shared by every hook of one call): the guard
# that judges each, so that a second registered guard leaves it alone.
_claims: OrderedDict[int, tuple[Any, LoopGuard, Outcome | None]] = OrderedDict()
_claims_lock = new_lock()


class LoopGuard:
    """Guard every CrewAI tool call against loops. Options are those of ``guard()`` (``on_loop``,
    thresholds, ``on_detect``...), applied to each tool by its name, plus ``exit_behavior`` and
    ``wrap_up`` (how a kill ends the agent, see the module docstring). Don't also ``guard()`` the
    tools' functions: each call would count twice (and CrewAI's cache hides repeats from them)."""

    def __init__(self, *, exit_behavior: ExitBehavior = "end", wrap_up: bool = True,
                 **options: Unpack[ToolOptions]) -> None:
        self.exit_behavior = exit_behavior_of(exit_behavior)
        self.wrap_up = WrapUp(wrap_up)  # CrewAI makes the call: its own timeout holds
        self.calls = ToolCalls(**options)
        self.runs = InvocationRuns()

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
                return self._ended(run, exc)

    async def kickoff_async(self, crew: Any, **kwargs: Any) -> Any:
        """``await crew.kickoff_async(**kwargs)`` in a run of its own, like ``kickoff``."""
        with invocation("crewai-kickoff") as run:
            try:
                return await crew.kickoff_async(**kwargs)
            except Exception as exc:
                return self._ended(run, exc)

    def _ended(self, run: Run, error: Exception) -> Any:
        """What a kickoff that raised gives: the final answer when the run was killed."""
        detection = run.killed
        if detection is None:
            raise error
        if self.exit_behavior == "error":
            raise LoopDetected(detection, run.stats()) from error
        from crewai.crews.crew_output import CrewOutput

        return CrewOutput(raw=final_answer(detection))

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
        if run is None:
            outcome = self.calls.begin(context.tool_name, context.tool_input)
        else:
            with within(run):
                outcome = self.calls.begin(context.tool_name, context.tool_input)
        with _claims_lock:
            # The after hook gets another context object with the same tool_input dict.
            _claims[key] = (context.tool_input, self, outcome)
            while len(_claims) > _MAX_IN_FLIGHT:
                _claims.popitem(last=False)
        return None if outcome.runs else False

    def after_tool_call(self, context: Any) -> str | None:
        with _claims_lock:
            claim = _claims.get(id(context.tool_input))
            if claim is None or claim[0] is not context.tool_input or claim[1] is not self:
                return None
            del _claims[id(context.tool_input)]
        outcome = claim[2]
        assert outcome is not None
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
        run = self._run_of(context, create=False)
        if run is None:
            return None
        detection = run.killed
        if detection is None:
            if user_run() is None:
                run.end_turn()  # a model turn of a run the guard keeps: the ladder steps per turn
            return None
        if self.exit_behavior == "error":
            raise _Killed(detection, run.stats(), run)  # HookAborted: CrewAI lets it through
        request = wrap_up_request(detection)
        messages = context.messages
        if messages and _text(messages[-1]) == request:
            return None  # asked for already in this call (another registered guard)
        if any(_text(m) == request for m in messages):
            return False  # the agent's last call after the kill was made: no further one
        messages.append({"role": "user", "content": request})
        return None

    def after_llm_call(self, context: Any) -> str | None:
        """The reply to the request for a final answer becomes the task's final answer."""
        messages = context.messages
        run = self._run_of(context, create=False) if messages else None
        detection = None if run is None else run.killed
        if detection is None or _text(messages[-1]) != wrap_up_request(detection):
            return None
        reply = context.response if isinstance(context.response, str) else ""
        asked_for_tool = "Action:" in reply and "Final Answer:" not in reply
        if self.wrap_up.wanted(detection) and reply.strip() and not asked_for_tool:
            answer = reply.split("Final Answer:", 1)[-1].strip()
        else:
            answer = final_answer(detection)
        native = getattr(getattr(context.executor, "state", None), "use_native_tools", False)
        return answer if native is True else f"Thought: I must stop here.\nFinal Answer: {answer}"


class _Killed(HookAborted, LoopDetected):  # type: ignore[misc]  # HookAborted is Any here
    """The kill's ``LoopDetected`` raised from a CrewAI hook (``exit_behavior="error"``): CrewAI
    swallows any other exception a hook raises, and lets a ``HookAborted`` through."""

    def __init__(self, detection: Any, stats: Any, run: Run) -> None:
        LoopDetected.__init__(self, detection, stats, run)
        self.reason = detection.message
        self.source = None


def _text(message: Any) -> Any:
    return message.get("content") if isinstance(message, dict) else None
