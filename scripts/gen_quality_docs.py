"""Generate ``docs/quality.md``: detection quality, measured.

Every figure on the page is computed here, from the same scenarios the tests assert on:

* the labelled corpus of other loop guards' test scenarios (``benchmarks/corpora/peers``, scored
  with its own ``score.py``, which replays with this checkout);
* the recorded runs of real coding agents (``benchmarks/corpora/real``) and of function-calling
  agents (``benchmarks/corpora/agentdojo``), replayed with ``fuze replay`` of this checkout and
  scored by their outcomes as their ``score.py`` scores them (``benchmarks/corpora/outcomes.py``),
  per agent or model pipeline;
* the trade-off table: all three corpora under each value of the knobs that move the balance
  (``benchmarks/corpora/tradeoff.py``; the figures of the settings other than the defaults are
  kept in ``benchmarks/corpora/tradeoff.json`` while nothing they depend on changes, and
  measured again, which takes minutes, when something did: ``--check`` does not measure them, it
  finds the page out of date);
* runs shaped like real coding agents' (``tests/helpers/agent_shapes.py``), many seeds of each shape;
* the loop shapes of ``tests/reports/test_trace_corpus.py``, with the call each is flagged and stopped at;
* the volatile-part examples of ``tests/meaning/test_meaning.py``.

``tests/docs/test_quality_docs.py`` fails when the committed page differs from what this writes::

    python scripts/gen_quality_docs.py            # rewrite docs/quality.md
    python scripts/gen_quality_docs.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quality.md"
CORPORA = ROOT / "benchmarks" / "corpora"
SEEDS = 50

sys.path.insert(0, str(ROOT / "tests" / "helpers"))
# the calls of meaning and of the trace corpus, defined beside their tests
sys.path.insert(0, str(ROOT / "tests" / "meaning"))
sys.path.insert(0, str(ROOT / "tests" / "reports"))
sys.path.insert(0, str(CORPORA))

from agent_shapes import (  # noqa: E402
    STUCK,
    bash_success,
    commands_success,
    empty_searches,
)
from outcomes import STUCK_SLACK, Corpus  # noqa: E402
from scripted import Played, Step, play  # noqa: E402
from test_meaning import REAL_CHANGE, SAME_MEANING  # noqa: E402
from test_trace_corpus import LOOPS, steps_of  # noqa: E402
from tradeoff import Stale, peer_figures, peers_line  # noqa: E402
from tradeoff import table as tradeoff_table  # noqa: E402

RECORDED_HEADER = (
    "| {group} | runs | resolved runs killed{dup} | warned | loops flagged by `loop_at` "
    f"| stuck loops stopped by `loop_at + {STUCK_SLACK}` | calls saved on failed runs "
    "| cost-limit runs stopped |\n|---|---|---|---|---|---|---|---|"
)


def recorded_rows(corpus: Corpus) -> list[str]:
    """Per agent (the part of a trace's name before ``__``), then for all runs: the figures
    ``score.py`` prints for the corpus (``benchmarks/corpora/outcomes.py``)."""
    groups: dict[str, list[str]] = {}
    for name in corpus.names:
        groups.setdefault(name.partition("__")[0], []).append(name)
    rows = []
    for group, members in [*sorted(groups.items()), ("all", corpus.names)]:
        o = corpus.outcomes(members)
        dup = f" (+{len(o.dup)})" if o.writes else ""
        label = "**all**" if group == "all" else f"`{group}`"
        rows.append(
            f"| {label} | {len(members)} | {len(o.lost)}/{len(o.won)}{dup} | {len(o.warned)}/{len(o.clean)} "
            f"| {len(o.flagged)}/{len(o.loops)} | {len(o.stopped)}/{len(o.stuck)} | {o.saved} "
            f"| {len(o.limited_stopped)}/{len(o.limited)} |"
        )
    return rows


def _got_out(corpus: Corpus) -> str:
    """How many labelled loops are in runs that resolved their task anyway."""
    o = corpus.outcomes()
    return f"{len(o.loops) - len(o.stuck)} of the {len(o.loops)} labelled loops"


def _pipelines(corpus: Corpus) -> int:
    return len({run["pipeline"] for run in corpus.truth.values()})


def _lengths(corpus: Corpus) -> str:
    calls = sorted(int(run["n_calls"]) for run in corpus.truth.values())  # type: ignore[call-overload]
    return f"median {statistics.median(calls):g} calls, at most {calls[-1]}"


def recorded_table(corpus: Corpus, group: str) -> str:
    dup = " (+ duplicate writes stopped)" if corpus.writes else ""
    return "\n".join([RECORDED_HEADER.format(group=group, dup=dup), *recorded_rows(corpus)])


def _quietly(make: Callable[[int], list[Step]], seeds: range) -> list[Played]:
    import logging

    logging.disable(logging.CRITICAL)
    return [play(make(seed)) for seed in seeds]


def legitimate_rows() -> list[str]:
    rows = []
    for name, make in (("one-tool `bash` agent, 150+ calls", bash_success),
                       ("commands-as-tools agent (open, edit, search_dir, python…)", commands_success)):
        played = _quietly(make, range(SEEDS))
        calls = sum(p.calls for p in played)
        killed = sum(p.killed_at is not None for p in played)
        warned_runs = sum(bool(p.detections) for p in played)
        warnings = sum(len(p.detections) for p in played)
        rows.append(f"| {name} | {len(played)} | {calls:,} | {killed} | {warned_runs} | {warnings} |")
    return rows


def stuck_rows() -> list[str]:
    rows = []
    for shape in sorted(STUCK):
        make, third = STUCK[shape]
        played = _quietly(make, range(SEEDS))
        stops = sorted(p.killed_at for p in played if p.killed_at is not None)
        late = sum(1 for p in played if p.killed_at is None or p.killed_at > third + 2)
        first = min((p.first() for p in played if p.first() is not None), default=None)
        rows.append(f"| {shape} | {len(played)} | {third} | {first} | {stops[0]} to {stops[-1]} | "
                    f"{len(played) - len(stops)} | {late} |")
    searched = _quietly(empty_searches, range(SEEDS))
    firsts = sorted({p.first() for p in searched})
    stops = sorted({p.killed_at for p in searched})
    rows.append(f"| empty-searches (different queries) | {len(searched)} | — | "
                f"{'/'.join(map(str, firsts))} | {'/'.join(map(str, stops))} | "
                f"{sum(p.killed_at is None for p in searched)} | — |")
    return rows


def timing_rows() -> list[str]:
    rows = []
    for trace in LOOPS:
        played = _quietly(lambda _seed, t=trace: steps_of(t), range(1))[0]  # type: ignore[misc]
        first = played.detections[0] if played.detections else None
        flagged = f"{first.call_index} (`{first.layer}`)" if first else "never"
        rows.append(f"| {trace.name} | {trace.source} | {flagged} | {played.killed_at} |")
    return rows


PROGRESS = [
    ("dedup",
     "a repeat whose outcome changed; any repeat after a change of state (a write that succeeded, "
     "other than the same write again); a failing attempt whose arguments differ from the last "
     "ones (below 90% alike), up to the third",
     "the same call with the same outcome and nothing changed since, wherever other calls fall "
     "(the same failure however its message drifts, the same write whatever its receipt); the "
     "same function failing the same way with near-identical arguments; `noop` tools between "
     "them"),
    ("cycle",
     "a lap whose outcomes differ step by step from the lap before; a write or command step with "
     "new arguments",
     "laps with the same outcomes; for polls and for tool-name logs with varying arguments, only "
     "from lap 10"),
    ("progress",
     "a result with a content unit the run had not seen; a write, command or tool of unknown kind "
     "with new arguments that did not fail; a poll; an unknown outcome; an output with no words "
     "(but for a search: an empty answer is \"nothing found\"); `noop` calls are looked through",
     "a result whose every unit was seen (words that echo the query masked for reads, searches and "
     "model calls); the same error template from varied inputs"),
    ("cost_velocity", "as `progress`, over its window", "as `progress`"),
    ("iterations",
     "(built-in cap only) calls with a new result, or new arguments that did not fail as before",
     "repeats, repeated failures, calls that never return"),
]


def progress_table() -> str:
    rows = [f"| `{layer}` | {good} | {bad} |" for layer, good, bad in PROGRESS]
    return "\n".join(["| layer | progress | no progress |", "|---|---|---|", *rows])


def render(check: bool = False) -> str:
    """The page; with ``check``, raise ``Stale`` rather than measure the trade-off figures that
    are not kept for this state of the checkout."""
    same = "\n".join(f"| `{a!s}` | `{b!s}` |".replace("\n", "\\n") for a, b in SAME_MEANING)
    real = "\n".join(f"| `{a!s}` | `{b!s}` |".replace("\n", "\\n") for a, b in REAL_CHANGE)
    peers = peers_line("--detail")
    coding, calling = Corpus.replayed(CORPORA / "real"), Corpus.replayed(CORPORA / "agentdojo")
    default = {"real": coding.outcomes().counts(), "agentdojo": calling.outcomes().counts(),
               "peers": peer_figures(peers)}
    return f"""<!-- generated by scripts/gen_quality_docs.py; do not edit -->
# Detection quality

A loop guard is judged twice: by the legitimate work it stops (the first complaint about every
guard) and by the loops it misses or catches late. This page measures both, with the default
configuration, on scenarios nobody here wrote, on recorded runs of real agents and on runs shaped
like real coding agents'. Every figure is recomputed by `python scripts/gen_quality_docs.py`, and a
test fails when the page is out of date.

## Other loop guards' own test scenarios

86 traces converted from the test suites of DeerFlow, agentguard, OpenHands, Ralph, gemini-cli,
OpenClaw, OpenFang and Hermes, each labelled `loop` (with the call by which a good guard has
flagged it), `legit` or `ambiguous` (in the repository: `benchmarks/corpora/peers/`, with a
README on where each trace came from).
A loop flagged after its deadline counts as late; any detection on a legitimate trace is a false
positive.

```console
$ python benchmarks/corpora/peers/score.py --detail
{peers}
```

## Recorded runs of real coding agents

474 recorded runs of two real coding agents on real repository tasks, in the repository in
`benchmarks/corpora/real/` (the development half; the other half and runs of other agent systems are
kept apart, to check that what is built here generalises): mini-swe-agent with one `bash` tool on
SWE-bench Verified, and SWE-agent with one function per command (`open`, `edit`, `search_dir`,
`find_file`, `mvn`, …) and five models on Multi-SWE-bench. Each run is labelled by mechanical rules
written before any guard was run on them: the call at which it is stuck (`loop_at`: the same call
with the same outcome a third time with no change of state in between, a block of calls repeated
three laps, or the same function failing three times in a row with the same error and arguments
90% alike), whether it resolved its task, and whether it ended at the agent's cost limit.

The labels mark where a run *could* be called stuck; agreeing with them is not the goal. Many
labelled loops end in success anyway (the model re-reads, or starts the task over, then does it):
{_got_out(coding)} here, {_got_out(calling)} in the function-calling
runs below. A kill of a run that would have succeeded costs the whole run, so each run is scored
by its outcome, as the corpus's `score.py` scores it (`benchmarks/corpora/outcomes.py`):

- **resolved runs killed**: runs that resolved their task, killed before their last call, whatever
  their label: lost work. Where the corpus names its write tools (`writes.json`), a kill of a call
  that repeats an identical write that already succeeded (the same payment sent again) prevents
  damage, and is counted apart, in brackets;
- **warned**: resolved runs with no labelled loop that got any detection (a note to the model, not
  lost work: noise);
- **loops flagged by `loop_at`**: labelled loops whose first detection (a warning that reaches the
  model, a skip or a kill) comes at or before `loop_at`;
- **stuck loops stopped by `loop_at + {STUCK_SLACK}`**: labelled loops in runs that failed, killed
  at or before `loop_at + {STUCK_SLACK}`;
- **calls saved on failed runs**: the calls not made, from the first kill on, on the runs that did
  not resolve their task;
- **cost-limit runs stopped**: the runs that ended at the agent's cost limit that were killed.

```console
$ python benchmarks/corpora/real/score.py
{coding.outcomes().summary()}
```

{recorded_table(coding, "agent")}

## Recorded runs of function-calling agents

{len(calling.names):,} recorded runs of AgentDojo's function-calling agent (Debenedetti et al.,
NeurIPS 2024; MIT licence), in the repository in `benchmarks/corpora/agentdojo/`: its *workspace*
(email, calendar, cloud drive) and *banking* tasks, run by {_pipelines(calling)} pipelines of
models from five vendors, some behind a prompt-injection defence (other suites, and runs of other
agent systems, are kept apart). The agent loops model → tools for at most 15 iterations, and a
reply may ask for several calls at once; runs are short ({_lengths(calling)}). The labels
follow the same rules, `writes.json` names the tools that change the world (`send_money`,
`send_email`, `create_calendar_event`, …), and a cost-limit run here is one that used up its 15
iterations. The figures are the ones above, per model pipeline (`adojo-<pipeline>`):

```console
$ python benchmarks/corpora/agentdojo/score.py
{calling.outcomes().summary()}
```

{recorded_table(calling, "pipeline")}

## The trade-off: losing work or letting a loop run

A loop's first detection is a warning that reaches the model; `on_loop` applies when the pattern
persists after the model was told, or at once when the evidence leaves no doubt
([layers](layers.md)). Three knobs move the balance between killing runs that would have got out
by themselves and letting stuck runs go on:

- `early_warnings` (`[defaults]`): how many warnings a pattern gets before `on_loop` applies (0:
  at the first detection);
- `persist_window` (`[defaults]`): a loop detected within this many calls after a warning reached
  the model persists after the model was told (0: only the same pattern detected again counts);
- `streak_threshold` (`[loop_detection]`): the same call with the same outcome this many times back
  to back, nothing else between, acts at once.

Each is varied alone from the built-in defaults (the rows in bold), and every corpus above is
scored by its own scorer: *coding* is the coding-agent runs and *function-calling* the AgentDojo
runs (resolved runs killed, with the duplicate writes stopped in brackets; labelled loops flagged
by `loop_at`; stuck loops stopped by `loop_at + {STUCK_SLACK}`; calls saved on failed runs), *peers*
the other guards' scenarios (loops flagged by their deadline; false positives among the
legitimate traces). With `early_warnings = 0` the guard acts at the first detection. The
reference rows: `on_loop = ["warn", "kill"]` and `["warn", "skip", "kill"]` with `early_warnings = 0` step
through a ladder on each detection of a pattern; `repeat_threshold = 3` allows three identical
calls with the same outcome before the next is a loop (Fuze's count); `on_loop = "warn"` never
kills, so it loses no run and stops no loop.

{tradeoff_table(default, check)}

Why these defaults, read from the table:

- `early_warnings = 1`: acting at the first detection (`0`) kills resolved runs in both recorded
  corpora; one warning first kills none of the coding runs and halves the function-calling ones.
  A second warning changes little here (the persistence rule below stops most loops after one)
  and would let every pattern run once more everywhere else.
- `persist_window = 5`: with `0`, only the same pattern detected again counts, and stuck loops
  that change shape after the warning (a cycle, then a repeat) go on; `3` and `5` agree on these
  runs, and `10` ties warnings to loops too far apart to call one the answer to the other.
- `streak_threshold = 5`: a shorter streak kills resolved runs (a coding agent that ran the same
  `sed -i` four times in a row and went on to succeed; models that re-ask for the same data and
  then answer); a longer one stops fewer stuck function-calling loops in time.

The figures of the rows other than the defaults are kept in `benchmarks/corpora/tradeoff.json`
while the package, the scorers and the corpora stay as they were, and measured again when any of
them changes (`python benchmarks/corpora/tradeoff.py` prints the table).

## Runs shaped like real coding agents'

Two agent shapes, {SEEDS} seeded runs each (`tests/helpers/agent_shapes.py`): a one-tool agent whose
`bash` carries the whole run — exploration with greps that find nothing, a reproduction script that
fails before the fix, edits by `sed -i` and `cat >` that print nothing, fix → re-run rounds that
fail the same way until the fix lands, test runs, a linter that exits non-zero, `git status` between
steps — and a commands-as-tools agent (`open`, `goto`, `search_dir`, `edit`, `python`, `submit`).

| legitimate runs | runs | calls | killed | runs warned | warnings |
|---|---|---|---|---|---|
{chr(10).join(legitimate_rows())}

Stuck runs of the same shapes: the same command failing with only a shell's line counter moving,
the same edit re-applied, an `open`/`search_file` two-step repeated, a build re-run with the same
error and new timestamps, and a search answering "No matches found" to query after query. "Third
repeat" is the call at which the third identical call happens; the bar is a stop within two calls
of it.

| stuck runs | runs | third repeat at | first flag | stopped at | never stopped | stopped late |
|---|---|---|---|---|---|---|
{chr(10).join(stuck_rows())}

## When each loop shape is caught

The loop shapes of `tests/reports/test_trace_corpus.py`, with the best other system's timing for each:

| loop | best other system | first flag | stopped at |
|---|---|---|---|
{chr(10).join(timing_rows())}

## What each layer treats as progress

{progress_table()}

## What is not progress

Results are compared by their skeleton (`fuzeguard._private.meaning.outcome`): volatile keys are left out
by name at any depth (`id`, `*_id`, `uuid`, `*_at`, `timestamp`, `duration*`, `elapsed*`, `*_ms`,
`pid`, `cwd`, `execution_count`, `attempt`, `revision`, camelCase too, plus `volatile_keys` and a
function's `volatile`), values shaped like a uuid, a hex digest or a timestamp are masked, JSON held
in strings is parsed at any depth, and in text the volatile tokens are masked. Each pair below is
one result to the guard:

| one answer | and another |
|---|---|
{same}

and each of these pairs is progress:

| one answer | and the next |
|---|---|
{real}

A result reads as an error — and counts as a failed call — when the tool raised, when its first
line or one of its last three is a traceback, `SomethingError: …`, `error: …`, `fatal: …`, `command
not found` or `No such file or directory`, or when it is a mapping with a non-empty `error`, a
`status` of `"error"`/`"failed"`, `ok`/`success` false, or MCP's `isError`. The output of a command,
a write or a tool of unknown kind is also read between its ends: a `SomethingError: message` line, a
build's `[ERROR]` line, `BUILD FAILURE`, the error a traceback ends with (a read or a search that
shows such a line is showing content). A failure is compared by what failed: its error line (or
the exception's message) with line numbers, positions, counters, session ids and pids masked.

## Fixing a false alarm

Without switching a layer off, from the most targeted:

- declare what the tool is: `kind = "poll"` in `[functions.NAME]` (or `guard(fn, kind="poll")`)
  gives a status check the patience of a poll; `kind = "write"` makes a new "OK" count as progress;
- name the result fields that are not progress: `volatile = ["build_number"]`;
- give the function its own thresholds in `[functions.NAME]`;
- replay your own traces under a candidate config before deploying it ([tuning](tuning.md)).
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/quality.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    args = parser.parse_args(argv)
    try:
        text = render(check=args.check)
    except Stale as stale:
        sys.stderr.write(f"{PAGE.relative_to(ROOT)} is out of date: {stale}\n")
        return 1
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else None
    if current == text:
        return 0
    if args.check:
        sys.stderr.write(f"{PAGE.relative_to(ROOT)} is out of date\n")
        return 1
    PAGE.write_text(text, encoding="utf-8")
    sys.stderr.write(f"{PAGE.relative_to(ROOT)} written\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
