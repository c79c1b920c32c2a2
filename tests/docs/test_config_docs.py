"""The configuration reference and the example fuze.toml are generated from the schema in code
and must match it: a setting added or changed without regenerating them fails here."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fuzeguard import Config
from fuzeguard._private.configuration.schema import defaults, schema
from fuzeguard._private.configuration.validation import coerce

ROOT = Path(__file__).resolve().parents[2]
FUZE_TOML = ROOT / "fuze.toml"
DOC = ROOT / "docs" / "configuration.md"
CONFIG_MD = ROOT / "docs" / "configuration.md"
REGENERATE = "run `python scripts/gen_config_docs.py` and commit the result"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "scripts" / "gen_config_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _generator()


def test_configuration_reference_is_what_the_generator_writes(gen: ModuleType) -> None:
    assert CONFIG_MD.read_text(encoding="utf-8") == gen.render_configuration_md(), REGENERATE


def test_example_fuze_toml_is_what_the_generator_writes(gen: ModuleType) -> None:
    assert FUZE_TOML.read_text(encoding="utf-8") == gen.render_fuze_toml(), REGENERATE


def test_the_typed_options_are_what_the_generator_writes(gen: ModuleType) -> None:
    """guard()'s and run()'s typed keyword options list every setting with its annotation."""
    options = ROOT / "fuzeguard" / "_private" / "configuration" / "options.py"
    assert options.read_text(encoding="utf-8") == gen.render_options_py(), REGENERATE


def test_generator_check_mode_passes_on_the_committed_files(gen: ModuleType) -> None:
    assert gen.main(["--check"]) == 0, REGENERATE


def test_every_schema_key_is_documented_in_the_reference() -> None:
    text = CONFIG_MD.read_text(encoding="utf-8")
    for key, spec in schema().items():
        assert f"### `{key}`" in text, f"{key} has no section in docs/configuration.md"
        assert f"| [`{key}`](#{key}) | `[{spec.section}]` |" in text, f"{key} missing from the table"


def test_every_schema_key_appears_in_fuze_toml_in_its_table() -> None:
    table = None
    seen: dict[str, str] = {}
    for line in FUZE_TOML.read_text(encoding="utf-8").splitlines():
        header = re.match(r"^\[(\w+)\]$", line)
        if header:
            table = header.group(1)
            continue
        assignment = re.match(r"^# (\w+) = ", line)
        if assignment and assignment.group(1) in schema() and table is not None:
            seen.setdefault(assignment.group(1), table)
    assert set(seen) == set(schema()), "keys missing from fuze.toml"
    for key, spec in schema().items():
        assert seen[key] == spec.section, f"{key} is under [{seen[key]}], expected [{spec.section}]"


def test_every_key_in_fuze_toml_names_its_origin() -> None:
    text = FUZE_TOML.read_text(encoding="utf-8")
    for key, spec in schema().items():
        block = text[: text.index(f"# {key} = ")].rsplit("\n\n", 1)[-1]
        system = spec.origin.split(" ")[0]  # the reference words the rest plainly
        assert f"From: {system}" in " ".join(block.replace("# ", "").split()), key


def test_the_reference_names_no_layer_by_number_and_links_every_origin() -> None:
    """Before: "Fuze layer 3" with no link; now Fuze's cost-velocity check, linked to the page
    on where each default comes from, whose anchors all exist."""
    reference = DOC.read_text(encoding="utf-8") + FUZE_TOML.read_text(encoding="utf-8")
    assert "layer 1" not in reference and "Fuze layer" not in reference
    defaults = (ROOT / "docs" / "defaults.md").read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^## (.+)$", defaults, re.M)}
    for anchor in set(re.findall(r"\(defaults\.md#([\w-]+)\)", reference)):
        assert anchor in anchors, anchor


def test_the_reference_shows_an_unset_key_as_unset_and_says_writing_it_replaces_it() -> None:
    """Before: ``max_iterations = 25`` was shown as "the built-in default"; copying it made the
    adaptive cap absolute (50 distinct reads killed at call 26)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### `max_iterations`"):].split("\n### ", 1)[0]
    assert "- Unset: 25, adaptive" in section and "any value you write replaces it" in section
    assert "max_iterations = 25" not in text
    example = text[text.index("```toml"):].split("```", 2)[1]
    assert "max_iterations" not in example.split("[functions.")[0]


def test_loading_the_example_fuze_toml_gives_the_builtin_defaults() -> None:
    config = Config.load(FUZE_TOML, env="")
    assert config.settings_for(None) == defaults()
    assert config.settings_for("check_status") == defaults()


def _uncomment_defaults(text: str) -> str:
    """The example file with every non-optional key's commented assignment made live."""
    live_keys = {key for key, spec in schema().items() if not spec.optional}
    out: list[str] = []
    in_array = False
    for line in text.splitlines():
        if line.startswith("# Per-function overrides"):
            break  # the commented [functions.check_status] example stays commented
        match = re.match(r"^# (\w+) = (.*)$", line)
        if in_array:
            out.append(line[2:])
            in_array = line != "# ]"
        elif match and match.group(1) in live_keys:
            out.append(line[2:])
            in_array = match.group(2) == "["
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_the_default_written_beside_each_key_is_the_builtin_default() -> None:
    """Uncommenting every key of the example file still gives exactly the built-in defaults, so
    the values it shows are the real ones."""
    text = _uncomment_defaults(FUZE_TOML.read_text(encoding="utf-8"))
    data = tomllib.loads(text)
    written = {k for table in ("defaults", "loop_detection") for k in data.get(table, {})}
    assert written == {key for key, spec in schema().items() if not spec.optional}
    assert Config.from_dict(data).settings_for(None) == defaults()


def test_optional_keys_show_an_example_value_of_the_right_type() -> None:
    """Optional keys are off by default and commented out; their example values pass the key's
    type and bounds checks (an import path such as ``embed`` is only imported when loaded)."""
    text = FUZE_TOML.read_text(encoding="utf-8")
    for key, spec in schema().items():
        if not spec.optional:
            continue
        line = next(ln for ln in text.splitlines() if ln.startswith(f"# {key} = "))
        value = tomllib.loads(line[2:])[key]
        coerce(spec, value, from_code=False)


def test_function_table_example_in_fuze_toml_is_valid() -> None:
    """The commented [functions.check_status] example loads and overrides what it says."""
    text = FUZE_TOML.read_text(encoding="utf-8")
    start = text.index("# [functions.check_status]")
    block = [ln[2:].split("#")[0].rstrip() for ln in text[start:].splitlines() if ln.startswith("# ")]
    config = Config.from_dict(tomllib.loads("\n".join(block)))
    settings = config.settings_for("check_status")
    assert settings["on_loop"] == ("warn",)
    assert settings["max_iterations"] == 200
    assert settings["exempt_from"] == ("dedup",)


def test_error_examples_in_the_reference_are_real_config_errors(gen: ModuleType) -> None:
    """Each broken file shown in the reference is rejected with the message printed there."""
    text = CONFIG_MD.read_text(encoding="utf-8")
    examples = gen.error_examples()
    assert len(examples) >= 3
    for _title, _toml, message in examples:
        assert message.startswith("fuze.toml:")
        assert message in text


def test_rendered_toml_values_round_trip_through_tomllib(gen: ModuleType) -> None:
    for key, spec in schema().items():
        if spec.optional and spec.default is None:
            continue
        parsed = tomllib.loads(f"x = {gen.toml_default(spec)}")["x"]
        expected = spec.default
        if spec.type == "actions" and len(expected) == 1:
            expected = expected[0]
        if isinstance(expected, tuple):
            expected = list(expected)
        assert parsed == expected, key


@pytest.mark.parametrize(("written", "killed_at"), [(None, None), (25, 26)])
def test_max_iterations_unset_and_written_as_25_differ_as_the_reference_says(
    written: int | None, killed_at: int | None
) -> None:
    """50 reads of distinct pages: unset, the cap is waived while calls bring something new;
    written, even as 25, it is absolute."""
    import fuzeguard
    from fuzeguard import Config, LoopDetected, guard

    @guard(name="read_page")
    def read_page(n: int) -> str:
        return f"page {n}: " + "new words " * (n % 7) + str(n * 7919)

    config = Config.from_dict({"defaults": {} if written is None else {"max_iterations": written}})
    stopped = None
    with fuzeguard.run(config=config):
        for n in range(1, 51):
            try:
                read_page(n)
            except LoopDetected:
                stopped = n
                break
    assert stopped == killed_at
