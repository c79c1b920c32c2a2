"""docs/layers.md: every worked example runs and prints what the page shows."""

from __future__ import annotations

from pathlib import Path

from test_docs_examples import run_page

from fuzeguard.layers import BUILTIN_LAYERS


def test_layers_page_examples_run_and_print_what_the_page_shows() -> None:
    assert run_page("layers.md") == []


def test_every_builtin_layer_has_a_section_and_a_row_in_the_layers_page_and_the_readme() -> None:
    """docs/contributing.md: a new built-in layer is documented where users look for it."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "layers.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    for name in BUILTIN_LAYERS:
        assert f"\n## {name}\n" in page, name
        assert f"| [`{name}`](#{name}) |" in page, name
        assert f"\n| `{name}` |" in readme, name


def test_the_cost_table_of_the_layers_page_is_the_benchmark_s_and_lists_every_layer() -> None:
    """The per-layer cost table is written by ``benchmarks/layer_costs.py --write`` between its
    markers, one row per built-in layer in registry order."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "layers.md").read_text(encoding="utf-8")
    begin = "<!-- layer costs: written by python benchmarks/layer_costs.py --write -->"
    end = "<!-- end of layer costs -->"
    assert page.count(begin) == 1 and page.count(end) == 1
    table = page.split(begin)[1].split(end)[0].strip().splitlines()
    names = [row.split("`")[1] for row in table[2:]]
    assert names == list(BUILTIN_LAYERS)
