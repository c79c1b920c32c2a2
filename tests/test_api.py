"""The public surface: few names, sorted and complete, typed (STYLE: httpx/attrs)."""

from __future__ import annotations

import importlib.resources
import inspect

import fuzeguard
import fuzeguard.layers
import fuzeguard.testing


def test_all_is_sorted() -> None:
    assert fuzeguard.__all__ == sorted(fuzeguard.__all__)


def test_all_is_complete_and_exported() -> None:
    hidden = {"annotations", "integrations", "layers", "testing"}
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
