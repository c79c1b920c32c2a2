"""Generate ``docs/quality.md``: detection quality, measured.

Every figure on the page is computed here, from the same scenarios the tests assert on:

* the labelled corpus of other loop guards' test scenarios (``../shared/corpus``, scored with its
  own ``score.py`` and the ``fuze`` of this environment);
* the recorded runs of real coding agents (``../shared/corpus-real``), replayed with ``fuze replay``
  and scored by the rules of their README, per agent;
* runs shaped like real coding agents' (``tests/agent_shapes.py``), many seeds of each shape;
* the loop shapes of ``tests/test_trace_corpus.py``, with the call each is flagged and stopped at;
* the volatile-part examples of ``tests/test_meaning.py``.

``tests/test_quality_docs.py`` fails when the committed page differs from what this writes::

    python scripts/gen_quality_docs.py            # rewrite docs/quality.md
    python scripts/gen_quality_docs.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quality.md"
SCORER = ROOT.parent / "shared" / "corpus" / "score.py"
REAL = ROOT.parent / "shared" / "corpus-real"
SEEDS = 50

sys.path.insert(0, str(ROOT / "tests"))

from agent_shapes import (  # noqa: E402
    STUCK,
    bash_success,
    commands_success,
    empty_searches,
)
from scripted import Played, Step, play  # noqa: E402
from test_meaning import REAL_CHANGE, SAME_MEANING  # noqa: E402
from test_trace_corpus import LOOPS, steps_of  # noqa: E402


def corpus_score() -> str:
    """The scorer's summary line for the default configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUZE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run([sys.executable, str(SCORER)], capture_output=True, text=True, env=env,
                          timeout=600)
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"the corpus scorer printed nothing: {done.stderr.strip()[-300:]}")
    return lines[-1]


REAL_HEADER = (
    "| agent | runs | harmful kills | warned | loops flagged on time | loops stopped on time "
    "| cost-limit runs stopped | calls saved |\n|---|---|---|---|---|---|---|---|"
)


def real_rows() -> list[str]:
    """Per agent of the recorded real runs: what the default configuration does to them, scored
    as ``corpus-real/score.py`` scores them (a kill before the last call of a resolved run with no
    loop is harmful; a loop is flagged by its ``loop_at`` and stopped by ``loop_at + 2``; calls not
    made on runs that hit their cost limit are saved)."""
    import json
    import tempfile

    truth = json.loads((REAL / "truth.json").read_text(encoding="utf-8"))
    names = sorted(truth)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUZE_")}
    found: dict[str, list[dict[str, object]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as empty:
        for i in range(0, len(names), 200):
            done = subprocess.run(
                [sys.executable, "-m", "fuzeguard", "replay", "--format", "json",
                 *[str(REAL / "traces" / n) for n in names[i:i + 200]]],
                cwd=empty, env=env, capture_output=True, text=True, timeout=900,
            )
            if done.returncode not in (0, 1):
                raise SystemExit(f"fuze replay failed: {done.stderr.strip()[-300:]}")
            for line in done.stdout.splitlines():
                if line.strip():
                    item = json.loads(line)
                    found[Path(item["trace"]).name].append(item)

    def first(name: str, actions: tuple[str, ...]) -> int | None:
        calls = [int(d["call"]) for d in found[name] if d["action"] in actions]  # type: ignore[call-overload]
        return min(calls) if calls else None

    groups: dict[str, list[str]] = {}
    for name in names:
        agent, _, _ = name.partition("__")
        groups.setdefault(agent, []).append(name)
    rows = []
    for agent, members in [*sorted(groups.items()), ("all", names)]:
        clean = [n for n in members if truth[n]["loop_at"] is None and truth[n]["outcome"] == "resolved"]
        harm = [n for n in clean if (k := first(n, ("kill",))) is not None and k < truth[n]["n_calls"]]
        warned = [n for n in clean if first(n, ("warn", "skip", "kill")) is not None]
        loops = [n for n in members if truth[n]["loop_at"] is not None]
        flagged = [n for n in loops
                   if (f := first(n, ("warn", "skip", "kill"))) is not None and f <= truth[n]["loop_at"]]
        stopped = [n for n in loops
                   if (k := first(n, ("kill",))) is not None and k <= truth[n]["loop_at"] + 2]
        limited = [n for n in members if truth[n]["limit_exhausted"]]
        saved = [truth[n]["n_calls"] - k + 1 for n in limited if (k := first(n, ("kill",))) is not None]
        label = "**all**" if agent == "all" else f"`{agent}`"
        row = [len(members), len(clean), len(harm), len(warned), len(loops), len(flagged),
               len(stopped), len(limited), len(saved)]
        rows.append(
            f"| {label} | {row[0]} | {row[2]}/{row[1]} | {row[3]}/{row[1]} | {row[5]}/{row[4]} | "
            f"{row[6]}/{row[4]} | {row[8]}/{row[7]} | {sum(saved)} |"
        )
    return rows


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


def render() -> str:
    same = "\n".join(f"| `{a!s}` | `{b!s}` |".replace("\n", "\\n") for a, b in SAME_MEANING)
    real = "\n".join(f"| `{a!s}` | `{b!s}` |".replace("\n", "\\n") for a, b in REAL_CHANGE)
    return f"""<!-- generated by scripts/gen_quality_docs.py; do not edit -->
# Detection quality

A loop guard is judged twice: by the legitimate work it stops (the first complaint about every
guard) and by the loops it misses or catches late. This page measures both, with the default
configuration, on scenarios nobody here wrote and on runs shaped like real coding agents'. Every
figure is recomputed by `python scripts/gen_quality_docs.py`, and a test fails when the page is out
of date.

## Other loop guards' own test scenarios

86 traces converted from the test suites of DeerFlow, agentguard, OpenHands, Ralph, gemini-cli,
OpenClaw, OpenFang and Hermes, each labelled `loop` (with the call by which a good guard has
flagged it), `legit` or `ambiguous` (kept beside the project, in `shared/corpus/`).
A loop flagged after its deadline counts as late; any detection on a legitimate trace is a false
positive.

```console
$ python ../shared/corpus/score.py --detail
{corpus_score()}
```

## Recorded runs of real coding agents

474 recorded runs of two real coding agents on real repository tasks, kept beside the project in
`shared/corpus-real/` (the development half; the other half and runs of other agent systems are
kept apart, to check that what is built here generalises): mini-swe-agent with one `bash` tool on
SWE-bench Verified, and SWE-agent with one function per command (`open`, `edit`, `search_dir`,
`find_file`, `mvn`, …) and five models on Multi-SWE-bench. Each run is labelled by mechanical rules
written before any guard was run on them: the call at which it is stuck (`loop_at`: the same call
with the same outcome a third time with no change of state in between, a block of calls repeated
three laps, or the same function failing three times in a row with the same error and arguments
90% alike), whether it resolved its task, and whether it ended at the agent's cost limit.

A harmful kill stops a resolved run with no loop before its last call; a loop is flagged by its
`loop_at` and stopped by `loop_at + 2`; on the runs that hit their cost limit, every call after the
kill is saved.

{REAL_HEADER}
{chr(10).join(real_rows())}

## Runs shaped like real coding agents'

Two agent shapes, {SEEDS} seeded runs each (`tests/agent_shapes.py`): a one-tool agent whose
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

The loop shapes of `tests/test_trace_corpus.py`, with the best other system's timing for each:

| loop | best other system | first flag | stopped at |
|---|---|---|---|
{chr(10).join(timing_rows())}

## What each layer treats as progress

{progress_table()}

## What is not progress

Results are compared by their skeleton (`fuzeguard._private.outcome`): volatile keys are left out
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
    text = render()
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
