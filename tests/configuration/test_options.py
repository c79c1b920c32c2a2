"""The keyword options of ``guard()`` and ``fuzeguard.run()`` are typed: the TypedDicts list
exactly the settings keys of each scope, and mypy accepts every value the runtime accepts and
refuses a misspelt option or a wrong type, as the runtime does."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

from fuzeguard import ConfigError
from fuzeguard._private.configuration.options import GuardOptions, RunOptions, ToolOptions
from fuzeguard._private.configuration.schema import ALIASES, schema
from fuzeguard._private.configuration.validation import validate_code_options
from tests.project.test_quality import ROOT, tool

GUARD_ONLY = {"name", "on_detect", "onLoop"}

# Per value type: a value the settings accept and one they refuse (none for "any": skip_value
# takes any value). A new type fails here (KeyError) until it has them, so its typed option is
# checked like the others.
VALUES: dict[str, tuple[object, ...]] = {
    "int": (3, "3"),
    "float": (0.5, "0.5"),
    "duration": ("30m", [30]),
    "bool": (True, "yes"),
    "enabled": ("observe", "on"),
    "kind": ("read", "reed"),
    "str": ("package.module:embed", 3),
    "path": ("traces/", 3),
    "store": ("redis://localhost:6379/0", 6379),
    "namespace": ("billing-agent", 3),
    "strs": (["id"], "id"),
    "actions": (["warn", "kill"], "kil"),
    "fractions": ([0.8, 0.95], 0.8),
    "any": ("skipped",),
}
# Names of layers: layers= also takes layer objects, and a bare string passes mypy there (see
# fuzeguard/_private/configuration/options.py), so its wrong value is a number.
NAMES = {"layers": (["dedup"], 3), "exempt_from": (["dedup"], "dedup"),
         "store_timeout": ("2s", [30])}  # 30m is past its bound
# Keys that also take a function in code: its source for mypy, the function for the runtime.
FUNCTIONS: dict[str, tuple[str, Any]] = {
    "cost": ("lambda result: 0.5", lambda result: 0.5),
    "skip_value": ("lambda detection: detection.message", lambda detection: detection.message),
    "embed": ("lambda text: [0.0, 1.0]", lambda text: [0.0, 1.0]),
}
# guard()'s own arguments and the aliases.
ARGUMENTS = ('guard(tool, kill_on_loop=False)', 'guard(tool, onLoop="skip")',
             'guard(tool, name="search", on_detect=[print])', 'guard(on_loop="warn", window_size=4)(tool)')
# The forms of docs/custom-layers.md, names in a list, and a ladder kept in a ``Final`` constant.
LAYERS_AND_LADDERS = ("guard(tool, layers=[Dedup(window_size=3), Cycle()])",
                      'guard(tool, layers=["cycle", Dedup()])', "guard(tool, layers=NAMES)",
                      "guard(tool, on_loop=LADDER)")
# Calls with an unknown keyword, and the keyword.
MISSPELT = {'guard(tool, on_lop="warn")': "on_lop", "guard(windw_size=4)(tool)": "windw_size",
            "fuzeguard.run(max_cals=5)": "max_cals"}
# Calls with an option of the other scope: the keyword, its value, and whether
# it is given to run().
OTHER_SCOPE = {"guard(tool, max_calls=5)": ("max_calls", 5, False),
               'fuzeguard.run(onLoop="warn")': ("onLoop", "warn", True)}


def scope_keys(scope: str) -> set[str]:
    return {key for key, spec in schema().items() if spec.scope == scope}


def good(key: str) -> object:
    return NAMES.get(key, VALUES[schema()[key].type])[0]


def wrong(key: str) -> list[object]:
    return [*NAMES.get(key, VALUES[schema()[key].type])[1:]]


def call(key: str, source: str) -> str:
    if schema()[key].scope == "run":
        return f"fuzeguard.run({key}={source})"
    return f"guard(tool, {key}={source})"


def lines() -> dict[str, str]:
    """The snippet mypy checks, one call a line, by name."""
    out = {}
    for key in schema():
        out[f"good {key}"] = call(key, repr(good(key)))
        out[f"good run {key}"] = f"fuzeguard.run({key}={good(key)!r})"
        if key in FUNCTIONS:
            out[f"function {key}"] = call(key, FUNCTIONS[key][0])
        for bad in wrong(key):
            out[f"bad {key}"] = call(key, repr(bad))
            out[f"bad run {key}"] = f"fuzeguard.run({key}={bad!r})"
    out.update({source: source for source in (*ARGUMENTS, *LAYERS_AND_LADDERS, *MISSPELT, *OTHER_SCOPE)})
    return out


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy's errors on the snippet, by line name: run as ``tests/project/test_quality.py`` runs it, from
    the project root with its ``[tool.mypy]`` settings (strict, Python 3.10)."""
    named = lines()
    head = ["from typing import Final", "", "import fuzeguard", "from fuzeguard import guard",
            "from fuzeguard.layers import Cycle, Dedup", "", 'NAMES = ["dedup", "cycle"]',
            'LADDER: Final = ("warn", "skip", "kill")', "", "",
            "def tool(x: int) -> int:", "    return x", "", ""]
    path = tmp_path_factory.mktemp("typed") / "typed_options.py"
    path.write_text("\n".join([*head, *named.values()]) + "\n", encoding="utf-8")
    done = subprocess.run([tool("mypy"), str(path)], cwd=ROOT, capture_output=True, text=True)
    by_line = {len(head) + 1 + i: name for i, name in enumerate(named)}
    errors: dict[str, str] = {}
    for m in re.finditer(r"^.*typed_options\.py:(\d+): error: (.*)$", done.stdout, re.M):
        name = by_line.get(int(m.group(1)), f"line {m.group(1)}")
        errors[name] = errors.get(name, "") + m.group(2)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy could not run
    return errors


def test_guard_options_are_the_function_settings_and_the_guard_arguments() -> None:
    assert GuardOptions.__required_keys__ == frozenset()
    assert set(GuardOptions.__optional_keys__) == scope_keys("function") | set(ALIASES) | GUARD_ONLY


def test_the_integrations_options_are_guard_s_but_the_name() -> None:
    """Integrations guard each tool under its own name: every guard() option but ``name``."""
    assert ToolOptions.__required_keys__ == frozenset()
    assert set(ToolOptions.__optional_keys__) == set(GuardOptions.__optional_keys__) - {"name"}


def test_run_options_are_every_setting() -> None:
    assert RunOptions.__required_keys__ == frozenset()
    assert set(RunOptions.__optional_keys__) == set(schema()) | set(ALIASES)


@pytest.mark.parametrize("key", list(schema()))
def test_a_value_of_each_setting_is_accepted_at_runtime_and_by_mypy(
    key: str, mypy_errors: dict[str, str]
) -> None:
    validate_code_options({key: good(key)}, "test", run_scope=True)
    if key in FUNCTIONS:
        validate_code_options({key: FUNCTIONS[key][1]}, "test", run_scope=True)
    named = (f"good {key}", f"good run {key}", f"function {key}")
    assert {n: mypy_errors[n] for n in named if n in mypy_errors} == {}


@pytest.mark.parametrize("key", [k for k in schema() if wrong(k)])
def test_a_wrong_type_for_each_setting_is_refused_at_runtime_and_by_mypy(
    key: str, mypy_errors: dict[str, str]
) -> None:
    with pytest.raises((ConfigError, TypeError)):
        validate_code_options({key: wrong(key)[0]}, "test", run_scope=True)
    assert f"bad {key}" in mypy_errors
    assert f"bad run {key}" in mypy_errors


def test_the_guard_arguments_and_aliases_pass_mypy(mypy_errors: dict[str, str]) -> None:
    assert {n: mypy_errors[n] for n in ARGUMENTS if n in mypy_errors} == {}


def test_layer_objects_names_and_ladders_in_variables_pass_mypy(mypy_errors: dict[str, str]) -> None:
    assert {n: mypy_errors[n] for n in LAYERS_AND_LADDERS if n in mypy_errors} == {}


@pytest.mark.parametrize("source", list(MISSPELT))
def test_mypy_refuses_a_misspelt_option(source: str, mypy_errors: dict[str, str]) -> None:
    assert f'Unexpected keyword argument "{MISSPELT[source]}"' in mypy_errors[source]


@pytest.mark.parametrize("source", list(OTHER_SCOPE))
def test_mypy_and_the_runtime_refuse_an_option_of_the_other_scope(
    source: str, mypy_errors: dict[str, str]
) -> None:
    """A run-wide setting given to guard(), a guard() argument given to run()."""
    key, value, in_run = OTHER_SCOPE[source]
    assert f'Unexpected keyword argument "{key}"' in mypy_errors[source]
    with pytest.raises(TypeError, match=key):
        validate_code_options({key: value}, source, run_scope=in_run)


def test_mypy_finds_no_error_outside_the_lines_meant_to_fail(mypy_errors: dict[str, str]) -> None:
    meant = {*MISSPELT, *OTHER_SCOPE}
    assert {n: e for n, e in mypy_errors.items() if not n.startswith("bad ") and n not in meant} == {}
