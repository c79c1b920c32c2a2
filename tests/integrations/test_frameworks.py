"""Guarded tools in real agent frameworks (SPEC §1): the framework builds the same tool schema from
the guarded function as from the bare one, and a guarded tool invoked through the framework is
counted, killed or skipped as configured, with framework context objects left out of the
fingerprint.

The frameworks are the real packages (``pip install -e '.[frameworks]'``); each test skips when
its package is missing. No test needs a network or a model: each framework is driven through
its own local entry point (LangChain ``invoke``, a LangGraph ``ToolNode``, OpenAI Agents
``on_invoke_tool``, Pydantic AI ``FunctionModel``, MCP ``call_tool``).
"""

# No ``from __future__ import annotations``: the frameworks resolve the annotations of tools
# defined inside the tests, whose types are imported locally.
import asyncio
import json
from collections.abc import Callable
from typing import Annotated, Any

import pytest

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard.testing import capture_detections

# Default dedup: the 5th identical call in a row with an unchanged result (nothing changed in
# between) is the loop acted on; the 3rd and 4th are warned.
LOOP_AT = 5


def search(query: str, limit: int = 5) -> str:
    """Search the web.

    Args:
        query: What to look for.
        limit: How many results to return.
    """
    return f"{limit} results for {query}"


async def fetch(url: str, timeout: float = 3.0) -> str:
    """Fetch a web page.

    Args:
        url: The address of the page.
        timeout: Seconds to wait.
    """
    return f"<html>{url}</html>"


def counting(fn: Callable[..., Any], calls: list[str]) -> Callable[..., Any]:
    """A copy of ``fn`` (same name, signature and docs) that notes every time its body runs."""
    import functools

    if asyncio.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def body_async(*args: Any, **kwargs: Any) -> Any:
            calls.append(fn.__name__)
            return await fn(*args, **kwargs)

        return body_async

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    return body


def loop_detected_in(exc: BaseException | None) -> LoopDetected | None:
    """The LoopDetected a framework wrapped (``__cause__`` / ``__context__`` chain), if any."""
    while exc is not None:
        if isinstance(exc, LoopDetected):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


# --------------------------------------------------------------------------- LangChain


def test_langchain_tool_schema_is_the_same_for_a_guarded_sync_function() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    for options in ({}, {"parse_docstring": True}):
        bare, guarded = tool(search, **options), tool(guard(search), **options)
        assert convert_to_openai_tool(guarded) == convert_to_openai_tool(bare)
        assert guarded.args_schema is not None and bare.args_schema is not None
        assert guarded.args_schema.model_json_schema() == bare.args_schema.model_json_schema()


def test_langchain_tool_from_a_guarded_coroutine_stays_async() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    bare, guarded = tool(fetch, parse_docstring=True), tool(guard(fetch), parse_docstring=True)
    assert convert_to_openai_tool(guarded) == convert_to_openai_tool(bare)
    assert guarded.coroutine is not None and guarded.func is None


def test_langchain_invoke_counts_calls_and_kill_is_sticky() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    ran: list[str] = []
    web_search = tool(guard(counting(search, ran)))
    with fuzeguard.run() as run:
        for _ in range(LOOP_AT - 1):
            web_search.invoke({"query": "weather"})
        with pytest.raises(LoopDetected):
            web_search.invoke({"query": "weather"})
        with pytest.raises(LoopDetected):
            web_search.invoke({"query": "something else"})
    assert ran == ["search"] * (LOOP_AT - 1)
    assert run.stats().calls_by_fn == {"search": LOOP_AT - 1}


def test_langchain_handle_tool_error_does_not_swallow_a_kill() -> None:
    """``handle_tool_error=True`` only turns ``ToolException`` into text; LoopDetected still
    propagates, so the agent loop stops."""
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    web_search = tool(guard(search))
    web_search.handle_tool_error = True
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(LOOP_AT):
            web_search.invoke({"query": "weather"})


def test_langchain_async_tool_skip_answers_with_the_detection_message() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    ran: list[str] = []
    page = tool(guard(counting(fetch, ran), on_loop="skip"))

    async def agent() -> list[str]:
        async with fuzeguard.run():
            return [await page.ainvoke({"url": "https://example.org"}) for _ in range(LOOP_AT)]

    answers = asyncio.run(agent())
    assert answers[: LOOP_AT - 1] == ["<html>https://example.org</html>"] * (LOOP_AT - 1)
    assert "`fetch` with the same arguments 5 times" in answers[LOOP_AT - 1]
    assert ran == ["fetch"] * (LOOP_AT - 1)


def test_langchain_injected_tool_call_id_is_left_out_of_the_fingerprint() -> None:
    """Every LangChain tool call carries a fresh id; were it fingerprinted, no two calls would
    ever look alike and dedup could never fire."""
    pytest.importorskip("langchain_core")
    from langchain_core.tools import InjectedToolCallId, tool

    def lookup(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Look something up."""
        return f"answer to {query}"

    bare, guarded = tool(lookup), tool(guard(lookup))
    assert guarded.tool_call_schema.model_json_schema() == bare.tool_call_schema.model_json_schema()
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for i in range(LOOP_AT):
            guarded.invoke(
                {"name": "lookup", "args": {"query": "q"}, "id": f"call-{i}", "type": "tool_call"}
            )


def test_injected_arguments_written_as_strings_are_left_out_without_the_framework() -> None:
    """Under ``from __future__ import annotations`` annotations are strings; the injected-argument
    markers are recognized by name, so no framework import is needed to see them."""

    def lookup(query: str, tool_call_id: str) -> str:
        return f"answer to {query}"

    def react(query: str, runtime: object) -> str:
        return f"answer to {query}"

    # What the annotations look like in a module that postpones their evaluation.
    lookup.__annotations__["tool_call_id"] = "Annotated[str, InjectedToolCallId]"
    react.__annotations__["runtime"] = "ToolRuntime[None, dict]"

    for fn, injected in ((lookup, "tool_call_id"), (react, "runtime")):
        guarded = guard(fn)
        with fuzeguard.run(), pytest.raises(LoopDetected):
            for i in range(LOOP_AT):
                guarded("q", **{injected: f"fresh-{i}"})


def _tool_node_app(tool_obj: Any, **node_options: Any) -> Any:
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([tool_obj], **node_options))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def _tool_call(name: str, args: dict[str, Any], i: int) -> dict[str, Any]:
    from langchain_core.messages import AIMessage

    return {"messages": [AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{i}"}])]}


def test_langgraph_tool_node_lets_a_kill_end_the_graph_by_default() -> None:
    """LangGraph's ToolNode re-raises tool exceptions by default (only argument errors become
    messages), so a kill stops ``graph.invoke``."""
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.tools import tool

    app = _tool_node_app(tool(guard(search)))
    with fuzeguard.run() as run:
        for i in range(LOOP_AT - 1):
            out = app.invoke(_tool_call("search", {"query": "q"}, i))
            assert out["messages"][-1].content == "5 results for q"
        with pytest.raises(LoopDetected):
            app.invoke(_tool_call("search", {"query": "q"}, LOOP_AT))
    assert run.stats().calls == LOOP_AT - 1


def test_langgraph_handle_tool_errors_turns_a_kill_into_a_message_and_the_kill_sticks() -> None:
    """With ``handle_tool_errors=True`` the model reads the kill as an error message and may call
    again: every later call is refused too, because the run is dead."""
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.tools import tool

    ran: list[str] = []
    app = _tool_node_app(tool(guard(counting(search, ran))), handle_tool_errors=True)
    with fuzeguard.run() as run:
        contents = [
            app.invoke(_tool_call("search", {"query": "q"}, i))["messages"][-1].content
            for i in range(LOOP_AT + 2)
        ]
        later = app.invoke(_tool_call("search", {"query": "new"}, 99))["messages"][-1]
    assert all("LoopDetected" in c for c in contents[LOOP_AT - 1 :])
    assert later.status == "error" and "LoopDetected" in later.content
    assert ran == ["search"] * (LOOP_AT - 1)
    assert run.killed is not None


def test_langgraph_tool_runtime_is_left_out_of_the_fingerprint() -> None:
    """``ToolRuntime`` carries the growing graph state and a fresh tool call id on every call."""
    pytest.importorskip("langgraph.prebuilt")
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolRuntime

    def lookup(query: str, runtime: ToolRuntime) -> str:
        """Look something up."""
        return f"answer to {query}"

    bare, guarded = tool(lookup), tool(guard(lookup))
    assert guarded.tool_call_schema.model_json_schema() == bare.tool_call_schema.model_json_schema()
    app = _tool_node_app(guarded)
    with fuzeguard.run(), capture_detections() as found, pytest.raises(LoopDetected):
        for i in range(LOOP_AT):
            app.invoke(_tool_call("lookup", {"query": "q"}, i))
    assert [(d.kind, d.action) for d in found] == [("warning", "warn")] * 2 + [("loop", "kill")]


# --------------------------------------------------------------------------- OpenAI Agents SDK


def test_openai_agents_function_tool_schema_is_the_same_for_guarded_functions() -> None:
    pytest.importorskip("agents")
    from agents import RunContextWrapper, function_tool
    from agents.tool_context import ToolContext

    async def with_wrapper(ctx: RunContextWrapper[None], query: str) -> str:
        """Search with the run context.

        Args:
            query: What to look for.
        """
        return query

    def with_tool_context(ctx: ToolContext[None], query: str, limit: int = 3) -> str:
        """Search with the tool context.

        Args:
            query: What to look for.
            limit: How many.
        """
        return query

    for fn in (search, fetch, with_wrapper, with_tool_context):
        bare, guarded = function_tool(fn), function_tool(guard(fn))
        assert guarded.name == bare.name
        assert guarded.description == bare.description
        assert guarded.params_json_schema == bare.params_json_schema
        assert guarded.strict_json_schema == bare.strict_json_schema


def _tool_context(tool_name: str, arguments: str, i: int) -> Any:
    from agents.tool_context import ToolContext

    return ToolContext(
        context=None, tool_name=tool_name, tool_call_id=f"call-{i}", tool_arguments=arguments
    )


def test_openai_agents_default_error_function_hides_a_kill_but_it_sticks() -> None:
    """The SDK's default ``failure_error_function`` turns any tool exception into "An error
    occurred while running the tool. Please try again." for the model; the run stays dead, so
    retries are refused without running the tool."""
    pytest.importorskip("agents")
    from agents import function_tool

    ran: list[str] = []
    tool_obj = function_tool(guard(counting(search, ran)))
    args = json.dumps({"query": "q", "limit": 5})

    async def invoke_all() -> list[Any]:
        with fuzeguard.run():
            return [
                await tool_obj.on_invoke_tool(_tool_context(tool_obj.name, args, i), args)
                for i in range(LOOP_AT + 2)
            ]

    outputs = asyncio.run(invoke_all())
    assert outputs[: LOOP_AT - 1] == ["5 results for q"] * (LOOP_AT - 1)
    assert all("error" in str(o).lower() for o in outputs[LOOP_AT - 1 :])
    assert ran == ["search"] * (LOOP_AT - 1)


def test_openai_agents_without_error_function_the_kill_propagates() -> None:
    pytest.importorskip("agents")
    from agents import function_tool

    tool_obj = function_tool(guard(search), failure_error_function=None)
    args = json.dumps({"query": "q", "limit": 5})

    async def invoke_all() -> None:
        with fuzeguard.run():
            for i in range(LOOP_AT):
                await tool_obj.on_invoke_tool(_tool_context(tool_obj.name, args, i), args)

    with pytest.raises(Exception) as caught:
        asyncio.run(invoke_all())
    assert loop_detected_in(caught.value) is not None


def test_openai_agents_tool_context_is_left_out_of_the_fingerprint() -> None:
    """A fresh ToolContext (new call id) arrives with every call; repeats are still repeats."""
    pytest.importorskip("agents")
    from agents import RunContextWrapper, function_tool

    async def lookup(ctx: RunContextWrapper[None], query: str) -> str:
        """Look something up.

        Args:
            query: What to look for.
        """
        return f"answer to {query}"

    tool_obj = function_tool(guard(lookup, on_loop="skip"))
    args = json.dumps({"query": "q"})

    async def invoke_all() -> list[Any]:
        with fuzeguard.run():
            return [
                await tool_obj.on_invoke_tool(_tool_context(tool_obj.name, args, i), args)
                for i in range(LOOP_AT)
            ]

    outputs = asyncio.run(invoke_all())
    assert outputs[: LOOP_AT - 1] == ["answer to q"] * (LOOP_AT - 1)
    assert "`lookup` with the same arguments 5 times" in outputs[LOOP_AT - 1]


# --------------------------------------------------------------------------- Pydantic AI


def test_pydantic_ai_tool_definition_is_the_same_for_guarded_functions() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import RunContext, Tool

    def with_ctx(ctx: RunContext[None], query: str, limit: int = 5) -> str:
        """Search the web.

        Args:
            query: What to look for.
            limit: How many results to return.
        """
        return query

    for fn, takes_ctx in ((with_ctx, True), (search, False), (fetch, False)):
        bare, guarded = Tool(fn), Tool(guard(fn))
        assert guarded.takes_ctx is bare.takes_ctx is takes_ctx
        assert guarded.tool_def == bare.tool_def


def _scripted_model(tool_name: str, args: dict[str, Any], repeats: int) -> Any:
    """A Pydantic AI FunctionModel that calls one tool ``repeats`` times, then answers."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    turns = {"n": 0}

    def respond(messages: list[Any], info: Any) -> ModelResponse:
        turns["n"] += 1
        if turns["n"] <= repeats:
            return ModelResponse(parts=[ToolCallPart(tool_name, dict(args), tool_call_id=f"c{turns['n']}")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def test_pydantic_ai_kill_propagates_out_of_the_agent_run() -> None:
    """Pydantic AI feeds ``ModelRetry`` back to the model but lets other exceptions end the run;
    the RunContext (new on every call) does not hide the repeat."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, RunContext

    ran: list[str] = []

    def lookup(ctx: RunContext[None], query: str) -> str:
        """Look something up."""
        ran.append(query)
        return f"answer to {query}"

    agent = Agent(_scripted_model("lookup", {"query": "q"}, repeats=LOOP_AT + 2))
    agent.tool(guard(lookup))
    with fuzeguard.run() as run, pytest.raises(LoopDetected):
        agent.run_sync("find it")
    assert ran == ["q"] * (LOOP_AT - 1)
    assert run.stats().calls_by_fn == {"lookup": LOOP_AT - 1}


def test_pydantic_ai_skip_hands_the_model_the_detection_message() -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.messages import ToolReturnPart

    def lookup(ctx: RunContext[None], query: str) -> str:
        """Look something up."""
        return f"answer to {query}"

    agent = Agent(_scripted_model("lookup", {"query": "q"}, repeats=LOOP_AT))
    agent.tool(guard(lookup, on_loop="skip"))
    with fuzeguard.run():
        result = agent.run_sync("find it")
    returns = [
        part.content
        for message in result.all_messages()
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolReturnPart)
    ]
    assert result.output == "done"
    assert returns[: LOOP_AT - 1] == ["answer to q"] * (LOOP_AT - 1)
    assert "`lookup` with the same arguments 5 times" in returns[LOOP_AT - 1]


# --------------------------------------------------------------------------- MCP


def _mcp_server() -> tuple[Any, Any]:
    """The MCP SDK's high-level server class and its Context type (``MCPServer`` from mcp 2,
    ``FastMCP`` before)."""
    pytest.importorskip("mcp")
    try:
        from mcp.server.mcpserver import Context, MCPServer

        return MCPServer, Context
    except ImportError:
        from mcp.server.fastmcp import Context, FastMCP

        return FastMCP, Context


def _mcp_tools(guarded: bool) -> Any:
    server_cls, context_cls = _mcp_server()
    server = server_cls("test")
    wrap = guard if guarded else (lambda fn, **_: fn)

    async def fetch_with_context(url: str, ctx: context_cls) -> str:
        """Fetch a page and report progress."""
        return f"<html>{url}</html>"

    server.tool()(wrap(search))
    server.tool()(wrap(fetch))
    server.tool()(wrap(fetch_with_context, on_loop="skip"))
    return server


def _dump(tools: list[Any]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json") for t in tools]


def test_mcp_tool_listing_is_the_same_for_guarded_sync_and_async_tools() -> None:
    bare, guarded = _mcp_tools(guarded=False), _mcp_tools(guarded=True)
    listed = asyncio.run(guarded.list_tools())
    assert _dump(listed) == _dump(asyncio.run(bare.list_tools()))
    schema = next(t for t in _dump(listed) if t["name"] == "fetch_with_context")
    assert "ctx" not in json.dumps(schema), "the Context parameter is not part of the tool schema"


def test_mcp_call_tool_counts_calls_and_kill_is_sticky() -> None:
    server = _mcp_tools(guarded=True)

    async def client() -> list[BaseException | Any]:
        outcomes: list[BaseException | Any] = []
        with fuzeguard.run():
            for query in ["q"] * (LOOP_AT + 1) + ["other"]:
                try:
                    outcomes.append(await server.call_tool("search", {"query": query}))
                except Exception as exc:  # the SDK wraps tool exceptions in its ToolError
                    outcomes.append(exc)
        return outcomes

    outcomes = asyncio.run(client())
    assert not any(isinstance(o, BaseException) for o in outcomes[: LOOP_AT - 1])
    refused = outcomes[LOOP_AT - 1 :]
    assert all(isinstance(o, BaseException) and loop_detected_in(o) for o in refused)


def test_mcp_skip_answers_with_the_detection_message_and_context_is_not_fingerprinted() -> None:
    """The MCP Context parameter differs per request; the skip still comes at the 3rd call."""
    server = _mcp_tools(guarded=True)

    async def client() -> list[str]:
        texts = []
        with fuzeguard.run():
            for _ in range(LOOP_AT):
                result = await server.call_tool("fetch_with_context", {"url": "u"})
                content = getattr(result, "content", None)
                if content is None:  # mcp 1.x returns (content blocks, structured output)
                    content = result[0]
                texts.append(content[0].text)
        return texts

    texts = asyncio.run(client())
    assert texts[: LOOP_AT - 1] == ["<html>u</html>"] * (LOOP_AT - 1)
    assert "`fetch_with_context` with the same arguments 5 times" in texts[LOOP_AT - 1]


# --------------------------------------------------------------------------- smolagents


def test_smolagents_tool_from_a_guarded_function_has_the_same_inputs() -> None:
    """smolagents is not in the ``frameworks`` extra (it is heavier); this runs where it is
    installed."""
    pytest.importorskip("smolagents")
    from smolagents import tool

    bare, guarded = tool(search), tool(guard(search))
    assert (guarded.name, guarded.description, guarded.inputs, guarded.output_type) == (
        bare.name, bare.description, bare.inputs, bare.output_type
    )
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for _ in range(LOOP_AT):
            guarded(query="q")
