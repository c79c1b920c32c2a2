"""Run the whole benchmark suite and write ``docs/performance.md``.

    python benchmarks/run.py            # the full suite (a few minutes on a 2-core machine)
    python benchmarks/run.py --quick    # every measurement on small counts, in seconds

Every ratio in the report is taken within this one process run, from medians over repeats. The
suite first checks that verdicts are unchanged (``verdicts.py``), and each measurement asserts that
its guarded calls were counted exactly and did not trip a layer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import subprocess
import sys
import time
from pathlib import Path

import big_inputs
import concurrency
import cost_parts
import growth
import overhead
import peer_ratios
import semantic_baseline
import shared_store
import structlog
import verdicts
from _common import Row, machine

HERE = Path(__file__).resolve().parent
REPLAY = HERE / "replay_throughput.py"
CLI_MD = HERE.parent / "docs" / "cli.md"
DEFAULT_OUTPUT = HERE.parent / "docs" / "performance.md"
REPLAY_BEGIN = "<!-- replay figures: written by python benchmarks/run.py -->"
REPLAY_END = "<!-- end of replay figures -->"

NOTES = """\
## How it is measured

- **Overhead against agentguard**: the three workloads of the overhead section below, each made
  bare, through fuzeguard's default layers and through agentguard's three tool-call guards
  (`agentguard47` on PyPI: `LoopGuard`, `FuzzyLoopGuard` and `RetryGuard`, each asked on every
  call as its documentation shows, the arguments bound by name; `FuzzyLoopGuard`'s count of one
  name set above its window of ten, as fuzeguard's iteration cap is set above the batch); the
  nine batches interleaved and repeated in one process, CPU time. A ratio is fuzeguard's
  overhead over agentguard's on the same calls, taken in one process; the figure is the median
  over three runs, each in a fresh process. The ratios to the floor operation below are shown too;
  they depend on how fast the CPU hashes and encodes JSON against the rest of a guarded call.
- **Overhead**: batches of distinct calls `tool(query, limit)` (a five-word query and an int),
  each batch one run, interleaved with the same calls made bare and with floor operations,
  repeated; the table shows medians. Three workloads with the default layers: one tool returning
  an int (`count`, of kind `other`); one tool of an acknowledging kind returning a short text
  (`convert`, kind `other`: "converted" and the query reversed); and a rotation of three
  read/search tools (`search_docs`, `read_page`, `find_refs`) whose answers are a dozen random
  words, new on every call. Every tool answers something new, so no layer has a reason to fire,
  and every batch asserts none did. *Overhead* is guarded minus bare; the *floor* is
  `blake3(json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()).digest()` of
  the same arguments, the least an argument-fingerprinting guard must do (fuzeguard's own
  `fingerprint()` of them is shown beside it). A batch calls each tool thousands of times, far
  more than a task calls one function, so these rows set `max_iterations` high and the iteration
  layer only checks its count; the rotation is also shown with the built-in cap, where every
  call past a function's 25th judges whether its recent calls were productive. Peers are
  measured on the int tool's calls in the same process, interleaved with the rest
  (`benchmarks/peers.py`): a counter that refuses the third identical call in a row (a blake3 of
  the tool name and the arguments' canonical JSON, compared with the previous call's), alone and
  three of them stacked. None of them reads results. The agents' own guards (DeerFlow's
  middleware among them) are not packages that can be installed on their own; agentguard's
  guards are, and are measured on all three workloads (the first table).
- **Growth**: each call around call 100 and around call 100,000 of one run is timed on its own;
  medians over several runs. Memory is the resident set size after a warm-up of 10% of the calls
  and after the last one, arguments made on the fly.
- **Big inputs**: fingerprint throughput of a string argument of each size; guarded calls carrying
  a distinct 1 MB argument and returning a distinct 100 KB text. The semantic layer's cost is the
  guarded time with only that layer minus the guarded time with no layer, once the window is full:
  the two runs are made in turn and the median of the differences is shown.
- **Concurrency**: 16 threads started together on one run (`run.bind`), then the same with
  `max_calls` set; 1,000 asyncio tasks each in its own run, all making the same 100 calls.
- **Semantic vs difflib**: six 1 KB outputs per case, the sixth a lightly edited copy of an
  earlier one in half of the cases; the baseline is `SequenceMatcher(autojunk=False).ratio()`
  between the latest output and the earlier ones in the window, at the layer's threshold.
- **Shared run (Redis)**: one local redis-server; 1, 4 and 16 worker processes released
  together, each making distinct calls with the default layers, all into one shared run, then 16
  workers each into a shared run of its own; throughput is all calls over the time from the
  first worker's first call to the last worker's last call, and every run checks that the shared
  runs counted every call exactly and nothing fired. Round trips are the scripts Redis ran per
  guarded call (`INFO commandstats`). A call is decided, with the completion of the call before
  it, in one round trip; a worker that another committed before decides again on the state the
  lost round trip brought and commits in a second one. The CPU per call is the workers' (during
  their calls) and redis-server's, over the calls: unlike the throughput, it does not depend on
  what else the machine runs, and the cores divided by it is the most these calls can reach on
  idle cores. Every worker applies every other worker's events to its copy of the run, so a run
  shared by 16 processes costs about 16 times the reading of one call's events per call. The
  limit of the same machine is measured in the same run: as many processes, released the same
  way, each making as many round trips with a bare redis-py client (`INCR`, one key per run);
  the guarded CPU per call over the bare client's is the ratio with a target, the median over
  three turns of the two.
- **Verdicts**: known loops (Fuze dedup, argument spellings, result-aware polling, iteration cap,
  run limit) must still be caught exactly as before, and fingerprints computed before the hot path
  was optimized must still match.

## What was made faster

Profiled with cProfile on the overhead workload; each step is its own commit with its gain.

1. The trace recorder was looked up on every call by merging the whole defaults table to read
   one key; the run now settles it once.
2. The encoder writes strings, ints and flat `{name: plain value}` mappings (the bound arguments
   of most tools) without its per-value method calls: `fingerprint` of the benchmark arguments
   2.6 → 1.45 µs. The bytes are identical to the previous encoder's (checked on 400,000 random
   nested values, with and without volatile keys, and by the fingerprints in `verdicts.py`).
3. Payloads of 64 KiB and more are hashed in place instead of being copied into one encoding, and
   a plan hashes its name prefix without concatenating it to the arguments. On this machine every
   fresh megabyte buffer costs page faults that outweigh hashing it: fingerprinting 1 MB went
   from 1.4 ms to 0.2 ms, and a guarded call with a 1 MB argument from 1.9 ms to about 0.3 ms.
4. `Call`, `Decision` and `CallRecord` are built by a generated constructor that fills their slots
   directly (`fuzeguard/_private/meaning/fastinit.py`) instead of the frozen dataclass `__init__`, which
   goes through `object.__setattr__` per field (`CallRecord` 1.3 → 0.5 µs); `decide()` makes no
   list for calls no layer flags.
5. `fingerprint()` hashes bound arguments and short text results directly, and reuses the
   encodings of mapping keys it has seen (parameter names) from a bounded cache.
6. The default layers settle a quiet call with one look where they can: the run's argument
   index tells `progress` that the latest call was work with arguments new to the history
   (acknowledged, so not stale) and tells `cycle` that the pending call's arguments are new (a
   lap of one function alone cannot repeat it); `progress` settles a result that is new at once
   in one pass over its window; the built-in iteration cap's waiver stops counting once settled;
   the semantic layer's chanting scanner splits passages without a regex. Each fast path is
   compared with the full computation in `tests/meaning/test_cheap_exits.py`.
7. The plain and coroutine shells keep a call's run, plan, call and decision in locals instead of
   a `Pending` object; the run's argument index keeps a small list per fingerprint instead of a
   deque; `cycle` reads its settings once in its cheap exit; `progress` settles a result that
   brings any new content unit without the full judgement; and skeletons remember their verdict
   on each short result key, which JSON results repeat call after call.

8. The default stack's cheap exits are made in one look (`fuzeguard/layers/_quiet.py`): when
   `iterations`, `dedup`, `cycle` and `progress` would each let a call go by its cheap exit, the
   call is decided without asking them one by one; `tests/meaning/test_cheap_exits.py` compares its
   answers with the layers' own on random runs.
9. A quiet plain call has fewer hand-offs between stages: the decision returns at once when
   there is nothing to log or publish, `complete()` books and publishes the record itself, a call
   that adds no cost goes from the wrapper straight to `complete()`, and a number result is
   fingerprinted without `judge_result()`. Python calls per guarded call (cProfile): int result
   63 → 44, short text 88 → 70.
10. Plans remember, per built-in layer class, which optional protocols it takes part in:
    `isinstance` against a runtime-checkable protocol was most of the cost of building a plan
    (1,877 Python calls per plan, now 639), which replay pays per trace.
11. What the layers keep of a short text or a number answered by a function of a fixed
    acknowledging kind (its content units) is extracted when first read, where the next call
    will not read it: in a streak of calls of one function, whose next call the layers settle
    without it (`completion.Deferred`, since replaced by item 14's `LateRecord`).
    `tests/meaning/test_cheap_exits.py` plays random runs both ways and compares every detection and
    record. The int tool's guarded call: 8% cheaper (interleaved runs when it was made).
12. The content feature is given the call's kind (`Feature(..., by_kind=True)`) and computes
    only the variant the layers read for that kind: the words that echo the arguments are masked
    for the kinds whose answers are information only. Replay of the real-run corpus: 3% faster
    (interleaved runs when it was made).
13. A one-line answer of a read or search kind whose words echo the arguments pairs only its
    masked words (its plain pairs went unread): the rotation of three read/search tools about 2%
    cheaper. The semantic layer picks the shingle hashes below its sketch's bound with
    `operator.lt` in C rather than a bound method called per hash: the same sketch, 9% cheaper
    for a 100 KB text. (Interleaved runs when they were made.)
14. Where item 11 kept a result's content when first read, the result itself is judged when
    first read (`completion.LateRecord`): its skeleton and fingerprint are computed the first
    time a layer, a trace or an event reads them, and only whether it reads as an error is read
    at once. The record equals the one built at once, and a copy or pickle of it is one;
    `tests/meaning/test_cheap_exits.py` plays random runs both ways and compares every detection and
    record, and reads late records from eight threads at once. The short-text call: about 35%
    cheaper; the int call: about 7% (interleaved runs when it was made).
15. The combined cheap exit of item 8 also settles a quiet answer to a read or a search (a
    rotation of tools whose answers change): it asks `cycle`'s own cheap exit (`Cycle._lets_go`)
    and `progress`'s once instead of the four layers one by one, and where all but `progress`
    settle a call, only `progress` of the four is asked. The words of the arguments that a
    one-line answer may echo are found in one pass. `tests/meaning/test_cheap_exits.py` compares
    its answers with the layers' own on random runs, reads and searches taking turns among them.
    The rotation of three read/search tools: 4.46x → 3.93x agentguard's overhead (median of 3
    fresh processes each, interleaved with the code before).

Single-threaded timings are CPU time of the process (`time.process_time`), which other processes
on a shared machine cannot inflate with their own time slices; per-call growth timings and the
concurrency figures are wall time.
"""


def _replay(quick: bool) -> list[Row]:
    """Run ``replay_throughput.py`` (owned by the replay command) if it exists; report its output
    (a line ``name: value | target | yes/no`` is a measurement with a target)."""
    if not REPLAY.exists():
        return [Row("6. replay", "replay throughput of a 1,000,000-call trace",
                    "skipped: benchmarks/replay_throughput.py is not in this build")]
    command = [sys.executable, str(REPLAY)] + (["--quick"] if quick else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return [Row("6. replay", "replay_throughput.py", f"failed: {tail[0]}", "runs", False)]
    rows = []
    for line in done.stdout.splitlines():
        name, _, value = line.strip().partition(": ")
        value, *goal = value.split(" | ")
        if name and goal:
            rows.append(Row("6. replay", name, value, goal[0], goal[-1] == "yes"))
        elif name:
            rows.append(Row("6. replay", name, value))
    return rows or [Row("6. replay", "replay_throughput.py", "(no output)")]


def write_replay_figures(rows: list[Row], path: Path = CLI_MD) -> None:
    """Put this run's replay figures between the markers of docs/cli.md (its "Speed" part)."""
    figures = [f"{r.name}: {r.value}" for r in rows if r.section == "6. replay"]
    text = path.read_text(encoding="utf-8")
    start, end = text.find(REPLAY_BEGIN), text.find(REPLAY_END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: the markers {REPLAY_BEGIN!r} and {REPLAY_END!r} are missing")
    block = "\n".join([REPLAY_BEGIN, "```text", *figures, "```", ""])
    path.write_text(text[:start] + block + text[end:], encoding="utf-8")


def render(
    rows: list[Row], quick: bool, seconds: float, overhead_times: dict[str, float],
    facts: dict[str, str],
) -> str:
    lines = [
        "# Performance",
        "",
        "Written by `python benchmarks/run.py`"
        + (" --quick (small counts: a smoke run, not a measurement)" if quick else "")
        + f" on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; the suite took "
        f"{seconds:.0f} s. Ratios are taken within that one run, medians over repeats.",
        "",
        "## Per-call overhead against agentguard",
        "",
        "fuzeguard's default layers against agentguard's three tool-call guards stacked, on the same",
        "calls in the same process (`python benchmarks/peer_ratios.py`; how: below).",
        "",
        *_table([r for r in rows if r.section == peer_ratios.SECTION]),
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in facts.items()),
        "",
        "## Results",
        "",
        *_table([r for r in rows if r.section != peer_ratios.SECTION]),
        "",
    ]
    missed = [r for r in rows if r.met is False]
    if missed:
        lines += ["## Targets missed in this run", ""]
        lines += [f"- {r.section}: {r.name}: {r.value} (target {r.target})." for r in missed]
        lines.append("")
        if any(r.section == peer_ratios.SECTION for r in missed):
            lines += [overhead_note(overhead_times), ""]
    lines.append(NOTES)
    return "\n".join(lines)


def _table(rows: list[Row]) -> list[str]:
    return [
        "| section | measurement | result | target | met |",
        "|---|---|---|---|---|",
        *(f"| {r.section} | {r.name} | {r.value} | {r.target} | {r.verdict} |" for r in rows),
    ]


def overhead_note(t: dict[str, float]) -> str:
    """Where the per-call overhead goes, in this run's own numbers."""
    core = t["core"] - t["bare"]
    layers = t["default"] - t["core"]
    floor = t["stages: floor"]
    stages_int = t["stages: int stages"] / floor
    stages_str = t["stages: string stages"] / floor
    whole_int = t["stages: int whole"] / floor
    whole_str = t["stages: string whole"] / floor
    straight_int = t["stages: int straight"] / floor
    straight_str = t["stages: string straight"] / floor
    rotation = t["core rotation overhead"] / t["floor"]
    target = peer_ratios.TARGETS["rotation"]
    alone = t["agentguard: rotation, progress alone"]
    verdict = (f"the core with that one layer already costs more than the target ({target:g}x)"
               if alone > target else f"the target is {target:g}x")
    return f"""\
The rotation of three read/search tools costs {t["agentguard: rotation"]:.2f}x agentguard's
overhead on the same calls with the default layers, {t["agentguard: rotation, no layer"]:.2f}x
with no layer at all (binding, fingerprints, records, each text judged), and {alone:.2f}x with
the progress layer alone, which reads each text's content units against those of the calls
before it: {verdict}.

Where the overhead goes. With no layer at all, the core costs {core * 1e6:.2f} µs,
{core / t["floor"]:.1f}x the floor by itself: it binds and fingerprints the arguments (in one
pass, with a binder generated per function; its encoding and hash cost less than the floor's, see
section 1), fingerprints the result, builds the frozen `Call`, `Decision` and `CallRecord` that
layers, events and traces receive, takes the run's lock twice (before and after the call, never
across it) and sets the `add_cost()` context. On the int tool the default layers add
{layers * 1e6:.2f} µs more (their own costs: `python benchmarks/layer_costs.py`); each has a
cheap exit that settles an unremarkable call with one or two look-ups. A text result costs more
again: it is masked for volatile tokens and split into content units, so that the layers judge
it by meaning.

Section 1b times each stage of a quiet call on its own, done as the call does it (the default
layers' cheap exits in one look; a result judged when first read where the call defers it).
The stages alone, with nothing to hand the work from one to the next, cost {stages_int:.2f}x
the floor for the int tool and {stages_str:.2f}x for the short text (measured whole in that
section: {whole_int:.2f}x and {whole_str:.2f}x). A loop that does every stage's work for every
call with nothing between the stages, as a guard with no Python-level hand-offs at all would,
costs {straight_int:.2f}x and {straight_str:.2f}x. The rotation of three read/search tools costs
{rotation:.2f}x the floor with no layer at all (the core, and each text result judged: its
skeleton, whether it reads as an error, its fingerprint)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: seconds, not minutes")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help="where to write the report (default: docs/performance.md)")
    options = parser.parse_args(argv)
    # Detections are expected in the verdict and semantic checks; their log lines are not output.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))

    facts = machine()  # the load average before the suite adds its own
    t0 = time.perf_counter()
    rows: list[Row] = verdicts.check()
    overhead_times: dict[str, float] = {}
    peer: dict[str, float] = {}

    def measure_overhead() -> list[Row]:
        got, times = overhead.measure(options.quick)
        overhead_times.update(times)
        return got

    def measure_stages() -> list[Row]:
        got, facts = cost_parts.measure(options.quick)
        overhead_times.update({f"stages: {key}": value for key, value in facts.items()})
        return got

    sections = [
        ("overhead against agentguard", lambda: peer_ratios.measure(options.quick, peer)),
        ("overhead", measure_overhead),
        ("overhead by stage", measure_stages),
        ("growth", lambda: growth.measure(options.quick)),
        ("big inputs", lambda: big_inputs.measure(options.quick)),
        ("concurrency", lambda: concurrency.measure(options.quick)),
        ("semantic vs difflib", lambda: semantic_baseline.measure(options.quick)),
        ("replay", lambda: _replay(options.quick)),
        ("shared run", lambda: shared_store.measure(options.quick)),
    ]
    for name, measure in sections:
        started = time.perf_counter()
        got = measure()
        rows += got
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for row in got:
            print(f"  {row.name}: {row.value} {row.verdict}", file=sys.stderr)
    overhead_times.update({f"agentguard: {key}": value for key, value in peer.items()})
    report = render(rows, options.quick, time.perf_counter() - t0, overhead_times, facts)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(report, encoding="utf-8")
    print(f"wrote {options.output}", file=sys.stderr)
    if not options.quick and options.output.resolve() == DEFAULT_OUTPUT.resolve():
        write_replay_figures(rows)
        print(f"wrote the replay figures of {CLI_MD}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
