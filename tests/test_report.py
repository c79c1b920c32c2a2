"""The stop report: ``run.report()``, ``LoopDetected.report()`` and ``fuze report`` (text and
HTML), checked against golden files of the example traces and, for the page, in a real headless
browser."""

from __future__ import annotations

import html.parser
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from freezegun import freeze_time

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard._private.cli import main

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "examples" / "traces"
GOLDEN = Path(__file__).resolve().parent / "golden"


def _report(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            *args: str) -> str:
    monkeypatch.chdir(ROOT)
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("trace", "golden", "config"),
    [("stuck_search", "report_dedup", "examples/traces/live.toml"),
     # Without dedup (which stops the ping-pong under live.toml), the cycle layer stops it.
     ("ping_pong", "report_cycle", "tests/golden/cycle.toml"),
     ("spending", "report_limit", "examples/traces/live.toml")],
)
def test_report_text_of_a_recorded_stop_matches_its_golden_file(
    trace: str, golden: str, config: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _report(capsys, monkeypatch, f"examples/traces/{trace}.jsonl", "--config", config)
    assert out == (GOLDEN / f"{golden}.txt").read_text(encoding="utf-8")


def test_report_names_the_layer_the_evidence_and_the_lines_that_change_the_outcome(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _report(capsys, monkeypatch, "examples/traces/stuck_search.jsonl", "--config",
                  "examples/traces/live.toml")
    assert 'Run "stuck_search" was stopped at call 7 by dedup' in out
    assert out.count("web_search(query='cheapest flight to the moon')") == 7
    assert "same as call 1" in out
    assert "repeat_threshold = 7" in out and 'exempt_from = ["dedup"]' in out


def test_a_suggested_threshold_really_lets_the_recorded_run_through(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = _report(capsys, monkeypatch, "examples/traces/stuck_search.jsonl", "--config",
                  "examples/traces/live.toml")
    assert "repeat_threshold = 7" in out
    candidate = tmp_path / "candidate.toml"
    candidate.write_text((TRACES / "live.toml").read_text(encoding="utf-8")
                         + "\n[functions.web_search]\nrepeat_threshold = 7\n", encoding="utf-8")
    again = _report(capsys, monkeypatch, "examples/traces/stuck_search.jsonl", "--config",
                    str(candidate))
    assert "was not stopped" in again


def test_report_of_a_run_that_was_not_stopped_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _report(capsys, monkeypatch, "examples/traces/polling.jsonl", "--config",
                  "examples/traces/live.toml")
    assert 'Run "polling" was not stopped.' in out
    assert "api_key='[redacted]'" in out


def test_live_run_report_previews_the_repeated_call_with_secrets_redacted() -> None:
    @guard(on_loop=["warn", "skip", "kill"])
    def web_search(query: str, api_key: str) -> str:
        return "3 results for " + query

    with freeze_time("2026-01-01"), fuzeguard.run("ticket-4711") as run:
        with pytest.raises(LoopDetected) as caught:
            for _ in range(10):
                web_search("best laptop 2026", api_key="sk-live-0123456789abcdefghij")
        text = str(caught.value.report())
        assert text == str(run.report())
    assert 'Run "ticket-4711" was stopped at call 7 by dedup' in text  # warned at 3, 4 and 5
    assert "web_search(query='best laptop 2026', api_key='[redacted]')" in text
    assert "sk-live" not in text
    assert "not run: answered by the guard" in text
    assert "Saved: 1 call answered by the guard" in text
    # The ladder set in code already warns first: the report does not suggest it.
    assert "on_loop" not in text


def test_live_report_counts_the_cost_the_skipped_calls_saved() -> None:
    @guard(on_loop=["warn", "skip", "kill"], cost=0.5)
    def ask(prompt: str) -> str:
        return "I do not know."

    with fuzeguard.run() as run, pytest.raises(LoopDetected):
        for _ in range(10):
            ask("why?")
    report = run.report()
    assert report.calls == 5 and report.cost == 2.5  # warned at 3 to 5, skipped at 6, killed at 7
    assert report.skipped == 1 and report.saved_cost == 0.5
    assert "answered by the guard (cost 0.5)" in report.text()


def test_report_of_a_run_stopped_by_a_budget_suggests_a_larger_budget() -> None:
    @guard
    def step(n: int) -> int:
        return n

    with fuzeguard.run(max_calls=4) as run, pytest.raises(LoopDetected):
        for n in range(10):
            step(n)
    text = run.report().text()
    assert "by limits (a budget: max_calls)" in text
    assert "max_calls = 6" in text
    assert "Evidence, the latest calls" in text


def test_loop_detected_report_without_its_run_uses_the_detection_and_stats() -> None:
    @guard
    def step() -> None:
        return None

    with fuzeguard.run() as run, pytest.raises(LoopDetected) as caught:
        for _ in range(10):
            step()
    exc = LoopDetected(caught.value.detection, caught.value.stats)  # as an integration raises it
    text = exc.report().text()
    assert f"stopped at call {caught.value.detection.call_index} by dedup" in text
    assert run.killed is not None


# ------------------------------------------------------------------------- HTML


class _Marks(html.parser.HTMLParser):
    """Counts the call marks inside the timeline pictures, and anything that would load."""

    def __init__(self) -> None:
        super().__init__()
        self.in_svg = 0
        self.marks: list[dict[str, str | None]] = []
        self.scripts = 0
        self.links = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.in_svg += 1
        if tag == "g" and self.in_svg and a.get("class") == "call":
            self.marks.append(a)
        if tag == "script":
            self.scripts += 1
        if tag in ("link", "img", "iframe") or any(k in ("src", "href") for k in a):
            self.links += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.in_svg -= 1


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path is not None, "chromium is required (apt-get install chromium; .ci/run does)"
    return path


def _browser(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={cwd / 'profile'}", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd,
        env={**os.environ, "HOME": str(cwd)},
    )


def test_html_report_renders_in_a_headless_browser_with_one_mark_per_call(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    _report(capsys, monkeypatch, "examples/traces/", "--config", "examples/traces/live.toml",
            "--html", str(page))
    dom = _browser("--dump-dom", page.as_uri(), cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr
    found = _Marks()
    found.feed(dom.stdout)
    lines = sum(1 for p in TRACES.glob("*.jsonl")
                for line in p.read_text(encoding="utf-8").splitlines() if line.strip())
    assert len(found.marks) == lines  # every recorded call, one mark each
    actions = [m["data-action"] for m in found.marks]
    assert actions.count("kill") == 3 and actions.count("skip") == 3
    assert found.scripts == 0 and found.links == 0
    shot = tmp_path / "report.png"
    taken = _browser(f"--screenshot={shot}", "--window-size=1300,2400", page.as_uri(),
                     cwd=tmp_path)
    assert taken.returncode == 0, taken.stderr
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # kept as the test's artifact


def test_html_report_escapes_everything_recorded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    line = ('{"fn":"<script>alert(1)</script>","args":{"q":"<img src=x onerror=alert(1)>"},'
            '"result":"x","ts":%d,"run":"r1","run_info":{"name":"</pre><script>x()</script>"}}\n')
    trace = tmp_path / "hostile.jsonl"
    trace.write_text("".join(line % i for i in range(6)), encoding="utf-8")
    page = tmp_path / "hostile.html"
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(trace), "--html", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "<img" not in text
    found = _Marks()
    found.feed(text)
    assert len(found.marks) == 5  # killed by dedup at the 5th identical call under the defaults
    assert found.scripts == 0 and found.links == 0


def test_report_of_a_missing_trace_is_a_usage_error(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "no-such.jsonl"]) == 2
    assert "no such trace file: no-such.jsonl" in capsys.readouterr().err


def test_the_picture_in_docs_stopped_md_is_what_the_script_draws() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_report_docs",
                                                  ROOT / "scripts" / "gen_report_docs.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    drawn = script.picture()
    assert drawn.count('class="call"') == 10  # the ten calls of ping_pong.jsonl
    assert script.PICTURE.read_text(encoding="utf-8") == drawn, (
        "docs/images/stop-timeline.svg is stale: run python scripts/gen_report_docs.py"
    )


def test_a_live_runs_report_draws_one_mark_per_call_it_holds() -> None:
    @guard(on_loop=["warn", "skip", "kill"])
    def fetch(url: str) -> str:
        return "<html>same</html>"

    with fuzeguard.run("live") as run, pytest.raises(LoopDetected):
        fetch("https://example.com/a")
        for _ in range(10):
            fetch("https://example.com/b")
    found = _Marks()
    found.feed(run.report().html())
    assert [m["data-index"] for m in found.marks] == [str(i) for i in range(1, 7)]
    assert [m["data-action"] for m in found.marks][-3:] == ["warn", "skip", "kill"]


def test_a_trace_report_keeps_only_the_lines_a_replay_shows_would_change_the_outcome(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "strict.toml"
    config.write_text("[defaults]\nmax_iterations = 4\n", encoding="utf-8")
    out = _report(capsys, monkeypatch, "examples/traces/stuck_search.jsonl", "--config",
                  str(config))
    # iterations (a cap you set) and dedup (the 5th identical call in a row) both end the run at
    # call 5: neither a higher cap nor an exemption from iterations alone changes that, so
    # neither is offered; warning first does.
    assert "stopped at call 5 by iterations" in out
    assert "each checked by replaying the trace with it alone" in out
    assert "max_iterations =" not in out and "exempt_from" not in out
    assert 'on_loop = ["warn", "skip", "kill"]' in out


def test_a_live_report_offers_its_lines_as_candidates_to_check() -> None:
    @guard
    def lookup(key: str) -> str:
        return "unknown"

    with fuzeguard.run() as run, pytest.raises(LoopDetected):
        for _ in range(10):
            lookup("k")
    text = run.report().text()
    assert "may change the outcome (check one with fuze replay --compare" in text


def _hostile_trace(path: Path, fn: str, run: str = "r1") -> Path:
    import json

    lines = [{"fn": fn, "args": {"q": "x"}, "result": "same", "run": run, "ts": 0.1 * i}
             for i in range(5)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_report_text_shows_the_control_characters_of_a_trace_as_escapes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Third review e03: ``fuze report`` printed names from the trace raw, so ESC, BEL and a
    right-to-left override reached the terminal of whoever read the report."""
    evil = "\x1b]0;pwned\x07\x1b[2J\x1b[32mALL CLEAR\x1b[0m\u202e"
    trace = _hostile_trace(tmp_path / "t.jsonl", "lookup" + evil, run="run" + evil)
    out = _report(capsys, monkeypatch, str(trace))
    assert "stopped at call 5" in out  # the 5th identical call in a row
    assert not any(ch in out for ch in "\x1b\x07\u202e")
    assert "lookup\\x1b]0;pwned\\x07" in out


@pytest.mark.parametrize("fn", ["fs.read", 'x]\nembed = "os:system"\n[functions.y'])
def test_suggested_function_tables_are_toml_keys_that_name_the_function(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    fn: str,
) -> None:
    """Third review e04: ``[functions.fs.read]`` (a nested table ``fuze check`` refuses), and a
    newline in a tool's name wrote ``embed = "os:system"`` among the checked lines."""
    import tomllib

    out = _report(capsys, monkeypatch, str(_hostile_trace(tmp_path / "t.jsonl", fn)))
    suggested = out[out.index("Lines of fuze.toml"):].splitlines()[1:]
    header = next(line.strip() for line in suggested if line.strip().startswith("[functions"))
    assert tomllib.loads(f"{header}\nrepeat_threshold = 3\n")["functions"] == {
        fn: {"repeat_threshold": 3}}
    assert not any(line.startswith("embed") for line in out.splitlines())
