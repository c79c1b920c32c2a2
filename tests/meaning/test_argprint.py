"""The one-pass binder: for every call it takes, exactly the general binder's mapping and
fingerprint; every other call is left to the general path."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzeguard import Config
from fuzeguard._private.judging.plan import Binder, build_plan
from fuzeguard._private.meaning.argprint import compile_binder
from fuzeguard._private.meaning.fingerprint import _STREAM_FROM, fingerprint

PLAIN = st.one_of(
    st.text(max_size=40), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
    st.booleans(), st.none(), st.floats(allow_nan=True, allow_infinity=True),
)
ANY = st.one_of(PLAIN, st.lists(st.integers(), max_size=3), st.binary(max_size=5),
                st.tuples(st.text(max_size=3)))


def tool(query, limit, zeta, alpha, é):  # type: ignore[no-untyped-def]
    return query


NAMES = ("query", "limit", "zeta", "alpha", "é")


def _general(plan: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, bytes]:
    arguments = plan.binder.arguments(args, kwargs)
    return arguments, plan.fingerprint_args(arguments)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(ANY, min_size=5, max_size=5), by_name=st.booleans())
def test_a_call_it_takes_binds_and_fingerprints_as_the_general_path(
    values: list[Any], by_name: bool
) -> None:
    plan = build_plan(tool, "tool", Config(), {}, None)
    assert plan.bind_and_print is not None
    args: tuple[Any, ...] = () if by_name else tuple(values)
    kwargs = dict(zip(NAMES, values, strict=True)) if by_name else {}
    fast = plan.bind_and_print(args, kwargs)
    if fast is None:
        assert not all(isinstance(v, (str, int, float, type(None))) for v in values) or any(
            isinstance(v, str) and len(v.encode("utf-8", "surrogatepass")) >= _STREAM_FROM
            for v in values
        )
        return
    arguments, fp = fast
    general = _general(plan, args, kwargs)
    assert fp == general[1]
    assert list(arguments.items()) == list(general[0].items())


def test_calls_it_does_not_take_are_left_to_the_general_path() -> None:
    plan = build_plan(tool, "tool", Config(), {}, None)
    bind = plan.bind_and_print
    assert bind is not None
    assert bind(("q", 1, 2), {}) is None  # parameters left out
    assert bind(("q",), {"limit": 1, "zeta": 2, "alpha": 3, "é": 4}) is None  # mixed
    assert bind((), {"query": "q", "limit": 1, "zeta": 2, "alpha": 3, "x": 4}) is None
    assert bind(("x" * _STREAM_FROM, 1, 2, 3, 4), {}) is None  # a text hashed in place
    assert bind((["a list"], 1, 2, 3, 4), {}) is None


def test_a_parameter_left_out_of_fingerprints_is_left_out_of_the_mapping() -> None:
    def method(self, path, ctx):  # type: ignore[no-untyped-def]
        return path

    plan = build_plan(method, "method", Config(), {"ignore_args": ["ctx"]}, None)
    assert plan.bind_and_print is not None
    for args, kwargs in (((object(), "a.txt", 1), {}),
                         ((), {"ctx": 1, "path": "a.txt", "self": object()})):
        arguments, fp = plan.bind_and_print(args, kwargs)
        general = _general(plan, args, kwargs)
        assert arguments == general[0] == {"path": "a.txt"} and fp == general[1]


def test_signatures_with_other_kinds_of_parameters_get_no_one_pass_binder() -> None:
    def star(*args, **kwargs):  # type: ignore[no-untyped-def]
        return args

    def keyword_only(a, *, b):  # type: ignore[no-untyped-def]
        return a

    def positional_only(a, /, b):  # type: ignore[no-untyped-def]
        return a

    for fn in (star, keyword_only, positional_only):
        assert build_plan(fn, fn.__name__, Config(), {}, None).bind_and_print is None


def test_the_generated_source_holds_no_parameter_name() -> None:
    """Names are passed in as values: a signature's text is never executed."""
    bind = compile_binder(("a'); import os; os._exit(3); ('",), frozenset(), b"t\x00")
    assert bind is not None
    arguments, fp = bind(("v",), {})
    binder = Binder(lambda **kw: None, ())
    assert list(arguments) == ["a'); import os; os._exit(3); ('"] and len(fp) == 16
    assert binder.simple is False


@settings(max_examples=300, deadline=None)
@given(values=st.lists(ANY, min_size=5, max_size=5), drop=st.integers(min_value=0, max_value=5))
def test_bound_arguments_are_fingerprinted_as_the_general_path(
    values: list[Any], drop: int
) -> None:
    """The printer of bound mappings: the general fingerprint, or None (then the general path
    is taken); a mapping with other keys is never printed."""
    plan = build_plan(tool, "tool", Config(), {}, None)
    assert plan.print_bound is not None
    bound = dict(zip(NAMES, values, strict=True))
    if drop < 5:
        del bound[NAMES[drop]]
    printed = plan.print_bound(bound)
    general = fingerprint(bound, prefix=plan.prefix)
    assert printed in (None, general)
    if drop < 5:
        assert printed is None
    assert plan.fingerprint_args(bound) == general


def test_a_call_with_a_default_or_mixed_arguments_is_fingerprinted_by_the_printer() -> None:
    def search(query, limit=10, *, verbose=False):  # type: ignore[no-untyped-def]
        return query

    plan = build_plan(search, "search", Config(), {}, None)
    assert plan.bind_and_print is None and plan.print_bound is not None
    bound = plan.binder.arguments(("q",), {"verbose": True})
    assert plan.print_bound(bound) == fingerprint(bound, prefix=plan.prefix)
