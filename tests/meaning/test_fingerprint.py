"""Argument and result fingerprints: canonical, deterministic, never raising (SPEC §3)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from fuzeguard import guard
from fuzeguard._private.configuration.config import Config
from fuzeguard._private.judging.plan import build_plan
from fuzeguard._private.meaning.fingerprint import encode, fingerprint, fingerprint_error, fingerprint_result


def args_fp(fn: Any, *args: Any, **kwargs: Any) -> bytes:
    plan = build_plan(fn, fn.__name__, Config(), {}, None)
    return plan.fingerprint_args(plan.binder.arguments(args, kwargs))


def f(a: int, b: int = 2) -> None: ...


def test_positional_and_keyword_spellings_of_one_call_are_the_same_call() -> None:
    """f(1, b=2) == f(a=1, b=2) == f(b=2, a=1) == f(1) (defaults are filled in)."""
    fps = {args_fp(f, 1, b=2), args_fp(f, a=1, b=2), args_fp(f, b=2, a=1), args_fp(f, 1, 2), args_fp(f, 1)}
    assert len(fps) == 1
    assert args_fp(f, 1, 3) not in fps


def test_same_arguments_to_different_functions_are_different_calls() -> None:
    def g(a: int, b: int = 2) -> None: ...

    assert args_fp(f, 1) != args_fp(g, 1)


def test_var_args_and_var_kwargs_are_bound() -> None:
    def h(a: int, *rest: int, **extra: int) -> None: ...

    assert args_fp(h, 1, 2, x=3, y=4) == args_fp(h, 1, 2, y=4, x=3)
    assert args_fp(h, 1, 2, x=3) != args_fp(h, 1, 3, x=3)


def test_a_call_that_does_not_bind_still_fingerprints() -> None:
    assert isinstance(args_fp(f, 1, 2, 3, 4), bytes)


def test_dict_key_order_does_not_matter() -> None:
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"x": {"a": 1, "b": [1, 2]}}) == fingerprint({"x": {"b": [1, 2], "a": 1}})


def test_types_are_told_apart() -> None:
    values = [1, 1.0, True, "1", b"1", [1], (1,), {1}, None, "", 0, False]
    assert len({fingerprint(v) for v in values}) == len(values)


def test_set_order_does_not_matter() -> None:
    assert fingerprint({"b", "a", "c"}) == fingerprint({"c", "a", "b"})
    assert fingerprint(frozenset({3, 1})) == fingerprint({1, 3})


def test_nan_fingerprints_consistently() -> None:
    assert fingerprint(float("nan")) == fingerprint(math.nan)
    assert fingerprint(float("inf")) != fingerprint(float("-inf"))


class Color(enum.Enum):
    RED = 1
    BLUE = 2


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Opaque:
    __slots__ = ()


class WithState:
    def __init__(self, v: int) -> None:
        self.v = v


class NoStableRepr:
    """Default repr includes the memory address; the fingerprint must not."""

    def __init__(self) -> None:
        pass


class Exploding:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __getattribute__(self, name: str) -> Any:
        if name in ("__dict__", "__slots__"):
            raise RuntimeError("no attributes either")
        return object.__getattribute__(self, name)


def weird_values() -> list[Any]:
    cyclic_list: list[Any] = [1]
    cyclic_list.append(cyclic_list)
    cyclic_dict: dict[str, Any] = {}
    cyclic_dict["self"] = cyclic_dict
    return [
        {1, 2}, b"\x00\xff", bytearray(b"ab"), memoryview(b"cd"), float("nan"), Color.RED, Point(1, 2),
        dt.datetime(2026, 1, 2, 3, 4, 5), dt.date(2026, 1, 2), dt.timedelta(seconds=3),
        decimal.Decimal("1.10"), uuid.UUID(int=5), Path("/tmp/x"), 3 + 4j, Opaque(), WithState(3),
        NoStableRepr(), Exploding(), cyclic_list, cyclic_dict, object(), len, Point, 10**5000,
        "\ud800 lone surrogate", {(1, 2): "tuple key", 3: "int key"}, [[[[[[[[[[[]]]]]]]]]]],
        range(3), iter([1, 2]), lambda: None,
    ]


@pytest.mark.parametrize("value", weird_values(), ids=lambda v: type(v).__name__)
def test_fingerprint_never_raises(value: Any) -> None:
    fp = fingerprint(value)
    assert isinstance(fp, bytes) and len(fp) == 16


def test_deeply_nested_structures_do_not_overflow_the_stack() -> None:
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    assert len(fingerprint(deep)) == 16


def test_self_referencing_structures_are_deterministic() -> None:
    a: list[Any] = [1]
    a.append(a)
    b: list[Any] = [1]
    b.append(b)
    assert fingerprint(a) == fingerprint(b)


def test_objects_with_state_fingerprint_by_their_state() -> None:
    assert fingerprint(WithState(1)) == fingerprint(WithState(1))
    assert fingerprint(WithState(1)) != fingerprint(WithState(2))


def test_opaque_objects_fingerprint_by_their_class_only() -> None:
    """The documented fallback: no address, so the same across processes; alike within a class."""
    assert fingerprint(NoStableRepr()) == fingerprint(NoStableRepr())
    assert fingerprint(Opaque()) == fingerprint(Opaque())
    assert fingerprint(Opaque()) != fingerprint(NoStableRepr())


def test_dataclasses_fingerprint_by_fields() -> None:
    assert fingerprint(Point(1, 2)) == fingerprint(Point(1, 2))
    assert fingerprint(Point(1, 2)) != fingerprint(Point(2, 1))


def test_pydantic_models_fingerprint_by_fields() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Q(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        text: str
        k: int = 3

    assert fingerprint(Q(text="a")) == fingerprint(Q(text="a", k=3))
    assert fingerprint(Q(text="a")) != fingerprint(Q(text="b"))


def test_numpy_arrays_fingerprint_by_dtype_shape_and_content() -> None:
    np = pytest.importorskip("numpy")
    assert fingerprint(np.arange(6)) == fingerprint(np.arange(6))
    assert fingerprint(np.arange(6)) != fingerprint(np.arange(6).reshape(2, 3))
    assert fingerprint(np.arange(6)) != fingerprint(np.arange(6, dtype=np.float32))
    assert fingerprint(np.float64(1.5)) == fingerprint(np.float64(1.5))


def test_numpy_object_arrays_fingerprint_by_their_items_not_their_pointers() -> None:
    """Second review d22: object arrays were hashed as pointer bytes, so no two were alike."""
    np = pytest.importorskip("numpy")

    def make(k: int) -> Any:
        return np.array(["a", {"k": k}], dtype=object)

    assert fingerprint(make(1)) == fingerprint(make(1))
    assert fingerprint(make(1)) != fingerprint(make(2))
    assert fingerprint(make(1)) != fingerprint(make(1).reshape(2, 1))


ADDRESSED = """
import threading, fuzeguard

def pages():
    yield 1

class Handle:
    __slots__ = ()
    def __repr__(self):
        return f"<Handle at 0x{{id(self):x}} open>"

@fuzeguard.guard
def tool(a):
    return "same"

plan = tool.guard.plan(fuzeguard.run().config)
junk = [bytearray(4096 * n) for n in range({n})]  # a different heap layout in each process
for value in (pages(), threading.Lock(), Handle(), [threading.RLock()], {{"lock": threading.Lock()}}):
    print(plan.fingerprint_args(plan.binder.arguments((value,), {{}})).hex())
"""


def test_values_known_by_address_fingerprint_alike_in_every_process() -> None:
    """Second review d22: generators and locks were fingerprinted through a repr holding their
    address, so a loop split across the workers of a shared run was never matched."""
    outs = {
        subprocess.run([sys.executable, "-c", ADDRESSED.format(n=n)], capture_output=True,
                       text=True, check=True).stdout
        for n in (0, 7, 50)
    }
    assert len(outs) == 1
    assert len(set(outs.pop().split())) == 5  # still five different values


def test_generators_fingerprint_by_the_function_they_run() -> None:
    def pages() -> Any:
        yield 1

    def rows() -> Any:
        yield 1

    assert fingerprint(pages()) == fingerprint(pages()) != fingerprint(rows())


def test_ten_megabyte_strings_fingerprint_and_differ_by_one_character() -> None:
    big = "x" * 10_000_000
    assert fingerprint(big) != fingerprint(big[:-1] + "y")


def test_fingerprints_are_the_same_across_processes_and_hash_seeds() -> None:
    code = (
        "from fuzeguard._private.meaning.fingerprint import fingerprint;"
        "print(fingerprint({'q': {'b', 'a', 'c'}, 'n': [1, 2.5, None], 'd': {'z': 1, 'y': 2}}).hex())"
    )
    outs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, check=True).stdout)
    assert len(outs) == 1


VOLATILE = frozenset({"request_id", "timestamp", "id"})


def test_result_fingerprint_ignores_volatile_keys_at_any_depth() -> None:
    a = {"status": "pending", "request_id": "r1", "meta": {"timestamp": 1, "id": 7}}
    b = {"status": "pending", "request_id": "r2", "meta": {"timestamp": 2, "id": 8}}
    assert fingerprint_result(a, VOLATILE) == fingerprint_result(b, VOLATILE)
    c = {**a, "status": "done"}
    assert fingerprint_result(a, VOLATILE) != fingerprint_result(c, VOLATILE)


def test_volatile_keys_match_case_insensitively() -> None:
    assert fingerprint_result({"Request_ID": 1, "v": 1}, VOLATILE) == fingerprint_result(
        {"request_id": 2, "v": 1}, VOLATILE
    )


def test_json_text_results_have_volatile_keys_stripped_too() -> None:
    """A tool returning a JSON string with a fresh request id each time is still the same answer."""
    a = '{"status": "pending", "request_id": "abc"}'
    b = '{"request_id": "def", "status": "pending"}'
    assert fingerprint_result(a, VOLATILE) == fingerprint_result(b, VOLATILE)
    assert fingerprint_result("{not json", VOLATILE) == fingerprint_result("{not json", VOLATILE)


def test_default_volatile_keys_apply_to_guarded_results() -> None:
    import fuzeguard
    from fuzeguard import LoopDetected

    counter = iter(range(100))

    @guard(repeat_warn_threshold=0)
    def job_state() -> dict[str, Any]:
        return {"state": "running", "request_id": next(counter), "timestamp": next(counter)}

    with fuzeguard.run() as r, pytest.raises(LoopDetected):
        for _ in range(5):
            job_state()
    assert r.stats().calls == 4  # the 5th identical call and answer in a row is killed


def test_error_fingerprints_depend_on_class_and_message() -> None:
    assert fingerprint_error(ValueError("x")) == fingerprint_error(ValueError("x"))
    assert fingerprint_error(ValueError("x")) != fingerprint_error(KeyError("x"))
    assert fingerprint_error(ValueError("x")) != fingerprint_error(ValueError("y"))


def test_encoding_is_readable_for_simple_values() -> None:
    assert encode({"b": 2, "a": "x"}) == b"{s1:as1:xs1:bi2;}"
