"""Claude Agent SDK: ``LoopGuard``, hooks that guard every tool call of a Claude Code session.

``options = LoopGuard(on_loop="kill").protect(ClaudeAgentOptions(...))`` adds ``PreToolUse``,
``PostToolUse``, ``PostToolUseFailure``, ``UserPromptSubmit``, ``Stop`` and ``SubagentStop``
hooks to the options (the hooks they had stay; the tools are not touched), for ``query()`` or
``ClaudeSDKClient``. Each prompt of a session is judged in a run of its own (``_runs.py``): a run
the user opened around ``query()`` / ``connect()`` wins (``KeyedRuns`` makes a conversation one
run), and the tool calls of a subagent are judged in a child run of the prompt's run.

- a skip denies the call (``permissionDecision: "deny"``) with the detection's message as the
  reason, which Claude reads instead of a result; the tool does not run;
- a warn lets the call run and adds the note to Claude's context (``PostToolUse``
  ``additionalContext``);
- a kill denies the call with the stop message and stops the session (``continue: false``, with
  the final answer as ``stopReason`` and ``systemMessage``). ``final_answer(session_id)`` is that
  answer, for the application to show, and ``killed(session_id)`` the ``LoopDetected`` (the
  detection, and the stats of the run it killed), until the session's next prompt. A background
  subagent of an earlier prompt that loops has its calls refused; the prompt under way goes on.

Every ``PreToolUse`` hook input (the tool's name and arguments) is judged, whatever the tool:
Claude Code's built-in tools, MCP tools and SDK tools alike. Claude Code has no hook per model
call, so turns are not marked: the ladder steps per call. Install with
``pip install 'fuzeguard[claude-agent-sdk]'``.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from claude_agent_sdk import ClaudeAgentOptions, HookContext, HookMatcher

from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard.integrations._shared.calls import ToolCalls, final_answer, stop_message
from fuzeguard.integrations._shared.hooked import Invocation, Invocations

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import ToolOptions

_MAX_KILLED = 1024  # sessions whose last kill is kept for ``killed`` / ``final_answer``
Hook = Any  # a hook callback: async (input, tool_use_id, context) -> output


class LoopGuard:
    """Guard every tool call of Claude Agent SDK sessions against loops.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name (``[functions.NAME]`` in fuze.toml applies too; an SDK tool's name is
    ``mcp__SERVER__TOOL``). Don't also ``guard()`` the tools' functions: each call would count
    twice.
    """

    def __init__(self, **options: Unpack[ToolOptions]) -> None:
        self.calls = ToolCalls(**options)
        self._invocations = Invocations()
        self._killed: OrderedDict[str, LoopDetected] = OrderedDict()
        self._lock = new_lock()

    def hooks(self) -> dict[str, list[HookMatcher]]:
        """The hooks, by event, as ``ClaudeAgentOptions(hooks=...)`` takes them."""
        events: dict[str, Hook] = {
            "UserPromptSubmit": self._prompt,
            "PreToolUse": self._pre_tool,
            "PostToolUse": self._post_tool,
            "PostToolUseFailure": self._tool_failed,
            "SubagentStop": self._subagent_stop,
            "Stop": self._stop,
        }
        return {event: [HookMatcher(matcher=None, hooks=[hook])] for event, hook in events.items()}

    def protect(self, options: ClaudeAgentOptions) -> ClaudeAgentOptions:
        """A copy of ``options`` with the guard's hooks added to its own."""
        hooks: dict[Any, list[HookMatcher]] = {
            event: list(matchers) for event, matchers in (options.hooks or {}).items()
        }
        for event, matchers in self.hooks().items():
            hooks.setdefault(event, []).extend(matchers)
        return dataclasses.replace(options, hooks=hooks)

    def killed(self, session_id: str) -> LoopDetected | None:
        """The ``LoopDetected`` of the session's prompt under way (or last prompt) if a kill
        ended it, else None: a new prompt of the session clears it."""
        return self._killed.get(session_id)

    def final_answer(self, session_id: str) -> str | None:
        """The final answer of the session's prompt under way (or last prompt) if a kill ended
        it, else None (show the query's own result then)."""
        error = self._killed.get(session_id)
        return None if error is None else final_answer(error.detection)

    # ------------------------------------------------------------------ one run per prompt

    def _invocation(self, data: Any) -> Invocation:
        """The invocation of the hook's prompt, or of its subagent (a child run of the prompt's)."""
        session = data.get("session_id", "")
        main = self._invocations.find(session)
        if main is None:  # a prompt whose UserPromptSubmit was not seen (hooks added later)
            main = self._invocations.start(session, "claude", enter=False)
        agent = data.get("agent_id")
        if not agent:
            return main
        key: Hashable = (session, agent)
        found = self._invocations.find(key)
        if found is None:
            name = data.get("agent_type") or "subagent"
            found = self._invocations.start(key, name, enter=False, parent=main.run)
        return found

    async def _prompt(self, data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        session = data.get("session_id", "")
        self._invocations.end(session)  # a prompt still open ended without its Stop hook
        with self._lock:  # a new prompt: the answer of the last one that a kill ended is over
            self._killed.pop(session, None)
        self._invocations.start(session, "claude", enter=False)
        return {}

    async def _stop(self, data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        self._invocations.end(data.get("session_id", ""))
        return {}

    async def _subagent_stop(self, data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        self._invocations.end((data.get("session_id", ""), data.get("agent_id")))
        return {}

    # ------------------------------------------------------------------ tool calls

    async def _pre_tool(self, data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        invocation = self._invocation(data)
        call_id = data.get("tool_use_id") or tool_use_id
        outcome = invocation.begin(self.calls, data["tool_name"], data.get("tool_input"), call_id)
        if outcome.skipped is not None:
            value = outcome.skipped.value
            return _deny(value if isinstance(value, str) else str(value))
        if outcome.killed is None:
            return {}
        session = data.get("session_id", "")
        main = self._invocations.find(session)
        if invocation is not main and main is not None and invocation.parent is not main.run:
            # A background subagent of an earlier prompt: its calls are refused from now on,
            # and the prompt under way, which did not loop, goes on.
            return _deny(stop_message(outcome.killed))
        error = outcome.error()
        with self._lock:
            self._killed[session] = error
            self._killed.move_to_end(session)
            while len(self._killed) > _MAX_KILLED:
                self._killed.popitem(last=False)
        answer = final_answer(outcome.killed)
        return {**_deny(stop_message(outcome.killed)), "continue_": False, "stopReason": answer,
                "systemMessage": answer}

    async def _post_tool(self, data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        outcome = self._invocation(data).end(data.get("tool_use_id") or tool_use_id)
        if outcome is None:
            return {}
        outcome.done(data.get("tool_response"))
        notes = outcome.notes()
        if not notes:
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse",
                                       "additionalContext": "\n\n".join(notes)}}

    async def _tool_failed(self, data: Any, tool_use_id: str | None, context: HookContext) -> Any:
        outcome = self._invocation(data).end(data.get("tool_use_id") or tool_use_id)
        if outcome is not None:
            outcome.fail(_ToolFailed(str(data.get("error", "the tool failed"))))
        return {}


class _ToolFailed(Exception):
    """A tool call that failed in the Claude Code process (its error, as the hook reports it)."""


def _deny(reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}
