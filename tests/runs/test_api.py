"""The public surface: few names, sorted and complete, typed (STYLE: httpx/attrs)."""

from __future__ import annotations

import importlib.resources
import inspect
import pickle
import traceback

import pytest

import fuzeguard
import fuzeguard.layers
import fuzeguard.testing


def test_all_is_sorted() -> None:
    assert fuzeguard.__all__ == sorted(fuzeguard.__all__)


def test_all_is_complete_and_exported() -> None:
    hidden = {"annotations", "events", "integrations", "layers", "metering", "report", "testing"}
    public = {n for n in vars(fuzeguard) if not n.startswith("_")} - hidden
    assert public == set(fuzeguard.__all__)
    assert all(hasattr(fuzeguard, n) for n in fuzeguard.__all__)


def test_all_is_small() -> None:
    assert len(fuzeguard.__all__) <= 20


def test_package_is_typed() -> None:
    assert importlib.resources.files("fuzeguard").joinpath("py.typed").is_file()


def test_version_comes_from_metadata() -> None:
    assert fuzeguard.__version__ == importlib.metadata.version("fuzeguard")


def test_exception_tree_matches_the_stdlib_types_they_resemble() -> None:
    assert issubclass(fuzeguard.ConfigError, fuzeguard.FuzeguardError)
    assert issubclass(fuzeguard.ConfigError, ValueError)
    assert issubclass(fuzeguard.LoopDetected, fuzeguard.FuzeguardError)
    assert issubclass(fuzeguard.LoopDetected, RuntimeError)


def test_public_objects_have_docstrings() -> None:
    for name in fuzeguard.__all__:
        obj = getattr(fuzeguard, name)
        assert inspect.getdoc(obj), name


def test_builtin_layers_are_registered_by_their_name() -> None:
    for name, cls in fuzeguard.layers.BUILTIN_LAYERS.items():
        assert cls.name == name


def test_testing_namespace_exports_its_helpers() -> None:
    assert set(fuzeguard.testing.__all__) == {
        "capture_detections", "disabled", "observe", "reset_implicit_run", "set_mode"
    }


def test_run_and_guard_signatures_are_keyword_only_after_the_first() -> None:
    params = inspect.signature(fuzeguard.run).parameters
    assert params["name"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for n, p in params.items() if n != "name")
    gparams = inspect.signature(fuzeguard.guard).parameters
    assert gparams["fn"].kind is inspect.Parameter.POSITIONAL_ONLY


def test_layers_all_is_complete_and_exported() -> None:
    hidden = {"annotations"}
    public = {
        n for n, v in vars(fuzeguard.layers).items()
        if not n.startswith("_") and not inspect.ismodule(v)
    } - hidden
    assert public == set(fuzeguard.layers.__all__)
    assert all(hasattr(fuzeguard.layers, n) for n in fuzeguard.layers.__all__)


def test_layer_authors_import_everything_from_fuzeguard_layers() -> None:
    needed = {
        "Call", "CallRecord", "Detection", "RunView", "Layer", "setting", "KINDS", "Feature",
        "KeepsHistory", "MayBeInert", "ObservesResults", "ObservesCalls", "SharesFeatures",
        "StreamWatcher", "WatchesStreams",
    }
    assert needed <= set(fuzeguard.layers.__all__)
    for name in ("Call", "CallRecord", "Detection"):
        assert getattr(fuzeguard.layers, name) is getattr(fuzeguard, name)
    assert fuzeguard.layers.KINDS == (
        "read", "search", "write", "poll", "exec", "model", "noop", "other"
    )


def test_public_classes_name_the_module_users_import_them_from() -> None:
    classes = [getattr(fuzeguard, n) for n in fuzeguard.__all__]
    classes = [c for c in classes if isinstance(c, type)]
    assert {c.__name__ for c in classes} >= {"LoopDetected", "ConfigError", "Run", "Config"}
    assert {c.__module__ for c in classes} == {"fuzeguard"}
    protocols = [fuzeguard.layers.Layer, fuzeguard.layers.RunView, fuzeguard.layers.Feature]
    assert {c.__module__ for c in protocols} == {"fuzeguard.layers"}


def test_a_traceback_names_the_public_exception() -> None:
    tool = fuzeguard.guard(lambda q: "same", name="search")
    with fuzeguard.run(), pytest.raises(fuzeguard.LoopDetected) as caught:
        for _ in range(10):
            tool("q")
    last_line = traceback.format_exception_only(caught.type, caught.value)[-1]
    assert last_line.startswith("fuzeguard.LoopDetected: ")


def test_public_records_pickle_through_their_public_module() -> None:
    detection = fuzeguard.Detection(layer="dedup", fn="search", message="Stop.")
    assert pickle.loads(pickle.dumps(detection)) == detection


def test_run_events_are_named_after_the_module_they_are_imported_from() -> None:
    import fuzeguard.events

    classes = [getattr(fuzeguard.events, n) for n in fuzeguard.events.__all__]
    assert {c.__module__ for c in classes if isinstance(c, type)} == {"fuzeguard.events"}


def test_the_stop_report_and_its_parts_are_named_after_fuzeguard_report() -> None:
    """What ``run.report()`` returns can be found, and annotated, by a public name."""
    import fuzeguard.report

    tool = fuzeguard.guard(lambda q: "same", name="search")
    with fuzeguard.run() as run, pytest.raises(fuzeguard.LoopDetected):
        for _ in range(10):
            tool("q")
    report = run.report()
    assert isinstance(report, fuzeguard.report.StopReport)
    assert all(isinstance(m, fuzeguard.report.Mark) for m in report.marks)
    assert all(isinstance(s, fuzeguard.report.Suggestion) for s in report.suggestions)
    assert {getattr(fuzeguard.report, n).__module__ for n in fuzeguard.report.__all__} == {
        "fuzeguard.report"
    }
