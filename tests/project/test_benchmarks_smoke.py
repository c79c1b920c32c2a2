"""The benchmark suite (issue 5) runs end to end. No timing is asserted here: this suite runs on
noisy shared machines, and the numbers belong in docs/performance.md, not in pass/fail."""

from __future__ import annotations

import difflib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuzeguard.layers import BUILTIN_LAYERS

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SECTIONS = ("0. verdicts", "1. overhead against agentguard", "1. overhead", "1b. overhead by stage",
            "2. growth", "3. big inputs", "4. concurrency", "5. semantic vs difflib", "6. replay",
            "7. shared run (Redis)")
# Targets about counts and verdicts, not speed: these must hold even in quick mode.
EXACTNESS_TARGETS = ("exact", "all", "all, 0")


@pytest.fixture
def verdicts_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import verdicts

    yield verdicts


def test_quick_suite_writes_the_report_with_machine_and_every_section(tmp_path: Path) -> None:
    report_path = tmp_path / "performance.md"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "run.py"), "--quick", "--output", str(report_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = report_path.read_text(encoding="utf-8")
    for fact in ("| CPU |", "| cores |", "| Python |", "| OS |"):
        assert fact in report
    for section in SECTIONS:
        assert f"| {section} |" in report, section
    rows = [line.split(" | ") for line in report.splitlines() if line.startswith("| ")]
    exactness = [row for row in rows if len(row) == 5 and row[3] in EXACTNESS_TARGETS]
    assert exactness, "the report has no count or verdict checks"
    assert all(row[4].startswith("yes") for row in exactness), exactness


def test_the_per_layer_costs_run_for_every_layer() -> None:
    """``benchmarks/layer_costs.py --quick`` (the figures of docs/layers.md) runs to the end."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / "layer_costs.py"), "--quick"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    measured = [line.split()[0] for line in done.stdout.splitlines()[1:]]
    assert measured == list(BUILTIN_LAYERS)


def test_verdict_check_fails_when_a_fingerprint_changes(
    verdicts_module: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark's guard against speed-ups that change decisions is not vacuous."""
    monkeypatch.setattr(verdicts_module, "fingerprint", lambda value, volatile=frozenset(): b"\0" * 16)
    with pytest.raises(AssertionError, match="changed"):
        verdicts_module.check()  # type: ignore[attr-defined]


def test_verdict_check_passes_on_this_build(verdicts_module: object) -> None:
    rows = verdicts_module.check()  # type: ignore[attr-defined]
    assert [row.met for row in rows] == [True]


def test_the_replay_figures_of_the_cli_page_are_those_of_the_performance_report() -> None:
    """``benchmarks/run.py`` writes both; a report written without the other would drift."""
    report = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in report.splitlines() if line.startswith("| 6. replay |")]
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    begin = cli.index("<!-- replay figures: written by python benchmarks/run.py -->")
    block = cli[begin:cli.index("<!-- end of replay figures -->")]
    assert rows
    assert block.splitlines()[2:-1] == [f"{r[1]}: {r[2]}" for r in rows]


def test_the_comparison_with_another_revision_runs_each_tree_it_names(tmp_path: Path) -> None:
    """``benchmarks/against.py REV --patch FILE --quick`` unpacks REV, applies the patch to a
    copy, and measures the three trees; a patch that does not apply fails the command."""
    init = subprocess.run(["git", "-C", str(ROOT), "show", "HEAD:fuzeguard/__init__.py"],
                          capture_output=True, text=True, check=True).stdout
    patch = tmp_path / "comment.diff"
    patch.write_text("".join(difflib.unified_diff(
        init.splitlines(keepends=True), ["# patched\n", *init.splitlines(keepends=True)],
        "a/fuzeguard/__init__.py", "b/fuzeguard/__init__.py")), encoding="utf-8")
    command = [sys.executable, str(BENCHMARKS / "against.py"), "HEAD", "--quick"]
    done = subprocess.run([*command, "--patch", str(patch)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    names = [line.split(": ", 1)[0] for line in done.stdout.splitlines()]
    assert names == ["HEAD", "HEAD + comment.diff", "this checkout"]
    for line in done.stdout.splitlines():
        assert all(f"{workload} " in line for workload in ("int", "text", "rotation")), line
        assert "/ agentguard's three guards'" in line, line
    patch.write_text(patch.read_text(encoding="utf-8").replace("__init__.py", "missing.py"),
                     encoding="utf-8")
    broken = subprocess.run([*command, "--patch", str(patch)], capture_output=True, text=True,
                            timeout=600, check=False)
    assert broken.returncode != 0


def test_the_agentguard_peer_does_its_guards_work_on_every_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The peer of the overhead ratios (``peers.agentguard_stacked``) really asks agentguard's
    guards: the third identical call in a row is refused by its ``LoopGuard``, and distinct calls
    of one tool, thousands in a row, pass (its ``FuzzyLoopGuard`` count is set above its window)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import peers
    from agentguard import LoopDetected

    def search(query: str, limit: int) -> str:
        return query

    guarded = peers.agentguard_stacked(search, max_tool_repeats=11)
    assert [guarded(f"q{i}", limit=i) for i in range(2_000)][-1] == "q1999"
    guarded("same", 1)
    guarded("same", limit=1)
    with pytest.raises(LoopDetected):
        guarded(query="same", limit=1)
