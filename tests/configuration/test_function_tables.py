"""A ``[functions.NAME]`` table that names no guarded function is reported, not silently ignored:
``[functions.serach]`` left ``search`` on the defaults without a word."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.cli import main


def test_a_mistyped_function_table_is_logged_with_a_suggestion_at_the_first_call() -> None:
    @guard
    def search_docs(query: str) -> str:
        return query

    config = Config.from_dict({"functions": {"serach_docs": {"max_iterations": 3}}},
                              source="typo.toml")
    with capture_logs() as logs, fuzeguard.run(config=config):
        search_docs("a")
        search_docs("b")
    (event,) = [e for e in logs if e["event"] == "fuzeguard.unknown_function"]
    assert event["log_level"] == "warning" and event["fn"] == "serach_docs"
    assert event["suggestion"] == "search_docs"
    assert "did you mean [functions.search_docs]?" in event["message"] and "typo.toml" in event["message"]


def test_a_table_that_names_a_guarded_function_is_not_reported() -> None:
    @guard
    def fetch_page(url: str) -> str:
        return url

    config = Config.from_dict({"functions": {"fetch_page": {"kind": "read"}}})
    with capture_logs() as logs, fuzeguard.run(config=config):
        fetch_page("u")
    assert not [e for e in logs if e["event"] == "fuzeguard.unknown_function"]


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "shop_tools.py").write_text(
        "import fuzeguard\n\n@fuzeguard.guard\ndef find_product(q): return q\n\n"
        "@fuzeguard.guard\ndef checkout(cart): return cart\n"
    )
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("shop_tools", None)


def test_fuze_check_import_names_each_table_that_matches_no_tool(
    tools_module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tools_module / "fuze.toml").write_text(
        "[functions.find_prodcut]\nmax_iterations = 3\n\n[functions.checkout]\nkind = \"write\"\n"
        "\n[functions.unrelated_tool_name]\nkind = \"read\"\n"
    )
    assert main(["check", "--import", "shop_tools"]) == 0
    out = capsys.readouterr().out
    assert ("warning: [functions.find_prodcut] matches no function guarded by shop_tools: its "
            "settings apply to nothing; did you mean [functions.find_product]?") in out
    assert "warning: [functions.unrelated_tool_name] matches no function" in out
    assert "[functions.checkout] matches" not in out


def test_fuze_check_import_of_a_missing_module_exits_2(
    tools_module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--import", "no_such_tools"]) == 2
    assert "cannot import no_such_tools: ModuleNotFoundError" in capsys.readouterr().err
