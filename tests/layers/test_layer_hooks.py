"""A layer's optional hooks are declared protocols (``fuzeguard.layers``): a custom layer takes part
by defining the attribute or method, and a feature several layers read is computed once per call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard._private.judging.plan import takes_part
from fuzeguard.layers import (
    BUILTIN_LAYERS,
    Call,
    Detection,
    Feature,
    KeepsHistory,
    Layer,
    MayBeInert,
    ObservesCalls,
    ObservesResults,
    RunView,
    SharesFeatures,
    WatchesStreams,
    _content,
)
from fuzeguard.layers.cost_velocity import CostVelocity
from fuzeguard.layers.progress import Progress

EXTRACTED: list[Any] = []


def _words(arguments: Mapping[str, Any], result: Any, error: BaseException | None) -> Any:
    EXTRACTED.append(result)
    return len(str(result).split())


WORDS = Feature("words", _words)


@dataclass(frozen=True, slots=True)
class LongAnswers:
    """Reads the shared word count: flags a call after an answer of more than ``limit`` words."""

    name: ClassVar[str] = "long_answers"
    features: ClassVar[tuple[Feature, ...]] = (WORDS,)
    limit: int = 3

    def check(self, run: RunView, call: Call) -> Detection | None:
        if run.history and run.history[-1].features.get(WORDS.key, 0) > self.limit:
            return Detection(layer=self.name, fn=call.fn, message="Answer more briefly.")
        return None


@dataclass(frozen=True, slots=True)
class ShortAnswers:
    """Reads the same word count: flags a call after an empty answer."""

    name: ClassVar[str] = "short_answers"
    features: ClassVar[tuple[Feature, ...]] = (WORDS,)

    def check(self, run: RunView, call: Call) -> Detection | None:
        if run.history and run.history[-1].features.get(WORDS.key) == 0:
            return Detection(layer=self.name, fn=call.fn, message="Say something.")
        return None


@pytest.fixture(autouse=True)
def _clear_extracted() -> Iterator[None]:
    EXTRACTED.clear()
    yield
    EXTRACTED.clear()


def test_a_feature_two_layers_read_is_extracted_once_per_call() -> None:
    tool = guard(lambda q: q, name="answer", layers=[LongAnswers(), ShortAnswers()])
    with fuzeguard.run() as run:
        for text in ["one two", "three", "four five six"]:
            tool(text)
    assert EXTRACTED == ["one two", "three", "four five six"]
    assert [r.features for r in run.history] == [{"words": 2}, {"words": 1}, {"words": 3}]


def test_both_layers_act_on_the_feature_computed_once() -> None:
    # The shared feature is tested here, not the grading: each layer's first detection is acted
    # on at once (early_warnings = 0).
    layers = [LongAnswers(limit=1), ShortAnswers()]
    tool = guard(lambda q: q, name="answer", layers=layers, early_warnings=0)
    with fuzeguard.run(), pytest.raises(LoopDetected) as caught:
        tool("a long answer")
        tool("next")
    assert caught.value.detection.layer == "long_answers"
    tool2 = guard(lambda q: q, name="answer2", layers=layers, early_warnings=0)
    with fuzeguard.run(), pytest.raises(LoopDetected) as caught:
        tool2("")
        tool2("next")
    assert caught.value.detection.layer == "short_answers"
    assert len(EXTRACTED) == 2


def test_progress_and_cost_velocity_read_one_content_extraction_per_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both layers read each result's content units; with both on, a call's result is reduced to
    its content once, not once per layer."""
    calls: list[Any] = []

    def counting(arguments: Mapping[str, Any], result: Any, error: BaseException | None) -> Any:
        calls.append(result)
        return _content.observe(arguments, result, error)

    counted = Feature(_content.CONTENT.key, counting)
    monkeypatch.setattr(Progress, "features", (counted,))
    monkeypatch.setattr(CostVelocity, "features", (counted,))
    tool = guard(lambda n: f"report number {n} is ready", name="report",
                 layers=["progress", "cost_velocity"], cost_velocity_threshold=100.0)
    with fuzeguard.run() as run:
        for n in range(4):
            tool(n)
    assert len(calls) == 4
    assert all(set(r.features) == {"content"} for r in run.history)


def test_a_failing_shared_feature_is_reported_for_each_layer_that_reads_it() -> None:
    def broken(arguments: Mapping[str, Any], result: Any, error: BaseException | None) -> Any:
        raise ValueError("cannot count")

    shared = Feature("broken", broken)

    @dataclass(frozen=True, slots=True)
    class First:
        name: ClassVar[str] = "first"
        features: ClassVar[tuple[Feature, ...]] = (shared,)

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    @dataclass(frozen=True, slots=True)
    class Second(First):
        name: ClassVar[str] = "second"

    tool = guard(lambda q: q, name="t", layers=[First(), Second()])
    with fuzeguard.run() as run:
        tool("a")
        tool("b")
    assert run.stats().layer_errors == {"first": 2, "second": 2}
    assert all(r.features == {} for r in run.history)


def test_two_different_features_under_one_key_are_refused_when_the_guard_is_declared() -> None:
    other = Feature("words", lambda arguments, result, error: 0)

    @dataclass(frozen=True, slots=True)
    class Other:
        name: ClassVar[str] = "other"
        features: ClassVar[tuple[Feature, ...]] = (other,)

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    with pytest.raises(TypeError, match="different features under the key 'words'"):
        guard(lambda q: q, name="t", layers=[LongAnswers(), Other()])


def test_a_custom_layer_named_like_a_shared_feature_is_refused() -> None:
    @dataclass(frozen=True, slots=True)
    class Content:
        name: ClassVar[str] = "content"

        def observe_result(self, result: Any, error: BaseException | None) -> Any:
            return result

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    with pytest.raises(TypeError, match="under the key 'content'"):
        guard(lambda q: q, name="t", layers=["progress", Content()])


def test_an_object_without_a_name_is_refused_when_the_guard_is_declared() -> None:
    class Nameless:
        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    with pytest.raises(TypeError, match="objects with a `name` and a check"):
        guard(lambda q: q, name="t", layers=[Nameless()])


def test_history_needed_makes_the_run_keep_that_many_calls() -> None:
    seen: list[int] = []

    @dataclass(frozen=True, slots=True)
    class LongMemory:
        name: ClassVar[str] = "long_memory"
        history_needed: ClassVar[int] = 100

        def check(self, run: RunView, call: Call) -> Detection | None:
            seen.append(len(run.history))
            return None

    tool = guard(lambda n: n, name="t", layers=[LongMemory()])
    with fuzeguard.run():
        for n in range(91):
            tool(n)
    assert seen[-1] == 90


def test_an_inert_layer_is_left_out_of_the_stack() -> None:
    @dataclass(frozen=True, slots=True)
    class Unset:
        name: ClassVar[str] = "unset"
        threshold: float | None = None

        @property
        def inert(self) -> bool:
            return self.threshold is None

        def check(self, run: RunView, call: Call) -> Detection | None:
            raise AssertionError("an inert layer is never asked")

    tool = guard(lambda n: n, name="t", layers=[Unset()])
    with fuzeguard.run() as run:
        tool(1)
    assert run.stats().layer_errors == {}
    assert tool.guard.plan(run.config).requested == ("unset",)


def test_observe_call_receives_the_bound_arguments_and_keeps_under_the_layer_name() -> None:
    @dataclass(frozen=True, slots=True)
    class Echo:
        name: ClassVar[str] = "echo"

        def observe_call(
            self, arguments: Mapping[str, Any], result: Any, error: BaseException | None
        ) -> Any:
            return (dict(arguments), result)

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    tool = guard(lambda query, limit=5: "found", name="search", layers=[Echo()])
    with fuzeguard.run() as run:
        tool("cats")
    assert run.history[-1].features == {"echo": ({"query": "cats", "limit": 5}, "found")}


def test_a_layer_with_both_observe_hooks_is_observed_through_observe_call_only() -> None:
    @dataclass(frozen=True, slots=True)
    class Both:
        name: ClassVar[str] = "both"

        def observe_result(self, result: Any, error: BaseException | None) -> Any:
            raise AssertionError("observe_call wins")

        def observe_call(
            self, arguments: Mapping[str, Any], result: Any, error: BaseException | None
        ) -> Any:
            return "from observe_call"

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    tool = guard(lambda q: q, name="t", layers=[Both()])
    with fuzeguard.run() as run:
        tool("a")
    assert run.history[-1].features == {"both": "from observe_call"}
    assert run.stats().layer_errors == {}


def test_a_custom_layer_that_watches_streams_stops_a_generator_mid_stream() -> None:
    @dataclass
    class CountChunks:
        fn: str
        seen: int = 0

        def feed(self, chunk: Any) -> Detection | None:
            self.seen += 1
            if self.seen == 3:
                return Detection(layer="three_chunks", fn=self.fn, message="Enough chunks.")
            return None

    @dataclass(frozen=True, slots=True)
    class ThreeChunks:
        name: ClassVar[str] = "three_chunks"

        def watch(self, call: Call) -> CountChunks:
            return CountChunks(call.fn)

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    def endless() -> Iterator[int]:
        n = 0
        while True:
            n += 1
            yield n

    stream = guard(endless, name="stream", layers=[ThreeChunks()])
    received: list[int] = []
    with fuzeguard.run(), pytest.raises(LoopDetected) as caught:
        for chunk in stream():
            received.append(chunk)
    assert caught.value.detection.layer == "three_chunks"
    assert received == [1, 2]


def test_builtin_layers_declare_their_hooks_through_the_protocols() -> None:
    from fuzeguard.layers import CostVelocity, Progress, Semantic

    for layer in (CostVelocity(), Progress(), Semantic()):
        assert isinstance(layer, Layer) and isinstance(layer, KeepsHistory)
        assert isinstance(layer, MayBeInert)
    assert isinstance(Progress(), SharesFeatures) and isinstance(CostVelocity(), SharesFeatures)
    assert Progress().features == CostVelocity().features
    assert isinstance(Semantic(), ObservesCalls) and isinstance(Semantic(), WatchesStreams)
    assert not isinstance(Progress(), ObservesCalls)
    assert not isinstance(Progress(), ObservesResults)
    assert not isinstance(Progress(), WatchesStreams)


_PROTOCOLS = (KeepsHistory, MayBeInert, ObservesCalls, ObservesResults, SharesFeatures,
              WatchesStreams)


def test_a_built_in_layers_remembered_protocol_answers_are_those_of_isinstance() -> None:
    for cls in BUILTIN_LAYERS.values():
        layer = cls()
        for _ in range(2):  # asked, then remembered
            for protocol in _PROTOCOLS:
                assert takes_part(layer, protocol) == isinstance(layer, protocol), (cls, protocol)


def test_a_custom_layers_hooks_are_looked_up_on_each_object_not_remembered_by_class() -> None:
    class Custom:
        name = "custom"

        def check(self, run: object, call: object) -> None:
            return None

    plain, deep = Custom(), Custom()
    deep.history_needed = 40  # type: ignore[attr-defined]
    assert not takes_part(plain, KeepsHistory)
    assert takes_part(deep, KeepsHistory)
    assert not takes_part(plain, KeepsHistory)

    @guard(layers=[deep])
    def tool(x: int) -> int:
        return x

    with fuzeguard.run("deep"):
        assert tool.guard.plan(fuzeguard.current_run().config).history_needed == 40  # type: ignore[attr-defined]
