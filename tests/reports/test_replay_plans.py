"""Replay resolves each function configuration once, and never lets runs with different
configurations share a plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fuzeguard import Config
from fuzeguard._private.judging import plan_cache
from fuzeguard._private.judging.plan_cache import PlanCache, _frozen
from fuzeguard._private.reports.replay import Replayer, _replayed
from fuzeguard._private.reports.replayed import TraceSummary


def _write(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _found(summary: TraceSummary) -> list[tuple[int, str, str]]:
    return [(d.call, d.detection.layer, d.detection.action) for d in summary.detections]


def _calls(fn: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"fn": fn, "args": {"n": i}, "result": f"page {i}", **extra} for i in range(n)]


def test_many_traces_of_one_configuration_build_each_functions_plan_once(tmp_path: Path) -> None:
    replayer = Replayer(Config())
    for i in range(20):
        replayer.replay_file(_write(tmp_path / f"{i}.jsonl", _calls("search", 3) + _calls("read", 2)))
    assert replayer.plans.built == 2


def test_runs_recording_different_guard_settings_get_plans_of_their_own(tmp_path: Path) -> None:
    """A plan shared across runs must not carry one run's recorded settings into another."""
    tight = _write(tmp_path / "tight.jsonl",
                   _calls("search", 4, guard={"max_iterations": 2, "on_loop": "warn"}))
    loose = _write(tmp_path / "loose.jsonl", _calls("search", 4))
    shared = Replayer(Config())
    together = [_found(shared.replay_file(p)) for p in (tight, loose, tight)]
    alone = [_found(Replayer(Config()).replay_file(p)) for p in (tight, loose, tight)]
    assert together == alone
    assert together[0] and not together[1]
    assert shared.plans.built == 2


def test_runs_recording_different_run_settings_get_plans_of_their_own(tmp_path: Path) -> None:
    info = {"name": "r", "settings": {"max_iterations": 2, "on_loop": "warn"}}
    tight = _write(tmp_path / "tight.jsonl", [{**c, "run_info": info} for c in _calls("search", 4)])
    loose = _write(tmp_path / "loose.jsonl", _calls("search", 4))
    shared = Replayer(Config())
    together = [_found(shared.replay_file(p)) for p in (loose, tight, loose)]
    alone = [_found(Replayer(Config()).replay_file(p)) for p in (loose, tight, loose)]
    assert together == alone
    assert together[1] and not together[0]


def test_a_function_table_gives_that_function_its_own_plan(tmp_path: Path) -> None:
    config = Config.from_dict({"functions": {"search": {"max_iterations": 2, "on_loop": "warn"}}})
    path = _write(tmp_path / "t.jsonl", _calls("search", 3) + _calls("read", 3))
    summary = Replayer(config).replay_file(path)
    assert [(fn, layer) for fn, layer in
            ((d.detection.fn, d.detection.layer) for d in summary.detections)] == [
        ("search", "iterations")]


def test_settings_that_differ_only_in_type_are_not_the_same_configuration() -> None:
    assert _frozen(1) != _frozen(True)
    assert _frozen(1) != _frozen(1.0)
    assert _frozen([1, 2]) != _frozen((1, 2))
    assert _frozen({"a": [1]}) == _frozen({"a": [1]})
    assert _frozen({"a": 1, "b": 2}) == _frozen({"b": 2, "a": 1})


def test_the_plan_cache_stays_bounded_whatever_a_trace_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(plan_cache, "MAX_PLANS", 8)
    cache = PlanCache(_replayed)
    config = Config()
    for i in range(30):
        cache.plan(f"fn{i}", config, {}, None)
    assert 0 < len(cache._plans) <= 8
    assert cache.plan("fn0", config, {}, None) is cache.plan("fn0", config, {}, None)


def test_a_replayed_run_is_freed_as_its_trace_ends_without_the_garbage_collector(
    tmp_path: Path,
) -> None:
    """No reference cycle holds a replayed run (its history, its records): replaying many traces
    does not leave each one's run to the collector."""
    import gc
    import weakref

    runs: list[weakref.ref[Any]] = []
    replayer = Replayer(Config(), on_run=lambda run: runs.append(weakref.ref(run)))
    looping = [{"fn": "search", "args": {"q": "same"}, "result": "nothing"}] * 6
    paths = [_write(tmp_path / f"{i}.jsonl", _calls("read", 4) + looping) for i in range(3)]
    gc.collect()
    gc.disable()
    try:
        for path in paths:
            assert replayer.replay_file(path).detected  # a run that detected and was killed too
        assert len(runs) == 3
        assert all(ref() is None for ref in runs)
    finally:
        gc.enable()
