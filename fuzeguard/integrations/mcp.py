"""MCP servers: ``LoopGuardMiddleware`` for mcp 2.x and ``session_guard`` for mcp 1.x FastMCP.

A server cannot end its client's loop, so here a detection acts on the answers: a skip answers the
call with a normal (non-error) result carrying the detection's message, which the model reads; a
kill answers that call and every later call of the same client session with an error result
carrying the stop message (no tool runs again in that session). Each client session is judged in
a run of its own, so clients never count against each other and a kill stops one session only.

- mcp 2.x: ``MCPServer("name", middleware=[LoopGuardMiddleware(on_loop="skip")])`` guards every
  tool of the server without touching the tools (a ``ServerMiddleware`` around ``tools/call``).
  A skip's structured content is ``{"result": message}``, the shape the SDK gives a tool that
  returns a plain value; for a tool returning an object, give ``skip_value=`` a mapping that
  fits its output schema.
  Which session a call belongs to is ``session_key(ctx)``: by default the transport's
  ``mcp-session-id`` header when there is one, else the process (a stdio server serves one
  client). Stateless HTTP has no session: pass a ``session_key`` that names the conversation
  (for example a header your client sends).
- mcp 1.x: ``@server.tool()`` over ``@session_guard(on_loop="skip")``: a ``guard()`` whose run
  is the one of the request's ``ServerSession`` (one per connection in mcp 1.x).

Install with ``pip install 'fuzeguard[mcp]'``.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard._private.guard import guard
from fuzeguard._private.run import Run, make_current, restore_current
from fuzeguard.integrations._calls import ToolCalls, stop_message

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import GuardOptions, ToolOptions

F = TypeVar("F", bound=Callable[..., Any])
MAX_SESSIONS = 1024  # runs kept for the most recently active sessions


def _default_session_key(ctx: Any) -> Hashable:
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    if headers is not None:
        session_id = headers.get("mcp-session-id")
        if session_id:
            return ("mcp-session-id", session_id)
    return ("process",)


class LoopGuardMiddleware:
    """mcp 2.x ``ServerMiddleware``: guard every ``tools/call`` of a server.

    Options are those of ``guard()`` (``on_loop``, thresholds, ``on_detect``...), applied to each
    tool by its name, plus ``session_key``. Don't also ``guard()`` the tool functions.
    """

    def __init__(
        self, *, session_key: Callable[[Any], Hashable] | None = None,
        **options: Unpack[ToolOptions],
    ) -> None:
        self.calls = ToolCalls(**options)
        self.session_key = session_key or _default_session_key
        self._runs: OrderedDict[Hashable, Run] = OrderedDict()
        self._lock = threading.Lock()

    def run_for(self, key: Hashable) -> Run:
        """The run of one client session (opened on its first call)."""
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                # store=None: every session has this name, so it must never be shared
                run = self._runs[key] = Run("mcp-session", store=None)
                while len(self._runs) > MAX_SESSIONS:
                    self._runs.popitem(last=False)[1].close()
            else:
                self._runs.move_to_end(key)
            return run

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params: Mapping[str, Any] = ctx.params or {}
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, Mapping)):
            return await call_next(ctx)  # the SDK reports malformed params itself
        token = make_current(self.run_for(self.session_key(ctx)))
        try:
            outcome, result = await self.calls.acall(name, arguments, lambda: call_next(ctx),
                                                     shown=_shown)
        finally:
            restore_current(token)
        if outcome.runs:
            return result
        if outcome.skipped is not None:
            return _skip_result(outcome.skipped.value)
        assert outcome.killed is not None
        return _result(stop_message(outcome.killed), error=True)


def _skip_result(value: Any) -> Any:
    """A skip's answer, valid for the tool's output schema: the SDK wraps a tool's plain return
    value as ``{"result": value}``; a mapping (``skip_value={...}``) is the structured content."""
    if isinstance(value, Mapping):
        return _result(json.dumps(value, default=str), error=False, structured=dict(value))
    text = value if isinstance(value, str) else str(value)
    return _result(text, error=False, structured={"result": text})


def _result(text: str, *, error: bool, structured: dict[str, Any] | None = None) -> Any:
    from mcp.types import CallToolResult, TextContent  # mcp 2.x

    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=error, structured_content=structured
    )


def _shown(result: Any) -> Any:
    """What the client is shown of a result: its content and error flag (not its ``_meta``)."""
    if hasattr(result, "model_dump"):
        result = result.model_dump(by_alias=True, exclude_none=True)
    if isinstance(result, Mapping):
        return {"content": result.get("content"), "isError": result.get("isError")}
    return result


# ---------------------------------------------------------------------- mcp 1.x FastMCP

_session_runs: weakref.WeakKeyDictionary[Any, Run] = weakref.WeakKeyDictionary()
_session_lock = threading.Lock()


def _session_run() -> Run | None:
    """The run of the mcp 1.x session serving the current request (None outside a request)."""
    try:
        request_ctx = importlib.import_module("mcp.server.lowlevel.server").request_ctx
        session = request_ctx.get().session
    except (AttributeError, ImportError, LookupError):
        return None
    with _session_lock:
        run = _session_runs.get(session)
        if run is None:
            run = _session_runs[session] = Run("mcp-session", store=None)  # never shared
        return run


def _enter(run: Run | None) -> contextvars.Token[tuple[Run, ...]] | None:
    """Make a session's run current for one call. Not ``with run``: leaving that closes the run
    (and its trace), and a session's run lives on across its calls."""
    return None if run is None else make_current(run)


def _leave(token: contextvars.Token[tuple[Run, ...]] | None) -> None:
    if token is not None:
        restore_current(token)


def _tool_error(exc: LoopDetected) -> Exception:
    """FastMCP's ``ToolError`` with the stop message (its text reaches the client)."""
    try:
        tool_error: type[Exception] = importlib.import_module(
            "mcp.server.fastmcp.exceptions"
        ).ToolError
    except (AttributeError, ImportError):
        return exc
    return tool_error(stop_message(exc.detection))


@overload
def session_guard(fn: F, /, **options: Unpack[GuardOptions]) -> F: ...
@overload
def session_guard(fn: None = None, /, **options: Unpack[GuardOptions]) -> Callable[[F], F]: ...


def session_guard(
    fn: F | None = None, /, **options: Unpack[GuardOptions]
) -> F | Callable[[F], F]:
    """``guard()`` for mcp 1.x FastMCP tools, judged per client session.

    ``@server.tool()`` over ``@session_guard(on_loop="skip")``. Each call is judged in the run of
    the ``ServerSession`` serving it; a kill answers it and every later call of that session
    with an error result carrying the stop message (FastMCP shows "Error executing tool NAME:
    ..."). Outside a request (a direct call) the current ``fuzeguard.run()`` is used.
    """

    def decorate(f: F) -> F:
        guarded = guard(f, **options)
        wrapper: Callable[..., Any]
        if inspect.iscoroutinefunction(f):

            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _enter(_session_run())
                try:
                    return await guarded(*args, **kwargs)
                except LoopDetected as exc:
                    raise _tool_error(exc) from exc
                finally:
                    _leave(token)

            wrapper = async_wrapper
        else:

            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _enter(_session_run())
                try:
                    return guarded(*args, **kwargs)
                except LoopDetected as exc:
                    raise _tool_error(exc) from exc
                finally:
                    _leave(token)

            wrapper = sync_wrapper
        functools.update_wrapper(wrapper, guarded)
        return wrapper  # type: ignore[return-value]

    return decorate if fn is None else decorate(fn)
