"""Claude Code's side of the Claude Agent SDK's protocol, scripted: a ``Transport`` for tests.

The SDK drives the Claude Code CLI (a bundled binary that calls Anthropic's API) over stream-json
lines: control requests both ways (``initialize``, ``hook_callback``, ``mcp_message``), user,
assistant, system and result messages. Without a network the CLI cannot run here, so
``ScriptedCLI`` plays that side with a scripted model, following the hook semantics the SDK
documents:

- the hooks the SDK registered at ``initialize`` are called with the documented inputs
  (``UserPromptSubmit``, ``PreToolUse``, ``PostToolUse``, ``PostToolUseFailure``, ``Stop``);
- ``PreToolUse`` answered ``permissionDecision: "deny"``: the tool does not run, the model reads
  the reason as an error result;
- a tool that runs is an SDK MCP tool, called through the SDK (``mcp_message`` ``tools/call``);
- ``PostToolUse`` ``additionalContext`` is added to what the model reads after the result;
- a hook answered ``continue: false``: the session stops after that tool call (a result message
  ends the query);
- ``max_turns`` model turns end the query with an ``error_max_turns`` result;
- with ``subagent``, the tool calls are those of a subagent (``agent_id`` and ``agent_type`` in
  the tool hooks' inputs, as the SDK's hook input types have them).

The model is a function of the prompt and of what it has read so far (one string per tool result
or context note): it returns a tool call ``(name, arguments)`` or a final text.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from claude_agent_sdk import Transport

Step = tuple[str, dict[str, Any]] | str
Model = Callable[[str, list[str]], Step]


class ScriptedCLI(Transport):
    """One Claude Code process serving one session, with a scripted model."""

    def __init__(self, model: Model, *, session_id: str, server: str = "shop",
                 max_turns: int = 25, subagent: str | None = None) -> None:
        self.model, self.session_id, self.server, self.max_turns = model, session_id, server, max_turns
        # The tool calls are a subagent's (``agent_id`` / ``agent_type`` in the hook inputs).
        self.subagent = subagent
        self.turns = 0
        self.read: list[str] = []  # everything the model read, in order
        self.stopped_by_hook = False
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._hooks: dict[str, list[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ Transport

    async def connect(self) -> None:
        pass

    def is_ready(self) -> bool:
        return True

    async def end_input(self) -> None:
        await self._out.put(None)  # stdin closed after the result: the process exits

    async def close(self) -> None:
        await self._out.put(None)

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:  # type: ignore[override]
        while (message := await self._out.get()) is not None:
            yield message

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            message = json.loads(line)
            kind = message.get("type")
            if kind == "control_request":
                request = message["request"]
                if request["subtype"] == "initialize":
                    self._hooks = request.get("hooks") or {}
                await self._out.put({"type": "control_response", "response": {
                    "subtype": "success", "request_id": message["request_id"],
                    "response": {"commands": []} if request["subtype"] == "initialize" else {}}})
            elif kind == "control_response":
                response = message["response"]
                future = self._waiting.pop(response["request_id"])
                if response["subtype"] == "success":
                    future.set_result(response.get("response") or {})
                else:
                    future.set_exception(RuntimeError(response.get("error")))
            elif kind == "user":
                content = message["message"]["content"]
                task = asyncio.get_running_loop().create_task(self._session(content))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ the CLI's side

    async def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = f"cli_{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        await self._out.put({"type": "control_request", "request_id": request_id, "request": request})
        return await future

    async def _hooks_for(self, event: str, data: dict[str, Any], tool: str | None = None,
                         tool_use_id: str | None = None) -> list[dict[str, Any]]:
        outputs = []
        for matcher in self._hooks.get(event, []):
            pattern = matcher.get("matcher")
            if pattern and (tool is None or not re.fullmatch(pattern, tool)):
                continue
            for callback_id in matcher["hookCallbackIds"]:
                outputs.append(await self._request({
                    "subtype": "hook_callback", "callback_id": callback_id,
                    "input": {"session_id": self.session_id, "transcript_path": "", "cwd": "/",
                              "hook_event_name": event, **data},
                    "tool_use_id": tool_use_id,
                }))
        return outputs

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        async def mcp(method: str, params: dict[str, Any], notify: bool = False) -> dict[str, Any]:
            message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
            if not notify:
                message["id"] = next(self._ids)
            response = await self._request({"subtype": "mcp_message", "server_name": self.server,
                                            "message": message})
            return dict(response.get("mcp_response", {}).get("result") or {})

        await mcp("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "scripted-cli", "version": "1"}})
        await mcp("notifications/initialized", {}, notify=True)
        result = await mcp("tools/call", {"name": name, "arguments": arguments})
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        return text, bool(result.get("isError"))

    def _emit(self, kind: str, **fields: Any) -> Any:
        return self._out.put({"type": kind, "session_id": self.session_id, **fields})

    async def _result(self, subtype: str, result: str | None) -> None:
        await self._emit("result", subtype=subtype, duration_ms=0, duration_api_ms=0,
                         is_error=subtype != "success", num_turns=self.turns, result=result,
                         total_cost_usd=0.0, usage={})

    async def _session(self, prompt: str) -> None:
        await self._emit("system", subtype="init", data={})
        await self._hooks_for("UserPromptSubmit", {"prompt": prompt})
        while self.turns < self.max_turns:
            step = self.model(prompt, list(self.read))
            self.turns += 1
            if isinstance(step, str):
                await self._emit("assistant", message={
                    "role": "assistant", "model": "scripted",
                    "content": [{"type": "text", "text": step}]}, parent_tool_use_id=None)
                await self._hooks_for("Stop", {"stop_hook_active": False})
                await self._result("success", step)
                return
            if await self._tool_use(*step):
                self.stopped_by_hook = True
                await self._result("success", None)
                return
        await self._result("error_max_turns", None)

    async def _tool_use(self, name: str, arguments: dict[str, Any]) -> bool:
        """One tool call of the model; True when a hook stopped the session."""
        tool, tool_use_id = f"mcp__{self.server}__{name}", f"toolu_{self.turns}"
        await self._emit("assistant", message={
            "role": "assistant", "model": "scripted",
            "content": [{"type": "tool_use", "id": tool_use_id, "name": tool, "input": arguments}],
        }, parent_tool_use_id=None)
        call = {"tool_name": tool, "tool_input": arguments, "tool_use_id": tool_use_id}
        if self.subagent is not None:
            call.update(agent_id=f"agent-{self.subagent}", agent_type=self.subagent)
        pre = await self._hooks_for("PreToolUse", call, tool, tool_use_id)
        denied = [o["hookSpecificOutput"]["permissionDecisionReason"] for o in pre
                  if o.get("hookSpecificOutput", {}).get("permissionDecision") == "deny"]
        notes: list[str] = []
        if denied:
            text, is_error = denied[0], True
        else:
            text, is_error = await self._call_tool(name, arguments)
            event = "PostToolUseFailure" if is_error else "PostToolUse"
            extra = {"error": text} if is_error else {"tool_response": text}
            for output in await self._hooks_for(event, {**call, **extra}, tool, tool_use_id):
                note = output.get("hookSpecificOutput", {}).get("additionalContext")
                if note:
                    notes.append(note)
        self.read.append(text)
        self.read.extend(notes)
        await self._emit("user", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_use_id, "content": text,
             "is_error": is_error}]}, parent_tool_use_id=None)
        return any(o.get("continue") is False for o in pre)
