"""One fault disables one thing, loudly (SPEC §5, §9): a failing layer is left out and the others
keep judging, a call is always recorded, and no user callback (skip_value, cost, hooks) reaches
the agent or blocks it without bound."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import Detection, LoopDetected, guard
from fuzeguard._private.publish import hooks


@dataclass(frozen=True, slots=True)
class Boom:
    """A custom layer with a bug."""

    name: ClassVar[str] = "boom"

    def check(self, run: Any, call: Any) -> Detection | None:
        raise RuntimeError("layer exploded")


def _events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


def test_a_raising_layer_is_left_out_and_the_others_keep_judging() -> None:
    """r13 (a): one raising custom layer switched off the whole stack, dedup included."""
    tool = guard(lambda x: "same", name="f1", layers=[Boom(), "dedup"])
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        with pytest.raises(LoopDetected) as caught:
            for _ in range(6):
                tool(1)
    assert caught.value.detection.layer == "dedup" and caught.value.detection.call_index == 5
    assert run.stats().layer_errors == {"boom": 5}
    failed = _events(logs, "fuzeguard.layer_failed")
    assert len(failed) == 1  # once per run and layer
    assert failed[0]["layer"] == "boom" and "layer exploded" in failed[0]["error"]


@dataclass(frozen=True, slots=True)
class ListPattern:
    name: ClassVar[str] = "list_pattern"

    def check(self, run: Any, call: Any) -> Detection | None:
        if run.calls_of(call.fn) >= 2:
            return Detection(layer=self.name, fn=call.fn, message="stop", pattern=[call.fn])
        return None


@dataclass(frozen=True, slots=True)
class ReturnsTrue:
    name: ClassVar[str] = "returns_true"

    def check(self, run: Any, call: Any) -> Any:
        return run.calls_of(call.fn) >= 2


@pytest.mark.parametrize(
    ("layer", "failures", "says"),
    [(ListPattern(), 3, "pattern is a list, which cannot be hashed"),
     (ReturnsTrue(), 5, "returned bool False: a layer's check() returns a Detection or None")],
)
def test_a_layer_returning_a_bad_value_is_left_out_and_the_others_keep_judging(
    layer: Any, failures: int, says: str
) -> None:
    """Second review d14: an unhashable pattern or True made every call fail open."""
    tool = guard(lambda x: "same", name="f", layers=[layer, "dedup"])
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        with pytest.raises(LoopDetected) as caught:
            for _ in range(6):
                tool(1)
    assert caught.value.detection.layer == "dedup" and caught.value.detection.call_index == 5
    assert run.stats().layer_errors == {layer.name: failures}
    failed = _events(logs, "fuzeguard.layer_failed")
    assert [e["layer"] for e in failed] == [layer.name] and says in failed[0]["error"]
    assert not _events(logs, "fuzeguard.internal_error")


def test_a_failing_layer_is_logged_again_in_the_next_run() -> None:
    tool = guard(lambda x: x, name="f", layers=[Boom()])
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            with fuzeguard.run():
                tool(1)
                tool(2)
    assert len(_events(logs, "fuzeguard.layer_failed")) == 2


def test_a_layer_whose_extractor_raises_keeps_nothing_and_the_call_is_recorded() -> None:
    @dataclass(frozen=True, slots=True)
    class BadExtractor:
        name: ClassVar[str] = "bad_extractor"

        def observe_result(self, result: Any, error: BaseException | None) -> Any:
            raise ValueError("cannot read this result")

        def check(self, run: Any, call: Any) -> Detection | None:
            return None

    tool = guard(lambda x: "same", name="t", layers=[BadExtractor(), "dedup"])
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        with pytest.raises(LoopDetected):
            for _ in range(6):
                tool(1)
    assert len(run.history) == 4 and all(r.result_fp is not None for r in run.history)
    assert run.stats().layer_errors == {"bad_extractor": 4}
    assert len(_events(logs, "fuzeguard.layer_failed")) == 1


def test_a_raising_cost_function_still_leaves_a_record() -> None:
    """r13 (e): the call left no record, so six identical calls were never stopped."""
    tool = guard(lambda x: "same", name="f5", cost=lambda result: result["cost"])
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        with pytest.raises(LoopDetected) as caught:
            for _ in range(6):
                tool(1)
    assert caught.value.detection.call_index == 5
    assert len(run.history) == 4 and run.stats().cost == 0
    assert len(_events(logs, "fuzeguard.cost_failed")) == 4


def test_a_json_text_result_nested_100000_deep_is_recorded() -> None:
    """r25: parsing it raised RecursionError, so the call was never recorded."""
    nested = "[" * 100_000 + "]" * 100_000
    tool = guard(lambda q: nested, name="tool")
    with structlog.testing.capture_logs() as logs, fuzeguard.run() as run:
        with pytest.raises(LoopDetected) as caught:
            for _ in range(10):
                tool("same")
    assert caught.value.detection.call_index == 5
    assert len(run.history) == 4
    assert _events(logs, "fuzeguard.internal_error") == []


def test_a_raising_skip_value_function_answers_with_the_message() -> None:
    """r13 (d): the skip_value function's error reached the agent."""

    def raising_skip(detection: Detection) -> str:
        raise ValueError("skip_value exploded")

    # skip_value's fault is tested here, not the grading: the 3rd identical call is skipped.
    tool = guard(lambda x: "same", name="f4", on_loop="skip", skip_value=raising_skip,
                 early_warnings=0)
    with structlog.testing.capture_logs() as logs, fuzeguard.run():
        answers = [tool(1) for _ in range(4)]  # a 5th would end the run: skipping did not help
    assert answers[:2] == ["same"] * 2
    assert all(a.startswith("You called `f4` with the same arguments") for a in answers[2:])
    failed = _events(logs, "fuzeguard.skip_value_failed")
    assert len(failed) == 2 and "skip_value exploded" in failed[0]["error"]


def test_a_hanging_hook_does_not_block_the_call_beyond_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """r13 (c): a hook that never returns blocked the agent's call with it."""
    monkeypatch.setattr(hooks, "HOOK_TIMEOUT", 0.05)
    release = threading.Event()
    entered = threading.Event()

    def hanging(detection: Detection) -> None:
        entered.set()
        release.wait(30)

    tool = guard(lambda x: "same", name="f3", on_loop="warn", on_detect=hanging)
    try:
        with structlog.testing.capture_logs() as logs, fuzeguard.run():
            answers = [tool(1) for _ in range(3)]  # the third call is a loop, warned
            # returned while the hook hangs (its thread may start after the bound on a busy
            # machine: waited for, not assumed)
            assert not release.is_set() and entered.wait(10)
    finally:
        release.set()
    assert answers == ["same"] * 3
    timeout = _events(logs, "fuzeguard.hook_timeout")
    assert len(timeout) == 1
    assert timeout[0]["hook"].endswith("hanging") and timeout[0]["timeout"] == 0.05


def test_hooks_run_with_the_callers_run_current() -> None:
    seen: list[Any] = []
    tool = guard(lambda x: "same", name="t", on_loop="warn",
                 on_detect=lambda d: seen.append(fuzeguard.current_run()))
    with fuzeguard.run() as run:
        for _ in range(3):
            tool(1)
    assert seen == [run]


def test_a_hook_still_hanging_is_skipped_by_later_detections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backend that never answers costs one bounded wait, not one per detection."""
    monkeypatch.setattr(hooks, "HOOK_TIMEOUT", 0.05)
    release = threading.Event()
    calls: list[int] = []

    def hanging(detection: Detection) -> None:
        calls.append(detection.call_index)
        release.wait(30)

    tool = guard(lambda x: "same", name="f3", on_loop="warn", on_detect=hanging)
    try:
        with structlog.testing.capture_logs() as logs, fuzeguard.run():
            for _ in range(5):  # detections at calls 3, 4 and 5
                tool(1)
    finally:
        release.set()
    assert calls == [3]
    assert len(_events(logs, "fuzeguard.hook_timeout")) == 1
    assert len(_events(logs, "fuzeguard.hook_skipped")) == 2


def test_hooks_of_an_async_tool_never_stall_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Second review d18: the guarded call waited up to 1 s for the hooks on the event loop's
    thread, stalling every other task of an async server at each detection."""
    monkeypatch.setattr(hooks, "HOOK_TIMEOUT", 5.0)
    gate, done = threading.Event(), threading.Event()
    seen: list[tuple[int, Any]] = []

    def slow_hook(detection: Detection) -> None:
        gate.wait(10)  # a metrics backend that has not answered yet
        seen.append((detection.call_index, fuzeguard.current_run()))
        if len(seen) == 3:
            done.set()

    @guard(name="search", on_loop="warn", on_detect=slow_hook)
    async def search(q: str) -> str:
        return "3 results"

    async def main() -> tuple[float, Any]:
        async with fuzeguard.run("looping") as run:
            started = time.monotonic()
            for _ in range(5):  # detections at calls 3, 4 and 5
                await search("laptops")
            took = time.monotonic() - started
            gate.set()
            await asyncio.to_thread(done.wait, 10)
        return took, run

    with structlog.testing.capture_logs() as logs:
        took, run = asyncio.run(main())
    assert took < 2.5  # waiting for the hook even once takes 5 s
    assert seen == [(3, run), (4, run), (5, run)]  # every detection, in order, in its run
    assert not [e for e in logs if e["log_level"] == "error"]


def test_a_hanging_hook_of_an_async_tool_is_reported_and_skipped_by_later_detections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hooks, "HOOK_TIMEOUT", 0.05)
    release, later = threading.Event(), threading.Event()
    calls: list[int] = []
    marked: list[int] = []

    def hanging(detection: Detection) -> None:
        calls.append(detection.call_index)
        release.wait(30)

    def marker(detection: Detection) -> None:
        marked.append(detection.call_index)
        if detection.call_index == 5:
            later.set()

    @guard(name="f3", on_loop="warn", on_detect=[hanging, marker])
    async def tool(x: int) -> str:
        return "same"

    async def main() -> None:
        async with fuzeguard.run():
            for _ in range(5):  # detections at calls 3, 4 and 5
                await tool(1)
            # The loop runs on meanwhile; its timer finds the hook hanging and hands the queue
            # to a fresh helper thread, which skips the hanging hook.
            await asyncio.to_thread(later.wait, 10)

    try:
        with structlog.testing.capture_logs() as logs:
            asyncio.run(main())
    finally:
        release.set()
    assert calls == [3] and marked[:2] == [4, 5]
    assert len(_events(logs, "fuzeguard.hook_timeout")) == 1
    assert len(_events(logs, "fuzeguard.hook_skipped")) == 2
