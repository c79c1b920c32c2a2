"""The stop report: ``run.report()``, ``LoopDetected.report()`` and ``fuze report`` (text and
HTML), checked against golden files of the example traces and, for the page, in a real headless
browser."""

from __future__ import annotations

import contextlib
import dataclasses
import html.parser
import itertools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from freezegun import freeze_time

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard._private.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"
GOLDEN = Path(__file__).resolve().parents[1] / "helpers" / "golden"


def _report(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            *args: str) -> str:
    monkeypatch.chdir(ROOT)
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("trace", "golden", "config"),
    [("stuck_search", "report_dedup", "examples/traces/live.toml"),
     # Without dedup (which stops the ping-pong under live.toml), the cycle layer stops it.
     ("ping_pong", "report_cycle", "tests/helpers/golden/cycle.toml"),
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
    # replayed under the config it ran under: the same outcome, said with the config's name
    assert "Replayed under examples/traces/live.toml: the same outcome." in out
    assert "recorded:" not in out


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
    assert 'Run "polling" was not stopped, as the trace records.' in out
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


def test_a_trace_replayed_under_another_config_reports_the_recorded_outcome_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A newcomer's review: run without --config, the report told the replay under built-in
    defaults as what happened; the trace records warnings at calls 3 to 5, a skip at 6, the kill
    at 7."""
    monkeypatch.chdir(tmp_path)  # no fuze.toml here or above: built-in defaults
    for key in [k for k in os.environ if k.startswith("FUZE_")]:
        monkeypatch.delenv(key)
    assert main(["report", str(TRACES / "stuck_search.jsonl")]) == 0
    head = capsys.readouterr().out.split("\n\nEvidence")[0].splitlines()
    assert head[1] == 'Run "stuck_search" was stopped at call 7 by dedup (a loop), as the trace records.'
    assert head[3] == ("  Recorded: 7 calls, 5 ran; warned at calls 3, 4 and 5; answered by the guard "
                       "at call 6.")
    assert head[4].startswith("Replayed under built-in defaults, the outcome differs from call 5 "
                              "on (recorded: warned; replayed: stopped).")
    assert head[5] == "The replayed run was stopped at call 5 by dedup (a loop)."


def test_the_evidence_marks_the_calls_whose_replayed_action_is_not_the_recorded_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _report(capsys, monkeypatch, "examples/traces/ping_pong.jsonl", "--config",
                  "tests/helpers/golden/cycle.toml")
    rows = {line.split()[0]: line for line in out.split("Evidence")[1].split("\n\n")[0]
            .splitlines()[1:]}
    assert rows["5"].endswith("[recorded: warn]")
    assert rows["8"].endswith("[cycle 4/3; recorded: skip]")
    assert "recorded" not in rows["4"] and "recorded" not in rows["6"]


def test_report_of_a_file_that_is_not_a_trace_is_a_usage_error_and_writes_no_page(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A newcomer's review: it printed nothing, wrote an empty page and exited 0."""
    bad = tmp_path / "config.jsonl"
    bad.write_text('{"max_calls": 100}\n', encoding="utf-8")
    page = tmp_path / "r.html"
    assert main(["report", str(bad), "--html", str(page)]) == 2
    assert f"{bad} is not a trace: none of its 1 line is a call" in capsys.readouterr().err
    assert not page.exists()


def _searches(n: int, **options: object) -> None:
    @guard(name="web_search")
    def web_search(query: str) -> str:
        return "No results found."

    with fuzeguard.run("research", **options), contextlib.suppress(LoopDetected):  # type: ignore[arg-type]
        for i in range(n):
            web_search(f"how to fix error {i}")


def test_the_progress_window_suggested_acts_where_its_comment_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A newcomer's review: the report suggested progress_window = 9, "act after 9 calls"; the
    layer makes a loop of twice the window, so replayed it acted after 18."""
    monkeypatch.chdir(tmp_path)
    _searches(40, trace="stopped/")
    assert main(["report", "stopped/"]) == 0
    found = re.search(r"progress_window = (\d+) +# now 4: act after (\d+) calls that bring "
                      r"nothing new, not 8", capsys.readouterr().out)
    assert found is not None
    value, claimed = int(found[1]), int(found[2])
    # The same agent, observed for longer, replayed with the suggested line.
    _searches(60, trace="long/", enabled="observe")
    (tmp_path / "candidate.toml").write_text(f"[functions.web_search]\nprogress_window = {value}\n")
    assert main(["replay", "long/", "--config", "candidate.toml", "--ignore-code-settings",
                 "--format", "json"]) == 0
    acts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kills = [a["count"] for a in acts if a["layer"] == "progress" and a["action"] == "kill"]
    assert kills[0] == claimed


def test_a_threshold_whose_comment_misstates_where_the_layer_acts_is_not_offered(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check replays the trace with the line: changing the outcome is not enough, the layer
    must act where the comment says (a value twice too large changes the outcome too)."""
    from fuzeguard._private.reports.advice import Suggestion
    from fuzeguard._private.reports.trace_reports import _acts_as_said, replayed_with, trace_reports

    monkeypatch.chdir(ROOT)
    config = fuzeguard.Config.load("examples/traces/live.toml")
    [report] = trace_reports(["examples/traces/stuck_search.jsonl"], config)
    right = Suggestion("functions.web_search", "repeat_threshold", "3", "", layer="dedup",
                       acts_at=4, acted_at=3)
    wrong_now = dataclasses.replace(right, acted_at=5)
    wrong_then = dataclasses.replace(right, acts_at=6)
    trials = replayed_with({("a", "", ""): right}, config, "examples/traces/stuck_search.jsonl",
                           True)
    assert trials is not None and (trial := trials[("a", "", "")]) is not None
    assert trial.first_acted[("78867edcd538", "dedup", "web_search", False)] == 4
    assert _acts_as_said(right, "78867edcd538", report.marks, trial)
    assert not _acts_as_said(wrong_now, "78867edcd538", report.marks, trial)
    assert not _acts_as_said(wrong_then, "78867edcd538", report.marks, trial)


def test_the_picture_places_calls_by_their_order_evenly_and_scales_to_the_page() -> None:
    """A newcomer's review: placed by wall time, 7 of the 9 calls of ping_pong shared a tenth
    of the axis (a slow first call, then a burst), and the 1150 px picture overflowed the page."""
    svg = (ROOT / "docs" / "images" / "stop-timeline.svg").read_text(encoding="utf-8")
    xs = [float(x) for x in re.findall(r'<g class="call" data-index="\d+"[^>]*><title>.*?</title>'
                                       r'<(?:circle|path)[^>]*?(?:cx="|d="M)([\d.]+)', svg, re.S)]
    assert len(xs) == 10
    # (the last, the kill, is a cross drawn from x - 7: the others are read at their centre)
    steps = {round(b - a, 1) for a, b in itertools.pairwise(xs[:-1])}
    assert len(steps) == 1 and steps.pop() > 20
    head = svg.split(">", 1)[0]
    assert 'style="max-width:100%;height:auto"' in head and 'viewBox="0 0 ' in head


def test_an_early_warning_has_a_mark_of_its_own_and_the_legend_names_it() -> None:
    @guard(name="web_search", on_loop=["warn", "kill"])
    def web_search(query: str) -> str:
        return "No results found."

    with fuzeguard.run("research") as run, contextlib.suppress(LoopDetected):
        for i in range(6):  # progress warns early after 4 calls that brought nothing new
            web_search(f"how to fix error {i}")
    found = _Marks()
    page = run.report().html()
    found.feed(page)
    early = [m for m in found.marks if m.get("data-early") == "true"]
    assert early and all(m["data-action"] == "warn" for m in early)
    assert ">early warning</text>" in page and ">warned</text>" in page


def test_a_live_runs_page_names_its_run_once() -> None:
    """A newcomer's review: the page of ``run.report().html()`` repeated its heading."""
    tool = guard(lambda q: "same", name="search")
    with fuzeguard.run("checkout") as run, pytest.raises(LoopDetected):
        for _ in range(5):
            tool("q")
    page = run.report().html()
    assert page.count('fuzeguard: run &quot;checkout&quot;</h1>') == 1
    assert "<h2>" not in page


def test_the_picture_boxes_the_calls_the_replay_acted_on_otherwise_than_the_trace_records(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    _report(capsys, monkeypatch, "examples/traces/ping_pong.jsonl", "--config",
            "tests/helpers/golden/cycle.toml", "--html", str(page))
    text = page.read_text(encoding="utf-8")
    found = _Marks()
    found.feed(text)
    boxed = {m["data-index"]: m["data-recorded"] for m in found.marks if "data-recorded" in m}
    assert boxed == {"5": "warn", "7": "warn", "8": "skip", "9": "skip"}  # as the text says
    assert "the trace records another action for this call" in text
    _report(capsys, monkeypatch, "examples/traces/ping_pong.jsonl", "--config",
            "examples/traces/live.toml", "--html", str(page))
    assert "data-recorded" not in page.read_text(encoding="utf-8")  # the same outcome


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
