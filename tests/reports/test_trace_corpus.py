"""A corpus of agent traces, real loop shapes from the seed systems' bug reports and legitimate
repetitive work, replayed through the default configuration.

Each trace is a list of lines in the trace format (``{"fn", "args", "result" | "error"}``). For a
loop, ``best`` is the earliest call at which the best seed system flags it (a warning counts) and
the call at which it stops it; fuzeguard must flag no later and stop no later, except where a trace
says why the graded response waits longer on purpose (``graded_stop``, docs/layers.md "When a
pattern warns and when it kills"). A legitimate trace must not be flagged at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scripted import Step, play, words

from fuzeguard import Config
from fuzeguard._private.reports.replay import Replayer


@dataclass(frozen=True)
class Trace:
    name: str
    source: str
    lines: list[dict[str, Any]]
    best_flag: int | None = None  # None: legitimate work
    best_stop: int | None = None
    graded_stop: int | None = None  # later than best_stop on purpose, the reason said beside it


class ToolError(Exception):
    """Stands for whatever exception a tool raised; the trace keeps its message."""


def steps_of(trace: Trace) -> list[Step]:
    return [Step(line["fn"], line.get("args", {}), line.get("result"),
                 ToolError(line["error"]) if "error" in line else None) for line in trace.lines]


SEARCH_HITS = ("1. LangGraph vs CrewAI: which agent framework in 2025\n"
               "2. A survey of multi-agent orchestration frameworks\n"
               "3. Building reliable agents: a practical comparison")
ARTICLE = "The article compares agent frameworks on tool calling, memory and orchestration. " * 3


def deerflow_2569() -> Trace:
    """DeerFlow #2569: web_search ↔ web_fetch, 200+ calls; the queries keep changing a little,
    the search keeps returning the same hits and the agent fetches the same article again."""
    lines: list[dict[str, Any]] = []
    suffixes = ["", " comparison", " 2025", " review", " latest", " benchmark", " pros cons",
                " overview", " guide", " ranking"]
    for i in range(100):
        lines.append({"fn": "web_search",
                      "args": {"query": "best AI agent frameworks" + suffixes[i % 10]},
                      "result": SEARCH_HITS})
        lines.append({"fn": "web_fetch", "args": {"url": "https://example.com/agent-frameworks"},
                      "result": ARTICLE})
    return Trace("deerflow-2569-search-fetch", "DeerFlow PR #2590: cycle warn at 6, stop at 8",
                 lines, best_flag=6, best_stop=8)


def deerflow_three_tool_cycle() -> Trace:
    lines = [{"fn": fn, "args": {"topic": "pricing"}, "result": f"{fn}: nothing new on pricing"}
             for _ in range(20) for fn in ("plan", "search", "summarize")]
    return Trace("deerflow-three-tool-cycle", "DeerFlow PR #2590: 3-tool cycle stops at 12",
                 lines, best_flag=9, best_stop=12)


def hermes_terminal_retry() -> Trace:
    """Hermes: "retrying a terminal command that keeps failing", the very same command."""
    lines = [{"fn": "terminal", "args": {"command": "npm run build"},
              "error": "Command 'npm run build' returned non-zero exit status 1: "
                       "Module not found: Error: Can't resolve 'react-dom'"} for _ in range(20)]
    # Stopped one call later than Hermes on purpose: a streak is certain at its 5th identical
    # call, shorter ones are warned (an agent often re-runs a step three or four times, then
    # changes approach).
    return Trace("hermes-terminal-retry", "OpenFang loop guard: same hash 3 times (flag at 3); "
                 "Hermes proposal blocks after the warnings", lines, best_flag=3, best_stop=4,
                 graded_stop=5)


def hermes_terminal_variations() -> Trace:
    """Hermes: the failing command retried with small variations; the error stays the same."""
    variants = ["npm run build", "npm run build --verbose", "npx vite build", "npm run build -- -f",
                "yarn build", "npm run build --force", "npm run build:prod", "pnpm build"]
    lines = [{"fn": "terminal", "args": {"command": variants[i % 8]},
              "error": f"Command '{variants[i % 8]}' returned non-zero exit status 1: "
                       "Module not found: Error: Can't resolve 'react-dom'"} for i in range(20)]
    # A failing call with new arguments is exploration at first: the same error from four new
    # commands is evidence, then the warning; groq-code-cli's stop after 5 consecutive errors is
    # the max_consecutive_errors limit here (off by default, tested below).
    return Trace("hermes-terminal-variations", "Hermes: the same error from varied commands, "
                 "warned after four repeats (call 6), stopped after eight (call 10)", lines,
                 best_flag=6, best_stop=10)


def hermes_read_patch() -> Trace:
    """Hermes: "alternating between read_file and patch without progress"."""
    source = "def parse(text):\n    return json.loads(text)\n" * 5
    lines: list[dict[str, Any]] = []
    for i in range(20):
        lines.append({"fn": "read_file", "args": {"path": "app/parser.py"}, "result": source})
        lines.append({"fn": "patch", "args": {"path": "app/parser.py", "diff": f"@@ -{i},2 +{i},3 @@"},
                      "error": "patch failed: Hunk #1 FAILED at 42 (different line endings?)"})
    return Trace("hermes-read-patch", "OpenFang: 3rd identical read_file (call 5); DeerFlow "
                 "cycle stop at 8", lines, best_flag=5, best_stop=8)


def status_poll_unchanged() -> Trace:
    """Hermes: "repeatedly checking a condition" that never changes (fresh request ids)."""
    lines = [{"fn": "check_status", "args": {"job": "deploy-7"},
              "result": {"status": "pending", "request_id": f"r-{i}", "ts": 100 + i}}
             for i in range(20)]
    # Polls wait: OpenClaw warns a known poll with no progress at 10 and blocks it at 20.
    return Trace("status-poll-unchanged", "OpenClaw known-poll rule: warn at 10, block at 20",
                 lines, best_flag=10, best_stop=20)


def status_poll_changing() -> Trace:
    lines = [{"fn": "check_status", "args": {"job": "deploy-7"},
              "result": {"status": "running", "progress": 5 * i, "request_id": f"r-{i}"}}
             for i in range(20)]
    return Trace("status-poll-changing", "legitimate: the answer moves", lines)


def fix_retest() -> Trace:
    lines: list[dict[str, Any]] = []
    for i in range(10):
        lines.append({"fn": "edit_file", "args": {"path": "app.py", "patch": f"attempt {i}"},
                      "result": "Edit applied."})
        lines.append({"fn": "run_tests", "args": {},
                      "result": f"{10 - i} failed, {50 + i} passed\nFAILED tests/test_app.py::t{i}"})
    return Trace("fix-retest", "legitimate: test output changes every lap", lines)


def batch_files() -> Trace:
    lines = [{"fn": "summarize_file", "args": {"path": f"docs/chapter{i}.md"},
              "result": words(i, 30)} for i in range(24)]
    return Trace("batch-files", "legitimate: distinct items", lines)


def paging() -> Trace:
    lines = [{"fn": "read_file", "args": {"path": "big.log", "offset": 500 * i},
              "result": "\n".join(words(100 * i + k, 8) for k in range(12))} for i in range(24)]
    return Trace("paging", "legitimate: one long file, page by page", lines)


def research_session() -> Trace:
    lines: list[dict[str, Any]] = []
    for i in range(10):
        lines.append({"fn": "web_search", "args": {"query": f"agent loop detection part {i}"},
                      "result": "\n".join(words(10 * i + k, 6) for k in range(4))})
        lines.append({"fn": "web_fetch", "args": {"url": f"https://example.com/{i}"},
                      "result": words(900 + i, 60)})
    return Trace("research-session", "legitimate: refined searches finding new pages", lines)


def acknowledgements() -> Trace:
    lines = [{"fn": "send_message", "args": {"text": words(i, 10)}, "result": "OK"}
             for i in range(24)]
    return Trace("acknowledgements", "legitimate: short acknowledgements", lines)


LOOPS = [deerflow_2569(), deerflow_three_tool_cycle(), hermes_terminal_retry(),
         hermes_terminal_variations(), hermes_read_patch(), status_poll_unchanged()]
LEGITIMATE = [status_poll_changing(), fix_retest(), batch_files(), paging(), research_session(),
              acknowledgements()]


@pytest.mark.parametrize("trace", LOOPS, ids=lambda t: t.name)
def test_every_loop_is_caught_no_later_than_the_best_seed_system(trace: Trace) -> None:
    played = play(steps_of(trace))
    first = played.first()
    assert first is not None and trace.best_flag is not None and trace.best_stop is not None
    assert first <= trace.best_flag, (trace.source, played.detections[0])
    stop = trace.best_stop if trace.graded_stop is None else trace.graded_stop
    assert played.killed_at is not None and played.killed_at <= stop, trace.source


@pytest.mark.parametrize("trace", LEGITIMATE, ids=lambda t: t.name)
def test_no_legitimate_trace_is_flagged(trace: Trace) -> None:
    played = play(steps_of(trace))
    assert played.detections == [], [(d.call_index, d.layer) for d in played.detections]
    assert played.calls == len(trace.lines)


def test_the_corpus_records_when_each_loop_is_caught() -> None:
    """The exact calls, so that a change in timing is a visible, reviewed change."""
    caught = {}
    for trace in LOOPS:
        played = play(steps_of(trace))
        caught[trace.name] = (played.first(), played.killed_at)
    assert caught == {
        # Warned at the 3rd identical fetch (nothing written), killed at the 4th.
        "deerflow-2569-search-fetch": (6, 8),
        # Warned at the 3rd identical `plan`, killed at the 3rd `search` right after the warning.
        "deerflow-three-tool-cycle": (7, 8),
        # Warned at the 3rd and 4th identical failures, killed at the 5th (a certain streak).
        "hermes-terminal-retry": (3, 5),
        "hermes-terminal-variations": (6, 10),
        # Warned at the 3rd identical read_file (the patches failed), killed at the 3rd alike patch.
        "hermes-read-patch": (5, 6),
        "status-poll-unchanged": (10, 20),
    }


@pytest.mark.parametrize("trace", LOOPS + LEGITIMATE, ids=lambda t: t.name)
def test_fuze_replay_of_the_corpus_finds_what_the_live_guards_found(
    trace: Trace, tmp_path: Path
) -> None:
    """SPEC §8: replaying a recorded trace reproduces the live detections, call for call."""
    path = tmp_path / f"{trace.name}.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for line in trace.lines:
            if "error" in line:
                line = {**line, "error": f"ToolError: {line['error']}"}
            out.write(json.dumps(line) + "\n")
    live = play(steps_of(trace))
    summary = Replayer(Config()).replay_file(str(path))
    replayed = [(d.call, d.detection.layer, d.detection.kind) for d in summary.detections]
    assert replayed == [(d.call_index, d.layer, d.kind) for d in live.detections]


def test_a_consecutive_error_limit_stops_varied_failures_as_groq_code_cli_does() -> None:
    """groq-code-cli stops a session after 5 consecutive errors: here that is a limit you set."""
    played = play(steps_of(hermes_terminal_variations()), run_options={"max_consecutive_errors": 5})
    assert played.killed_at == 6
