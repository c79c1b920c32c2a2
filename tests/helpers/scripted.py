"""Scripted agents for layer tests: play a list of tool calls with known outcomes through real
guards and collect what fired, at which call."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import fuzeguard
from fuzeguard import Detection, LoopDetected, guard
from fuzeguard._private.meaning.records import CallRecord
from fuzeguard.testing import capture_detections


@dataclass(frozen=True)
class Step:
    """One tool call an agent makes and what the tool answers (a result, or an exception)."""

    fn: str
    args: dict[str, Any]
    result: Any = None
    error: BaseException | None = None
    cost: float | None = None


@dataclass
class Played:
    """What happened when a script was played."""

    detections: list[Detection] = field(default_factory=list)
    killed_at: int | None = None
    calls: int = 0
    returned: list[Any] = field(default_factory=list)

    def at(self, layer: str | None = None, kind: str | None = None) -> list[int]:
        """Call indices of the detections of one layer (and kind)."""
        return [
            d.call_index for d in self.detections
            if (layer is None or d.layer == layer) and (kind is None or d.kind == kind)
        ]

    def first(self, layer: str | None = None, kind: str | None = None) -> int | None:
        found = self.at(layer, kind)
        return found[0] if found else None


def play(steps: Iterable[Step], *, run_options: dict[str, Any] | None = None,
         **guard_options: Any) -> Played:
    """Play ``steps`` in a fresh run through one guard per tool name; stop at a kill."""
    tools: dict[str, Callable[..., Any]] = {}
    box: list[Step] = []

    def tool_for(name: str) -> Callable[..., Any]:
        def tool(**kwargs: Any) -> Any:
            step = box[0]
            if step.cost is not None:
                fuzeguard.add_cost(step.cost)
            if step.error is not None:
                raise step.error
            return step.result

        tool.__name__ = name
        return guard(tool, **guard_options)

    played = Played()
    with capture_detections() as found, fuzeguard.run(**(run_options or {})):
        for step in steps:
            fn = tools.get(step.fn)
            if fn is None:
                fn = tools[step.fn] = tool_for(step.fn)
            box[:] = [step]
            played.calls += 1
            try:
                played.returned.append(fn(**step.args))
            except LoopDetected as exc:
                played.killed_at = exc.detection.call_index
                break
            except Exception:
                played.returned.append(None)
    played.detections = list(found)
    return played


class History:
    """A stand-in run view holding completed calls, for checking a layer directly."""

    def __init__(self, records: Sequence[CallRecord] = ()) -> None:
        self.history = list(records)
        self.id = "test"

    def append(self, record: CallRecord) -> None:
        self.history.append(record)

    def same_args(self, args_fp: bytes) -> list[CallRecord]:
        return [r for r in self.history if r.args_fp == args_fp]


def bag_of_words_embedding(text: str) -> list[float]:
    """A small deterministic embedder: word counts hashed into 64 dimensions (crc32)."""
    vector = [0.0] * 64
    for word in text.lower().split():
        word = word.strip(".,!?;:'\"")
        if word:
            vector[zlib.crc32(word.encode()) % 64] += 1.0
    return vector


def words(seed: int, n: int = 12) -> str:
    """A sentence of ``n`` made-up words, different for each seed (deterministic)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(n))
