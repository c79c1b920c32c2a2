"""Every bad configuration is a ConfigError with a message, never a crash or a silent no-op;
a default the user never wrote never rejects a value they did; FUZE_ENV stays in the config's
folder and must name a file. From an adversarial review of the loader (SPEC §6)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import Config, ConfigError, LoopDetected, guard
from fuzeguard._private import cli
from fuzeguard._private.configuration.schema import schema
from fuzeguard._private.configuration.validation import MAX_INT, parse_duration
from fuzeguard.layers import BUILTIN_LAYERS


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def check_output(
    path: Path | None, capsys: pytest.CaptureFixture[str], env: str | None = None
) -> tuple[int, str, str]:
    args = ["check"] + ([str(path)] if path else []) + (["--env", env] if env else [])
    status = cli.main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --------------------------------------------------------------------------- every bad config


def test_toml_nested_three_thousand_deep_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path / "fuze.toml", "[defaults]\nlayers = " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        Config.load(path)


def test_fuze_check_of_a_deeply_nested_toml_exits_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "fuze.toml", "[defaults]\nskip_value = " + "{a=" * 3000 + "1" + "}" * 3000)
    status, out, err = check_output(path, capsys)
    assert (status, out) == (2, "")
    assert "nested too deeply" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["5", "[1]", '"x"'])
def test_pyproject_tool_fuzeguard_that_is_not_a_table_is_a_config_error(
    tmp_path: Path, value: str
) -> None:
    path = write(tmp_path / "pyproject.toml", f"[tool]\nfuzeguard = {value}\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml:2: `tool.fuzeguard` must be a table"):
        Config.load(path)


def test_a_discovered_pyproject_with_a_broken_fuzeguard_key_stops_guarded_calls_loudly(
    tmp_path: Path,
) -> None:
    """Before, the loader crashed inside the guard, which failed open: every call ran unguarded."""
    write(tmp_path / "pyproject.toml", "[tool]\nfuzeguard = 5\n")

    with pytest.raises(ConfigError, match="must be a table"):  # at decoration, not in a call

        @guard
        def tool(x: int) -> int:
            return x


def test_fuze_check_of_pyproject_tool_fuzeguard_5_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "pyproject.toml", "[tool]\nfuzeguard = 5\n")
    status, _, err = check_output(path, capsys)
    assert status == 2 and "`tool.fuzeguard` must be a table" in err


@pytest.mark.parametrize("path", [".x:y", "..pkg.mod:f", "os", "os:", ":f", "a b:c", "os:system()"])
def test_an_embed_that_is_not_an_absolute_import_path_is_a_config_error(
    tmp_path: Path, path: str
) -> None:
    toml = write(tmp_path / "fuze.toml", f'[loop_detection]\nembed = "{path}"\n')
    with pytest.raises(ConfigError, match=r"fuze.toml:2: `loop_detection.embed`: expected an import"):
        Config.load(toml)


def test_an_embed_module_that_raises_while_importing_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "mods" / "broken_embedder.py", "raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    toml = write(tmp_path / "fuze.toml", '[loop_detection]\nembed = "broken_embedder:embed"\n')
    try:
        with pytest.raises(ConfigError, match="RuntimeError: no GPU here"):
            Config.load(toml)
    finally:
        sys.modules.pop("broken_embedder", None)


def test_fuze_check_of_a_relative_embed_exits_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "fuze.toml", '[loop_detection]\nembed = ".x:y"\n')
    status, _, err = check_output(path, capsys)
    assert status == 2 and "relative imports cannot be resolved" in err


@pytest.mark.parametrize("data", ["text", 5, None, ["defaults"]])
def test_config_from_dict_of_a_non_mapping_is_a_config_error(data: Any) -> None:
    with pytest.raises(ConfigError, match="a config must be a mapping of tables"):
        Config.from_dict(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({1: {}}, "table names must be strings, got 1"),
        ({"defaults": {1: 2}}, "keys of `defaults` must be strings, got 1"),
        ({"functions": {1: {"max_iterations": 2}}}, "function names under `functions` must be strings"),
        ({"functions": {"t": {(1,): 2}}}, r"keys of `functions.t` must be strings, got \(1,\)"),
    ],
)
def test_config_from_dict_with_a_non_string_key_is_a_config_error(
    data: dict[Any, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Config.from_dict(data)


def test_max_duration_nan_is_a_config_error_in_toml(tmp_path: Path) -> None:
    """Before, NaN was accepted and the limit never fired (NaN compares false with everything)."""
    path = write(tmp_path / "fuze.toml", "[defaults]\nmax_duration = nan\n")
    with pytest.raises(ConfigError, match=r"`defaults\.max_duration`: expected seconds"):
        Config.load(path)


def test_max_duration_nan_is_a_config_error_in_code() -> None:
    with pytest.raises(ConfigError, match="max_duration"):
        fuzeguard.run(max_duration=float("nan"))


def test_a_duration_too_long_to_count_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="too long a duration"):
        fuzeguard.run(max_duration=10**400)


def test_parsing_a_twenty_thousand_digit_duration_takes_no_time() -> None:
    """Before, matching was quadratic: 20,000 digits took 12 s or more. Timed in this thread's
    CPU time, which a busy machine does not add to (wall time did: a shared CI machine)."""
    started = time.thread_time()
    with pytest.raises(ValueError, match="cannot read"):
        parse_duration("1" * 20_000)
    assert time.thread_time() - started < 0.1


def test_a_twenty_thousand_digit_max_duration_in_toml_is_refused_at_once(tmp_path: Path) -> None:
    path = write(tmp_path / "fuze.toml", '[defaults]\nmax_duration = "' + "1" * 20_000 + '"\n')
    started = time.thread_time()
    with pytest.raises(ConfigError, match="20,000-character text"):
        Config.load(path)
    assert time.thread_time() - started < 1.0


def test_a_twenty_thousand_digit_max_duration_in_run_is_refused_at_once() -> None:
    started = time.thread_time()
    with pytest.raises(ConfigError, match="max_duration"):
        fuzeguard.run(max_duration="9" * 20_000 + "s")
    assert time.thread_time() - started < 1.0


def test_durations_with_several_parts_and_spaces_still_parse() -> None:
    assert [parse_duration(t) for t in ("90s", "1h30m", " 1h 30m ", "1.5h", "500ms", "2 days")] == [
        90.0, 5400.0, 5400.0, 5400.0, 0.5, 172800.0
    ]


def test_progress_window_two_to_the_63_minus_1_is_a_config_error(tmp_path: Path) -> None:
    """Before, it was accepted and every guarded call failed open with an OverflowError."""
    path = write(tmp_path / "fuze.toml", "[loop_detection]\nprogress_window = 9223372036854775807\n")
    with pytest.raises(ConfigError, match=r"progress_window`: must be at most 2,147,483,647"):
        Config.load(path)


def test_every_whole_number_key_at_its_largest_value_guards_calls_without_internal_errors() -> None:
    largest = {
        key: int(spec.maximum) if spec.maximum is not None else MAX_INT
        for key, spec in schema().items() if spec.type == "int"
    }
    largest["cycle_min_length"] = largest["cycle_max_length"]
    config = Config.from_dict({"defaults": {"layers": list(BUILTIN_LAYERS)}}).with_values(largest)

    @guard(name="tool")
    def tool(x: int) -> str:
        return "the same answer every time"

    with capture_logs() as logs, fuzeguard.run(config=config):
        for i in range(6):
            tool(i % 2)
    assert [e for e in logs if e["event"] == "fuzeguard.internal_error"] == []


# --------------------------------------------------------------------------- derived defaults


@pytest.mark.parametrize(
    ("key", "value", "follower"),
    [
        ("progress_window", 2, "progress_warn_window"),
        ("cycle_repeats", 2, "cycle_warn_repeats"),
    ],
)
def test_a_limit_below_the_default_warning_lowers_the_warning_with_it(
    tmp_path: Path, key: str, value: int, follower: str
) -> None:
    """Before, these were rejected because the default warning was higher."""
    path = write(tmp_path / "fuze.toml", f"[loop_detection]\n{key} = {value}\n")
    values = Config.load(path).settings_for()
    assert (values[key], values[follower]) == (value, value)


def test_repeat_threshold_1_leaves_dedup_s_early_warning_off(tmp_path: Path) -> None:
    """dedup warns early only when asked (repeat_warn_threshold = 0 by default): a lower limit
    has no default warning to lower."""
    path = write(tmp_path / "fuze.toml", "[loop_detection]\nrepeat_threshold = 1\n")
    config = Config.load(path)
    values = config.settings_for()
    assert (values["repeat_threshold"], values["repeat_warn_threshold"]) == (1, 0)
    assert config.origin_of("repeat_warn_threshold") == "default"


def test_repeat_threshold_1_in_toml_stops_the_second_identical_call(tmp_path: Path) -> None:
    # About the threshold's lowest value, not the grading: on_loop at the first detection.
    write(tmp_path / "fuze.toml",
          "[defaults]\nearly_warnings = 0\n[loop_detection]\nrepeat_threshold = 1\n")

    @guard
    def tool(x: int) -> str:
        return "same"

    with fuzeguard.run():
        tool(1)
        with pytest.raises(LoopDetected) as info:
            tool(1)
    assert (info.value.detection.layer, info.value.detection.call_index) == ("dedup", 2)


def test_guard_repeat_threshold_1_works_from_the_first_call() -> None:
    """Before, the decorator accepted it and the first call raised ConfigError."""

    @guard(repeat_threshold=1, early_warnings=0)  # about the threshold, not the grading
    def tool(x: int) -> str:
        return "same"

    with fuzeguard.run():
        assert tool(1) == "same"
        with pytest.raises(LoopDetected):
            tool(1)


def test_a_function_table_lowering_a_limit_lowers_its_warning_only_there(tmp_path: Path) -> None:
    path = write(tmp_path / "fuze.toml", "[functions.poll]\ncycle_repeats = 2\n")
    config = Config.load(path)
    assert config.settings_for("poll")["cycle_warn_repeats"] == 2
    assert config.settings_for("other")["cycle_warn_repeats"] == 3


def test_a_warning_set_above_the_default_limit_raises_the_limit(tmp_path: Path) -> None:
    path = write(tmp_path / "fuze.toml", "[loop_detection]\nrepeat_warn_threshold = 5\n")
    values = Config.load(path).settings_for()
    assert (values["repeat_warn_threshold"], values["repeat_threshold"]) == (5, 5)


def test_two_explicit_values_that_contradict_say_exactly_what_to_change(tmp_path: Path) -> None:
    path = write(tmp_path / "fuze.toml",
                 "[loop_detection]\nrepeat_threshold = 2\nrepeat_warn_threshold = 4\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path)
    assert str(info.value) == (
        f"{path}:3: `loop_detection.repeat_warn_threshold`: repeat_warn_threshold (4) is above "
        "repeat_threshold (2), so the warning would come after the loop is stopped: set "
        "repeat_warn_threshold to at most 2 (0 turns the early warning off), or raise "
        "repeat_threshold to at least 4"
    )


def test_contradicting_values_given_to_guard_fail_at_decoration() -> None:
    with pytest.raises(ConfigError, match="set cycle_warn_repeats to at most 2"):
        guard(lambda: None, cycle_repeats=2, cycle_warn_repeats=3)


def test_a_guard_value_contradicting_a_file_value_names_both_keys(tmp_path: Path) -> None:
    write(tmp_path / "fuze.toml", "[loop_detection]\nprogress_warn_window = 4\n")

    @guard(progress_window=3)
    def tool() -> None:
        return None

    with pytest.raises(ConfigError, match=r"guard\(tool\): progress_warn_window \(4\) is above "
                       r"progress_window \(3\).*raise progress_window to at least 4"):
        tool()


def test_fuze_check_says_a_default_follows_the_value_it_depends_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "fuze.toml", "[loop_detection]\ncycle_repeats = 2\n")
    status, out, _ = check_output(path, capsys)
    line = next(x for x in out.splitlines() if x.startswith("cycle_warn_repeats"))
    assert status == 0 and "= 2" in line and line.endswith("# default, following cycle_repeats")


# --------------------------------------------------------------------------- FUZE_ENV


@pytest.mark.parametrize("env", ["x/../../elsewhere/evil", "../x", "/etc/passwd", "a\\b", "..", "a\x00b"])
def test_an_environment_name_that_could_leave_the_config_folder_is_refused(
    tmp_path: Path, env: str
) -> None:
    base = write(tmp_path / "app" / "fuze.toml", "[defaults]\nmax_calls = 100\n")
    (tmp_path / "app" / "fuze.x").mkdir()
    write(tmp_path / "elsewhere" / "evil.toml", "[defaults]\nenabled = false\n")
    with pytest.raises(ConfigError, match="is not an environment name"):
        Config.load(base, env=env)


def test_fuze_env_naming_no_file_is_a_config_error_with_a_suggestion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "fuze.toml", "[defaults]\nmax_calls = 100\n")
    write(tmp_path / "fuze.production.toml", "[defaults]\nmax_calls = 50\n")
    write(tmp_path / "fuze.staging-eu.toml", "[defaults]\nmax_calls = 70\n")
    monkeypatch.setenv("FUZE_ENV", "prodution")
    with pytest.raises(ConfigError) as info:
        Config.load()
    assert str(info.value) == (
        f"FUZE_ENV='prodution' names no file: there is no fuze.prodution.toml beside "
        f"{tmp_path / 'fuze.toml'}; environments with a file: production, staging-eu; did you mean "
        "'production'?; create the file or fix the name"
    )


def test_an_environment_without_a_base_file_must_still_name_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no fuze.prod.toml in .* \(no base config file\)"):
        Config.load(env="prod")


def test_environment_names_with_dots_and_dashes_load_their_file(tmp_path: Path) -> None:
    base = write(tmp_path / "fuze.toml", "[defaults]\nmax_calls = 100\n")
    write(tmp_path / "fuze.prod.eu-west_1.toml", "[defaults]\nmax_calls = 7\n")
    assert Config.load(base, env="prod.eu-west_1").settings_for()["max_calls"] == 7


def test_fuze_check_with_an_unknown_environment_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "fuze.toml", "[defaults]\nmax_calls = 100\n")
    status, out, err = check_output(path, capsys, env="prodution")
    assert (status, out) == (2, "")
    assert "fuze.prodution.toml" in err and "Traceback" not in err


def test_a_derived_limit_replays_as_it_fired_live(tmp_path: Path) -> None:
    """The trace records the guard's code settings; replay derives the same limit from the
    warning set above the default limit (repeat_warn_threshold = 3 raises repeat_threshold to 3)."""
    from fuzeguard._private.reports.replay import Replayer
    from fuzeguard.testing import capture_detections

    @guard(repeat_warn_threshold=3, on_loop="warn")
    def search(q: str) -> str:
        return "same"

    trace = tmp_path / "t.jsonl"
    with capture_detections() as live, fuzeguard.run(config=Config(), trace=str(trace)):
        for _ in range(5):
            search("x")
    summary = Replayer(Config()).replay_file(str(trace))
    replayed = [(d.detection.call_index, d.detection.kind) for d in summary.detections]
    assert replayed == [(d.call_index, d.kind) for d in live] == [
        (3, "warning"), (4, "warning"), (5, "loop")
    ]
    assert summary.problems == []
