"""The record constructors of the hot path build exactly what the dataclasses build."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from fuzeguard import Call, CallRecord, Decision, Detection
from fuzeguard._private.meaning import fastinit
from fuzeguard._private.meaning.fastinit import maker, new_call, new_decision, new_record
from fuzeguard._private.meaning.records import IN_FLIGHT

DETECTION = Detection("dedup", "search", "stop")


@pytest.mark.parametrize(("make", "cls", "args"), [
    (new_call, Call, ("search", 3, b"f" * 16, {"q": "x"}, "search")),
    (new_call, Call, ("search", 3, b"f" * 16)),
    (new_decision, Decision, ("kill", 4, DETECTION, (DETECTION,))),
    (new_decision, Decision, ("call", 4)),
    (new_record, CallRecord, ("search", 3, b"f" * 16, b"r" * 16, None, 0.5, 1.0, 0.2,
                              {"progress": ("a",)}, "read")),
    (new_record, CallRecord, ("search", 3, b"f" * 16, None, None, None, 1.0, None, IN_FLIGHT)),
    (new_record, CallRecord, ("search", 3, b"f" * 16, None)),
])
def test_a_made_record_is_the_record_the_dataclass_makes(make, cls, args) -> None:  # type: ignore[no-untyped-def]
    made, built = make(*args), cls(*args)
    assert type(made) is cls
    assert made == built and repr(made) == repr(built)
    assert _hash(made) == _hash(built)
    assert dataclasses.replace(made) == built
    if IN_FLIGHT not in args:  # a mapping proxy pickles neither way
        assert pickle.loads(pickle.dumps(made)) == built


def _hash(value: object) -> int | str:
    try:
        return hash(value)
    except TypeError as exc:  # a record holding a dict is unhashable, built either way
        return str(exc)


def test_a_made_record_is_frozen() -> None:
    record = new_record("search", 1, b"f" * 16, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.fn = "other"  # type: ignore[misc]


def test_defaults_are_filled_as_the_dataclass_fills_them() -> None:
    a, b = new_record("s", 1, b"f", None), new_record("s", 1, b"f", None)
    assert a.features == {} and a.features is not b.features  # a fresh dict each, like the class
    assert new_call("s", 1, b"f").kind == Call("s", 1, b"f").kind


def test_where_drafts_cannot_become_records_the_slots_are_set_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fastinit, "_drafts_work", lambda make, cls, fields: False)
    make = maker(CallRecord)
    made = make("search", 3, b"f" * 16, b"r" * 16, None, 0.5, 1.0, 0.2, {}, "read")
    assert type(made) is CallRecord
    assert made == CallRecord("search", 3, b"f" * 16, b"r" * 16, None, 0.5, 1.0, 0.2, {}, "read")


def test_classes_that_need_their_own_init_are_built_by_it() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    @dataclasses.dataclass(slots=True)
    class Mutable:
        value: int

    assert maker(Checked) is Checked
    assert maker(Mutable) is Mutable
