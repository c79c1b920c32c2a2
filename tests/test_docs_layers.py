"""docs/layers.md: every worked example runs and prints what the page shows."""

from __future__ import annotations

from test_docs_examples import run_page


def test_layers_page_examples_run_and_print_what_the_page_shows() -> None:
    assert run_page("layers.md") == []
