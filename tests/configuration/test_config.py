"""fuze.toml: discovery, environments, per-function tables, strict validation (SPEC §6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import Config, ConfigError, LoopDetected, guard


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def error_for(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path / "fuze.toml", text)
    with pytest.raises(ConfigError) as info:
        Config.load(path)
    return info.value


def test_fuze_toml_sections_set_the_fuze_keys(tmp_path: Path) -> None:
    """Fuze's configuration example, as written in its docs."""
    path = write(tmp_path / "fuze.toml", """
[defaults]
max_iterations = 25 # Layer 1
kill_on_loop = true # What to do when loop detected
[loop_detection]
window_size = 10 # Layer 2: sliding window size
repeat_threshold = 3 # Layer 2: max identical hashes before flagging
cost_velocity_window = 5
progress_window = 4
""")
    values = Config.load(path).settings_for()
    assert (values["max_iterations"], values["on_loop"], values["window_size"]) == (25, ("kill",), 10)


def test_discovery_prefers_fuze_config_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "fuze.toml", "[defaults]\nmax_iterations = 7\n")
    other = write(tmp_path / "elsewhere" / "custom.toml", "[defaults]\nmax_iterations = 9\n")
    monkeypatch.setenv("FUZE_CONFIG", str(other))
    assert Config.load().settings_for()["max_iterations"] == 9


def test_fuze_config_pointing_nowhere_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUZE_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        Config.load()


def test_discovery_finds_the_nearest_fuze_toml_in_a_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "fuze.toml", "[defaults]\nmax_iterations = 7\n")
    write(tmp_path / "a" / "fuze.toml", "[defaults]\nmax_iterations = 8\n")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert Config.load().settings_for()["max_iterations"] == 8


def test_discovery_falls_back_to_pyproject_tool_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "pyproject.toml", """
[project]
name = "agent"

[tool.fuzeguard.defaults]
max_iterations = 11

[tool.fuzeguard.functions.check_status]
on_loop = "warn"
""")
    monkeypatch.chdir(tmp_path)
    config = Config.load()
    assert config.settings_for()["max_iterations"] == 11
    assert config.settings_for("check_status")["on_loop"] == ("warn",)


def test_pyproject_without_the_tool_table_means_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    config = Config.load()
    assert config.files == ()
    assert config.settings_for()["max_iterations"] is None  # the built-in, adaptive cap


def test_no_file_means_built_in_defaults() -> None:
    assert Config.load().settings_for()["window_size"] == 10


def test_guards_use_the_discovered_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "fuze.toml", "[defaults]\nmax_iterations = 2\n")
    monkeypatch.chdir(tmp_path)
    tool = guard(lambda x: x, name="t")
    with fuzeguard.run(), pytest.raises(LoopDetected):
        for i in range(3):
            tool(i)


def test_fuze_env_overlays_the_environment_file_key_by_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "fuze.toml", """
[defaults]
max_iterations = 25
on_loop = "warn"
[functions.check_status]
max_iterations = 200
exempt_from = ["dedup"]
""")
    write(tmp_path / "fuze.production.toml", """
[defaults]
max_iterations = 10
[functions.check_status]
max_iterations = 50
""")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUZE_ENV", "production")
    config = Config.load()
    assert config.settings_for()["max_iterations"] == 10
    assert config.settings_for()["on_loop"] == ("warn",)
    assert config.settings_for("check_status")["max_iterations"] == 50
    assert config.settings_for("check_status")["exempt_from"] == ("dedup",)
    assert config.origin_of("max_iterations").endswith("fuze.production.toml")
    assert config.origin_of("on_loop").endswith("fuze.toml")


def test_env_file_on_loop_replaces_base_kill_on_loop(tmp_path: Path) -> None:
    write(tmp_path / "fuze.toml", "[defaults]\nkill_on_loop = true\n")
    write(tmp_path / "fuze.staging.toml", '[defaults]\non_loop = "skip"\n')
    assert Config.load(tmp_path / "fuze.toml", env="staging").settings_for()["on_loop"] == ("skip",)


def test_function_table_overrides_defaults_for_that_function_only() -> None:
    config = Config.from_dict({"functions": {"check_status": {"on_loop": "warn", "max_iterations": 200}}})
    assert config.settings_for("check_status")["max_iterations"] == 200
    assert config.settings_for("web_search")["max_iterations"] is None


def test_code_wins_over_toml() -> None:
    config = Config.from_dict({"functions": {"t": {"max_iterations": 1}}})
    tool = guard(lambda x: x, name="t", max_iterations=3)
    with fuzeguard.run(config=config) as r:
        for i in range(3):
            tool(i)
    assert r.stats().calls == 3


def test_unknown_key_names_file_key_line_and_suggestion(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[defaults]\nmax_iterations = 25\n\n[loop_detection]\nwindow = 10\n")
    assert str(err) == (
        f"{tmp_path / 'fuze.toml'}:5: unknown key `loop_detection.window`; did you mean `window_size`?"
    )
    assert (err.key, err.line) == ("loop_detection.window", 5)


def test_wrong_type_names_the_key_and_what_was_expected(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[loop_detection]\nwindow_size = "ten"\n')
    assert "loop_detection.window_size" in str(err) and "whole number" in str(err)
    assert err.line == 2


def test_negative_window_is_impossible(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[loop_detection]\nwindow_size = -1\n")
    assert "at least 1" in str(err)


def test_warn_threshold_above_the_hard_one_is_impossible(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[loop_detection]\nrepeat_threshold = 3\nrepeat_warn_threshold = 5\n")
    assert err.line == 3
    assert "repeat_warn_threshold" in str(err)


def test_key_in_the_wrong_table_says_where_it_belongs(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[defaults]\nwindow_size = 4\n")
    assert "belongs in [loop_detection]" in str(err)


def test_unknown_table_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[loop_detect]\nwindow_size = 4\n")
    assert "did you mean [loop_detection]?" in str(err) and err.line == 1


def test_kill_on_loop_and_on_loop_in_one_table_is_an_error(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[defaults]\nkill_on_loop = true\non_loop = "warn"\n')
    assert "both kill_on_loop and on_loop" in str(err)


def test_unknown_action_is_refused(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[defaults]\non_loop = ["warn", "block"]\n')
    assert "unknown action 'block'" in str(err)


def test_run_wide_key_in_a_function_table_is_refused(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[functions.search]\nmax_calls = 3\n")
    assert "run-wide" in str(err) and err.line == 2


def test_unknown_layer_name_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    err = error_for(tmp_path, '[functions.poll]\nexempt_from = ["dedupe"]\n')
    assert "did you mean `dedup`" in str(err)


def test_invalid_toml_is_reported_with_its_line(tmp_path: Path) -> None:
    err = error_for(tmp_path, "[defaults]\nmax_iterations = = 3\n")
    assert err.line == 2 and "not valid TOML" in str(err)


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


def test_a_bad_discovered_config_fails_at_decoration_and_is_logged_at_error_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken fuze.toml must not be swallowed: before, with no run opened, the ConfigError was
    raised inside the first tool call, where a framework showed the model "An error occurred"
    and nothing was logged."""
    write(tmp_path / "fuze.toml", "[defaults]\nmax_iteration = 3\n")
    monkeypatch.chdir(tmp_path)
    with capture_logs() as logs, pytest.raises(ConfigError, match="max_iterations"):
        guard(lambda x: x, name="t")
    (event,) = [e for e in logs if e["event"] == "fuzeguard.config_error"]
    assert event["log_level"] == "error" and "fuze.toml:2" in event["error"]


def test_a_config_broken_after_decoration_is_logged_at_the_first_guarded_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    tool = guard(lambda x: x, name="t")
    write(tmp_path / "sub" / "fuze.toml", "[defaults]\nx = 1\n")
    monkeypatch.chdir(tmp_path / "sub")
    with capture_logs() as logs, pytest.raises(ConfigError, match="unknown key"):
        tool(1)
    assert [e["log_level"] for e in logs if e["event"] == "fuzeguard.config_error"] == ["error"]


def test_config_from_a_path_string_in_run(tmp_path: Path) -> None:
    path = write(tmp_path / "custom.toml", "[defaults]\nmax_iterations = 1\n")
    tool = guard(lambda x: x, name="t")
    with fuzeguard.run(config=str(path)), pytest.raises(LoopDetected):
        tool(1)
        tool(2)


@pytest.mark.parametrize(
    ("table", "key", "value"),
    [("defaults", "enabled", "maybe"), ("defaults", "fail_closed", 1), ("defaults", "ignore_args", "x"),
     ("loop_detection", "result_aware", "yes"), ("defaults", "max_cost", -1)],
)
def test_bad_values_are_refused(table: str, key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=key):
        Config.from_dict({table: {key: value}})
