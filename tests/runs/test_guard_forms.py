"""guard() in all its forms, and the wrapper's faithfulness to introspection (SPEC §1)."""

from __future__ import annotations

import asyncio
import inspect
import typing
from dataclasses import dataclass

import pytest

import fuzeguard
from fuzeguard import ConfigError, LoopDetected, guard


def search(query: str, limit: int = 5, *, lang: str = "en") -> list[str]:
    """Search the web for ``query``."""
    return [query] * limit


async def fetch(url: str, timeout: float = 3.0) -> str:
    """Fetch a page."""
    return url


def test_bare_decorator_guards_the_function() -> None:
    @guard
    def tool(x: int) -> int:
        return x

    with fuzeguard.run() as r:
        assert tool(1) == 1
    assert r.stats().calls_by_fn == {"tool": 1}


def test_decorator_with_options_guards_the_function() -> None:
    @guard(max_iterations=1)
    def tool(x: int) -> int:
        return x

    with fuzeguard.run(), pytest.raises(LoopDetected):
        tool(1)
        tool(2)


def test_functional_form_guards_the_function() -> None:
    """Fuze API: ``const search = guard(searchFn, { onLoop: 'warn' })``."""
    guarded = guard(search, on_loop="warn")
    with fuzeguard.run() as r:
        assert guarded("q", 1) == ["q"]
    assert r.stats().calls == 1


def test_onloop_is_an_alias_of_on_loop() -> None:
    """Fuze's camelCase ``onLoop`` option is accepted as written in its docs."""
    guarded = guard(search, onLoop="skip", repeat_warn_threshold=0)
    with fuzeguard.run():
        results = [guarded("same") for _ in range(5)]
    # The 5th identical call in a row is a certain loop: skipped, as onLoop says.
    assert results[:4] == [["same"] * 5] * 4
    assert isinstance(results[-1], str) and "same arguments" in results[-1]


def test_passing_both_on_loop_and_onloop_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="onLoop"):
        guard(search, on_loop="warn", onLoop="kill")


def test_options_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        guard(search, "warn")  # type: ignore[call-overload]


def test_unknown_option_is_a_type_error_with_a_suggestion() -> None:
    with pytest.raises(TypeError, match="did you mean 'max_iterations'"):
        guard(search, max_iteration=3)


def test_wrong_option_value_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="max_iterations"):
        guard(search, max_iterations="many")


def test_run_wide_setting_on_a_guard_is_refused_with_where_to_put_it() -> None:
    with pytest.raises(TypeError, match=r"fuzeguard.run\(max_calls=...\)"):
        guard(search, max_calls=3)


def test_signature_matches_the_original() -> None:
    assert inspect.signature(guard(search)) == inspect.signature(search)


def test_type_hints_match_the_original() -> None:
    assert typing.get_type_hints(guard(search)) == typing.get_type_hints(search)


def test_name_doc_qualname_module_and_wrapped_match_the_original() -> None:
    guarded = guard(search)
    assert guarded.__name__ == "search"
    assert guarded.__qualname__ == search.__qualname__
    assert guarded.__doc__ == search.__doc__
    assert guarded.__module__ == search.__module__
    assert guarded.__wrapped__ is search  # type: ignore[attr-defined]


def test_defaults_and_kwdefaults_are_copied() -> None:
    guarded = guard(search)
    assert guarded.__defaults__ == search.__defaults__
    assert guarded.__kwdefaults__ == search.__kwdefaults__


def test_coroutine_function_stays_a_coroutine_function() -> None:
    guarded = guard(fetch)
    assert inspect.iscoroutinefunction(guarded)
    assert asyncio.run(guarded("u")) == "u"


def test_plain_function_does_not_look_async() -> None:
    assert not inspect.iscoroutinefunction(guard(search))


def test_async_calls_are_recorded_and_killed() -> None:
    guarded = guard(fetch, max_iterations=2)

    async def agent() -> None:
        async with fuzeguard.run() as r:
            await guarded("a")
            await guarded("b")
            with pytest.raises(LoopDetected):
                await guarded("c")
            assert r.stats().calls == 2

    asyncio.run(agent())


class Toolkit:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @guard(max_iterations=2)
    def lookup(self, key: str) -> str:
        """Look a key up."""
        return self.prefix + key

    @guard
    @staticmethod
    def version() -> str:
        return "1"

    @guard
    @classmethod
    def kind(cls) -> str:
        return cls.__name__


def test_methods_are_guarded_with_self_passed_through() -> None:
    kit = Toolkit("k:")
    with fuzeguard.run() as r:
        assert kit.lookup("a") == "k:a"
        assert Toolkit.lookup(kit, "b") == "k:b"
        with pytest.raises(LoopDetected):
            kit.lookup("c")
    assert r.stats().calls_by_fn == {"lookup": 2}


def test_method_signature_matches_the_original_through_the_instance() -> None:
    assert list(inspect.signature(Toolkit("").lookup).parameters) == ["key"]


def test_self_is_left_out_of_the_fingerprint() -> None:
    """Two instances of one toolkit asking the same thing make the same call."""

    class Kit:
        def __init__(self, n: int) -> None:
            self.n = n

        @guard(repeat_warn_threshold=0)
        def lookup(self, key: str) -> str:
            return key

    with fuzeguard.run() as r, pytest.raises(LoopDetected):
        for i in range(5):
            Kit(i).lookup("same")
    assert r.stats().calls == 4  # the 5th identical call in a row is killed


def test_static_and_class_methods_can_be_guarded() -> None:
    with fuzeguard.run() as r:
        assert Toolkit.version() == "1"
        assert Toolkit.kind() == "Toolkit"
    assert r.stats().calls_by_fn == {"version": 1, "kind": 1}


def test_bound_method_can_be_guarded_functionally() -> None:
    kit = Toolkit("p:")
    guarded = guard(kit.lookup.__wrapped__.__get__(kit), name="lookup2")  # type: ignore[attr-defined]
    with fuzeguard.run() as r:
        assert guarded("z") == "p:z"
    assert r.stats().calls_by_fn == {"lookup2": 1}


def test_generator_function_stays_a_generator_function_and_is_recorded() -> None:
    def pages(n: int) -> typing.Iterator[int]:
        yield from range(n)

    guarded = guard(pages)
    assert inspect.isgeneratorfunction(guarded)
    with fuzeguard.run() as r:
        assert list(guarded(3)) == [0, 1, 2]
    assert r.stats().calls == 1


def test_async_generator_function_stays_one_and_is_recorded() -> None:
    async def chunks(n: int) -> typing.AsyncIterator[int]:
        for i in range(n):
            yield i

    guarded = guard(chunks)
    assert inspect.isasyncgenfunction(guarded)

    async def consume() -> list[int]:
        async with fuzeguard.run() as r:
            out = [c async for c in guarded(3)]
            assert r.stats().calls == 1
            return out

    assert asyncio.run(consume()) == [0, 1, 2]


class RunContext:
    """Stands for a framework's context type; only its name matters to the guard."""

    def __init__(self, n: int) -> None:
        self.n = n


class ToolContextWrapper:
    def __init__(self, n: int) -> None:
        self.n = n


def test_context_parameters_are_passed_through_and_left_out_of_the_fingerprint() -> None:
    """Pydantic AI RunContext / OpenAI Agents ToolContext / MCP Context arguments change on every
    call; they must not make identical tool calls look different."""
    seen = []

    @guard(repeat_warn_threshold=0)
    def tool(ctx: RunContext, query: str) -> str:
        seen.append(ctx.n)
        return query

    with fuzeguard.run(), pytest.raises(LoopDetected):
        for i in range(5):
            tool(RunContext(i), "same")
    assert seen == [0, 1, 2, 3]  # the 5th identical call in a row is killed


def test_string_annotated_context_wrapper_parameters_are_recognized() -> None:
    @guard(repeat_warn_threshold=0)
    def tool(wrapper: ToolContextWrapper, query: str) -> str:
        return query

    tool.__annotations__["wrapper"] = "agents.run_context.RunContextWrapper[Any]"
    tool2 = guard(tool.__wrapped__, repeat_warn_threshold=0)  # type: ignore[attr-defined]
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for i in range(5):
            tool2(ToolContextWrapper(i), "same")


def test_ignore_args_are_passed_through_and_left_out_of_the_fingerprint() -> None:
    calls = []

    @guard(ignore_args=["request_id"], repeat_warn_threshold=0)
    def tool(query: str, request_id: str) -> str:
        calls.append(request_id)
        return query

    with fuzeguard.run(), pytest.raises(LoopDetected):
        for i in range(5):
            tool("same", request_id=f"r{i}")
    assert calls == ["r0", "r1", "r2", "r3"]  # the 5th identical call in a row is killed


def test_guard_state_is_exposed_on_the_wrapper() -> None:
    guarded = guard(search, on_loop="warn", name="web_search")
    assert guarded.guard.name == "web_search"  # type: ignore[attr-defined]
    assert guarded.guard.options["on_loop"] == ("warn",)  # type: ignore[attr-defined]


def test_guarding_something_not_callable_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="takes a function"):
        guard(42)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Query:
    text: str


def test_guarded_function_keeps_its_exceptions() -> None:
    @guard
    def broken(q: Query) -> str:
        raise KeyError(q.text)

    with fuzeguard.run() as r, pytest.raises(KeyError):
        broken(Query("x"))
    assert r.stats().errors == 1


class AsyncTool:
    """A callable object whose __call__ is a coroutine function."""

    async def __call__(self, query: str) -> str:
        return query


def test_async_callable_object_gets_an_async_wrapper() -> None:
    guarded = guard(AsyncTool(), name="async_tool")
    assert inspect.iscoroutinefunction(guarded)

    async def main() -> str:
        async with fuzeguard.run() as r:
            out = await guarded("q")
            assert r.stats().calls_by_fn == {"async_tool": 1}
            return out

    assert asyncio.run(main()) == "q"
