"""The shared run's codec: what a record's features hold comes back with its types."""

from __future__ import annotations

from typing import Any

import pytest

from fuzeguard._private.store import codec


@pytest.mark.parametrize("value", [
    ("a", "b"),
    frozenset({("a", "b"), ("b", "c")}),
    (frozenset({("x", "y")}), frozenset()),
    ("a", 1, None),
    frozenset({("a", 1), ("b",)}),
    frozenset({"a", "b"}),
    {"k": ("v", "w")},
    [("a", "b"), b"\x00\x01"],
    (),
])
def test_features_come_back_equal_and_of_the_same_types(value: Any) -> None:
    back = codec.decode(codec.encode(value))
    assert back == value and type(back) is type(value)
    if isinstance(value, (tuple, frozenset)):
        assert [type(v) for v in sorted(back, key=repr)] == \
            [type(v) for v in sorted(value, key=repr)]


def test_word_pairs_take_the_short_forms() -> None:
    assert codec.encode(("a", "b")) == {"T": ["a", "b"]}
    assert codec.encode(frozenset({("a", "b")})) == {"F": [["a", "b"]]}
    assert codec.encode(("a", 1)) == {"t": ["a", 1]}  # not only strings: the long form


def test_a_class_the_data_names_is_never_imported() -> None:
    with pytest.raises(codec.Unshareable):
        codec.decode({"c": "os:system", "v": ["true"]})
