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
  A warned call's result carries a short note for the model (one more text block).
- mcp 1.x: ``@server.tool()`` over ``@session_guard(on_loop="skip")``: a ``guard()`` whose run
  is the one of the request's client session.

Which client session a call belongs to is ``session_key`` (a function of the request context, in
both versions); by default ``default_session_key``, which works in every transport and protocol
version: a session or conversation header when the client sends one (``mcp-session-id``,
``x-conversation-id``, ``x-session-id``), else the SSE transport's ``session_id``, else the
client's HTTP connection (its address and port: mcp 2.x's default client negotiates a protocol
without sessions, and stateless HTTP has none; logged once as ``fuzeguard.mcp_session_by_connection``,
advising a header or a ``session_key``; mcp 1.x's client opens a connection per request under
``stateless_http=True``, so there a header or a ``session_key`` is needed), else the connection's
session object (stdio, mcp 1.x sessions), and only when none of these exists the process (logged once as
``fuzeguard.mcp_session_per_process``). A connection is a guess: a reverse proxy that pools
connections sends many clients over one. So in a run keyed by a connection a kill refuses only
what looped (that function with those arguments, for ``ImplicitRun.STUCK_TTL``), and the
connection's other calls are judged afresh: one client's loop never locks another out.

A session or conversation header is asserted by the client: a client that sends another's
``x-conversation-id`` joins that conversation's run (it can use up its budgets or be refused by
its kill, and read nothing of it). Where the server authenticates its clients, pass a
``session_key`` that includes the authenticated principal.

``LoopGuardMiddleware`` books only calls to tools the server has (as its own ``tools/list``
answers): a call to a made-up name goes straight to the SDK, which answers "Unknown tool".

Install with ``pip install 'fuzeguard[mcp]'``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import importlib
import inspect
import json
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.guard import Guard, Pending, Skipped, guard
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.run import Run, make_current, restore_current
from fuzeguard.integrations._shared.calls import Outcome, ToolCalls, stop_message, with_notes
from fuzeguard.integrations._shared.runs import KeyedRuns

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import GuardOptions, ToolOptions

F = TypeVar("F", bound=Callable[..., Any])
MAX_SESSIONS = 1024  # runs kept for the most recently active sessions


SESSION_HEADERS = ("mcp-session-id", "x-conversation-id", "x-session-id")
_warned: set[str] = set()


def default_session_key(ctx: Any) -> Hashable:
    """The client session of a request (see the module docstring): ``ctx`` is mcp 2.x's request
    context or mcp 1.x's ``RequestContext``, each with ``request`` (the HTTP request, None on
    stdio) and ``session``."""
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is not None:
        for name in SESSION_HEADERS:
            value = headers.get(name)
            if value:
                return (name, value)
    query = getattr(request, "query_params", None)
    if query is not None and query.get("session_id"):
        return ("sse-session", query.get("session_id"))
    client = getattr(request, "client", None)
    if client is not None:
        _warn_once("fuzeguard.mcp_session_by_connection",
                   "the client sent no session or conversation header, so its tool calls are "
                   "judged per HTTP connection (its address and port): a client that reconnects "
                   "starts afresh, and clients a proxy sends over one connection share it (a "
                   "kill there refuses only the call that looped). Send an x-conversation-id "
                   "header from the client, or pass session_key= to name the conversation")
        return ("connection", getattr(client, "host", None), getattr(client, "port", None))
    if request is None:
        session = getattr(ctx, "session", None)
        if session is not None and _session_per_connection(ctx):
            return ("session", session)
        return ("process",)  # stdio: the process serves one client
    _warn_once("fuzeguard.mcp_session_per_process",
               "a tool call came with no session, conversation header or client address: every "
               "such call is judged in one run for the whole process, so one client's loop can "
               "stop the others. Pass session_key= to tell the clients apart")
    return ("process",)


_default_session_key = default_session_key


def _session_per_connection(ctx: Any) -> bool:
    """Whether the request's session object lasts as long as its connection (mcp 1.x)."""
    return not hasattr(ctx, "method")  # mcp 2.x's context (it has ``method``) has one per request


def _warn_once(event: str, message: str) -> None:
    if event not in _warned:
        _warned.add(event)
        emit("warning", event, message=message)


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
        self.session_key = session_key or default_session_key
        self._runs = KeyedRuns("mcp-session", limit=MAX_SESSIONS)  # never shared via a store
        self._tools = _ServerTools()

    def run_for(self, key: Hashable) -> Run:
        """The run of one client session (opened on its first call)."""
        return self._runs.get(key)

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params: Mapping[str, Any] = ctx.params or {}
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, Mapping)):
            return await call_next(ctx)  # the SDK reports malformed params itself
        key = self.session_key(ctx)
        run = self.run_for(key)
        if not await self._tools.has(name, ctx, call_next):
            return await call_next(ctx)  # the SDK answers "Unknown tool": nothing to book
        token = make_current(run)
        try:
            outcome, result = await self.calls.acall(name, arguments, lambda: call_next(ctx),
                                                     shown=_shown)
        finally:
            restore_current(token)
        if outcome.runs:
            return _noted(result, outcome)
        if outcome.skipped is not None:
            return _skip_result(outcome.skipped.value)
        assert outcome.killed is not None
        if _guessed(key):
            self._runs.restart(key)
        return _result(stop_message(outcome.killed), error=True)


def _guessed(key: Hashable) -> bool:
    """Whether a session key is a guess that may stand for several clients: an HTTP connection,
    which a reverse proxy that pools connections shares between its clients."""
    return isinstance(key, tuple) and bool(key) and key[0] == "connection"


class _ServerTools:
    """The names of the server's tools, as its own ``tools/list`` answers: a call to a tool the
    server does not have is not booked (a client could otherwise grow its session's run
    without bound with made-up names). Listed again when a name is not known, at most every
    ``RELIST_EVERY`` seconds. If the server cannot be listed so, every name counts as known from
    then on (logged once): calls are judged as before, whatever their name."""

    RELIST_EVERY = 1.0
    MAX_PAGES = 100

    def __init__(self) -> None:
        self.names: frozenset[str] = frozenset()
        self.listed_at = float("-inf")
        self.unlisted = False

    async def has(self, name: str, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> bool:
        if name in self.names or self.unlisted:
            return True
        now = time.monotonic()
        if now - self.listed_at < self.RELIST_EVERY:
            return False
        self.listed_at = now
        try:
            self.names = await _listed_tools(ctx, call_next, self.MAX_PAGES)
        except Exception as exc:  # the guard never takes the server down: judge the call
            self.unlisted = True
            emit("warning", "fuzeguard.mcp_tools_unlisted", error=exception_text(exc),
                 message="the server's tools/list could not be read through the middleware "
                 "chain, so calls to tools the server does not have are booked too")
            return True
        return name in self.names



async def _listed_tools(
    ctx: Any, call_next: Callable[[Any], Awaitable[Any]], max_pages: int
) -> frozenset[str]:
    """The server's tool names, from ``tools/list`` asked through the rest of the middleware
    chain with the call's own context (its ``_meta``, which the protocol requires)."""
    meta = {k: v for k, v in (ctx.params or {}).items() if k == "_meta"}
    names: set[str] = set()
    cursor = None
    for _ in range(max_pages):
        params = dict(meta, cursor=cursor) if cursor else dict(meta)
        page = await call_next(dataclasses.replace(ctx, method="tools/list", params=params))
        if not isinstance(page, Mapping):
            page = page.model_dump(by_alias=True)
        names.update(t["name"] for t in page.get("tools", ()))
        cursor = page.get("nextCursor")
        if not cursor:
            break
    return frozenset(names)


def _skip_result(value: Any) -> Any:
    """A skip's answer, valid for the tool's output schema: the SDK wraps a tool's plain return
    value as ``{"result": value}``; a mapping (``skip_value={...}``) is the structured content."""
    if isinstance(value, Mapping):
        return _result(json.dumps(value, default=str), error=False, structured=dict(value))
    text = value if isinstance(value, str) else str(value)
    return _result(text, error=False, structured={"result": text})


def _result(text: str, *, error: bool, structured: dict[str, Any] | None = None) -> Any:
    from mcp.types import CallToolResult, TextContent  # here: only mcp 2.x's middleware answers so

    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=error, structured_content=structured
    )


def _noted(result: Any, outcome: Outcome) -> Any:
    """A result with the notes for the model (a warning, the run's notes) as more text blocks."""
    from mcp.types import CallToolResult, TextContent  # here: only mcp 2.x's middleware answers so

    if isinstance(result, CallToolResult):
        notes = outcome.notes()
        if not notes:
            return result
        blocks = [TextContent(type="text", text=note) for note in notes]
        return result.model_copy(update={"content": [*result.content, *blocks]})
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        notes = outcome.notes()
        if not notes:
            return result
        dumped = [TextContent(type="text", text=note).model_dump(by_alias=True) for note in notes]
        return {**result, "content": [*result["content"], *dumped]}
    return result


def _shown(result: Any) -> Any:
    """What the client is shown of a result: its content and error flag (not its ``_meta``)."""
    if hasattr(result, "model_dump"):
        result = result.model_dump(by_alias=True, exclude_none=True)
    if isinstance(result, Mapping):
        return {"content": result.get("content"), "isError": result.get("isError")}
    return result


# ---------------------------------------------------------------------- mcp 1.x FastMCP

_session_runs: weakref.WeakKeyDictionary[Any, Run] = weakref.WeakKeyDictionary()
_keyed_runs = KeyedRuns("mcp-session", limit=MAX_SESSIONS)
_session_lock = new_lock()


def _session_run(session_key: Callable[[Any], Hashable]) -> Run | None:
    """The run of the mcp 1.x client session serving the current request (None outside a
    request): the one of its ``session_key``, kept with the session object when the key is it."""
    try:
        request_ctx = importlib.import_module("mcp.server.lowlevel.server").request_ctx
        context = request_ctx.get()
    except (AttributeError, ImportError, LookupError):
        return None
    key = session_key(context)
    if isinstance(key, tuple) and len(key) == 2 and key[0] == "session":
        with _session_lock:
            run = _session_runs.get(key[1])
            if run is None:
                run = _session_runs[key[1]] = Run("mcp-session", store=None)  # never shared
            return run
    return _keyed_runs.get(key)


def _enter(run: Run | None) -> contextvars.Token[tuple[Run, ...]] | None:
    """Make a session's run current for one call. Not ``with run``: leaving that closes the run
    (and its trace), and a session's run lives on across its calls."""
    return None if run is None else make_current(run)


def _leave(token: contextvars.Token[tuple[Run, ...]] | None) -> None:
    if token is not None:
        restore_current(token)


def _with_warning(result: Any, started: Pending) -> Any:
    """A text result with the notes for the model (a warning, the run's notes)."""
    return with_notes(result, Outcome(pending=started)) if isinstance(result, str) else result


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
def session_guard(
    fn: F, /, *, session_key: Callable[[Any], Hashable] | None = None,
    **options: Unpack[GuardOptions],
) -> F: ...
@overload
def session_guard(
    fn: None = None, /, *, session_key: Callable[[Any], Hashable] | None = None,
    **options: Unpack[GuardOptions],
) -> Callable[[F], F]: ...


def session_guard(
    fn: F | None = None, /, *, session_key: Callable[[Any], Hashable] | None = None,
    **options: Unpack[GuardOptions],
) -> F | Callable[[F], F]:
    """``guard()`` for mcp 1.x FastMCP tools, judged per client session.

    ``@server.tool()`` over ``@session_guard(on_loop="skip")``. Each call is judged in the run of
    the client session serving it: ``session_key(request_context)`` (mcp 1.x's
    ``RequestContext``), by default ``default_session_key`` (a session or conversation header,
    the SSE session, the HTTP connection, else the connection's ``ServerSession``), so that
    ``stateless_http=True``, which makes a session per request, still judges a client's calls
    together. A kill answers it and every later call of that session with an error result
    carrying the stop message (FastMCP shows "Error executing tool NAME: ..."). Outside a request
    (a direct call) the current ``fuzeguard.run()`` is used.
    """
    key_of = session_key or default_session_key

    def decorate(f: F) -> F:
        guarded = guard(f, **options)
        checks: Guard = guarded.guard  # type: ignore[attr-defined]
        wrapper: Callable[..., Any]
        if inspect.iscoroutinefunction(f):

            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _enter(_session_run(key_of))
                try:
                    started = checks.begin(args, kwargs)
                    if started is None or isinstance(started, Skipped):
                        return await f(*args, **kwargs) if started is None else started.value
                    started.enter()
                    try:
                        result = await f(*args, **kwargs)
                    except BaseException as exc:
                        started.fail(exc)
                        raise
                    started.done(result)
                    return _with_warning(result, started)
                except LoopDetected as exc:
                    raise _tool_error(exc) from exc
                finally:
                    _leave(token)

            wrapper = async_wrapper
        else:

            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _enter(_session_run(key_of))
                try:
                    started = checks.begin(args, kwargs)
                    if started is None or isinstance(started, Skipped):
                        return f(*args, **kwargs) if started is None else started.value
                    started.enter()
                    try:
                        result = f(*args, **kwargs)
                    except BaseException as exc:
                        started.fail(exc)
                        raise
                    started.done(result)
                    return _with_warning(result, started)
                except LoopDetected as exc:
                    raise _tool_error(exc) from exc
                finally:
                    _leave(token)

            wrapper = sync_wrapper
        functools.update_wrapper(wrapper, guarded)
        return wrapper  # type: ignore[return-value]

    return decorate if fn is None else decorate(fn)
