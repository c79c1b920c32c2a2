"""Score recorded runs by their outcomes: what `fuze replay` of this checkout does to each run of a
corpus labelled with `outcome`, `n_calls`, `loop_at` and `limit_exhausted` (``real/`` and
``agentdojo/``; their READMEs give the rules), in the figures their ``score.py`` prints:

  resolved runs killed   runs that resolved their task, killed before their last call, whatever
                         their label: lost work (goal 0). A kill of a call that repeats an
                         identical write that already succeeded (money sent again: writes.json
                         beside traces/ names the write tools, where the corpus has one) prevents
                         damage: it is counted apart, as a duplicate write stopped
  warned                 resolved, loop-free runs that got any warning                  (noise)
  loops flagged          labelled loops with a first warn/skip/kill at or before loop_at
  stuck loops stopped    unresolved labelled loops killed at or before loop_at + 5
  calls saved            calls not made on unresolved runs, from the first kill on (cost-limit
                         runs are reported apart)

The labels come from a mechanical rule that marks where a run *could* be called stuck; agreeing
with it is not the goal. A loop in a run that goes on to succeed should be flagged (a warning
reaches the model) but not killed; a loop that persists in a run that fails should be stopped.

Replays run `python -m fuzeguard` of this checkout (the fuzeguard package two levels up, whatever
`fuze` is on PATH), from an empty working directory with no FUZE_* variables: the built-in
defaults, or the file given with ``--config``.
"""
from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Sequence

CHECKOUT = pathlib.Path(__file__).resolve().parents[2]
STUCK_SLACK = 5
BATCH = 200  # traces per replay command, so that its command line stays short on every system

Detections = dict[str, list[dict[str, object]]]


def replay(trace_dir: pathlib.Path, names: Sequence[str],
           config: pathlib.Path | None = None) -> Detections:
    """Each labelled run's detections (``fuze replay --format json`` objects), by its truth.json
    name (the trace's name without ``.gz``)."""
    cmd = [sys.executable, "-m", "fuzeguard", "replay", "--format", "json"]
    if config is not None:
        cmd += ["--config", str(config.resolve())]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUZE_")}
    env["PYTHONPATH"] = str(CHECKOUT)
    dets: Detections = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as wd:  # an empty directory: no fuze.toml of the project applies
        for i in range(0, len(names), BATCH):
            p = subprocess.run([*cmd, *[str(trace_dir / f"{n}.gz") for n in names[i:i + BATCH]]],
                               cwd=wd, env=env, capture_output=True, text=True, timeout=900)
            if p.returncode not in (0, 1):
                raise SystemExit(f"fuze replay failed ({p.returncode}): {p.stderr[-300:]}")
            for line in p.stdout.splitlines():
                if line.strip():
                    d = json.loads(line)
                    dets[pathlib.Path(d["trace"]).name.removesuffix(".gz")].append(d)
    return dets


@dataclasses.dataclass(frozen=True)
class Outcomes:
    """The runs of a corpus (or of one group of it) sorted by what the guard did to them."""

    won: list[str]          # resolved runs
    lost: list[str]         # resolved runs killed before their last call, not at a duplicate write
    dup: list[str]          # resolved runs killed at a write that repeats one that succeeded
    clean: list[str]        # resolved runs with no labelled loop
    warned: list[str]       # clean runs with any detection
    loops: list[str]        # runs with a loop_at
    flagged: list[str]      # loops with a first detection at or before loop_at
    stuck: list[str]        # loops in unresolved runs
    stopped: list[str]      # stuck loops killed at or before loop_at + STUCK_SLACK
    never: list[str]        # stuck loops never killed
    saved: int              # calls not made on unresolved runs, from the first kill on
    limited: list[str]      # runs that ended at the agent's cost or iteration limit
    limited_stopped: list[str]
    writes: bool            # the corpus names its write tools (duplicate writes are counted apart)

    def summary(self) -> str:
        """The scorer's one line."""
        dup = f" (+{len(self.dup)} stopped at a duplicate write)" if self.writes else ""
        return (f"resolved runs killed {len(self.lost)}/{len(self.won)}{dup}; warned {len(self.warned)}/"
                f"{len(self.clean)}; loops flagged by loop_at {len(self.flagged)}/{len(self.loops)}; "
                f"stuck loops stopped by loop_at+{STUCK_SLACK} {len(self.stopped)}/{len(self.stuck)} "
                f"(never {len(self.never)}); calls saved on unresolved runs {self.saved}; "
                f"cost-limit runs stopped {len(self.limited_stopped)}/{len(self.limited)}")

    def counts(self) -> dict[str, int]:
        """Each figure as a number (the denominators too)."""
        return {"won": len(self.won), "lost": len(self.lost), "dup": len(self.dup),
                "clean": len(self.clean), "warned": len(self.warned), "loops": len(self.loops),
                "flagged": len(self.flagged), "stuck": len(self.stuck), "stopped": len(self.stopped),
                "never": len(self.never), "saved": self.saved, "limited": len(self.limited),
                "limited_stopped": len(self.limited_stopped)}

    def perfect(self) -> bool:
        """No resolved run killed, every loop flagged in time and every stuck loop stopped in time."""
        return not self.lost and self.flagged == self.loops and self.stopped == self.stuck


class Corpus:
    """A labelled corpus directory (truth.json, traces/, and writes.json where it has one) and the
    detections of one replay of it."""

    def __init__(self, here: pathlib.Path, dets: Detections) -> None:
        self.traces = here / "traces"
        self.truth: dict[str, dict[str, object]] = json.loads(
            (here / "truth.json").read_text(encoding="utf-8"))
        wfile = here / "writes.json"
        self.writes = set(json.loads(wfile.read_text(encoding="utf-8"))) if wfile.exists() else set()
        self.names = sorted(self.truth)  # truth.json names each run's trace without the .gz of its file
        self.dets = dets

    @classmethod
    def replayed(cls, here: pathlib.Path, config: pathlib.Path | None = None) -> Corpus:
        """The corpus in ``here``, replayed under ``config`` (default: the built-in defaults)."""
        here = here.resolve()  # the replay runs in an empty directory of its own
        names = sorted(json.loads((here / "truth.json").read_text(encoding="utf-8")))
        missing = [n for n in names if not (here / "traces" / f"{n}.gz").is_file()]
        if missing:
            raise SystemExit(f"{len(missing)} labelled traces missing from {here / 'traces'}, "
                             f"such as {missing[0]}.gz")
        return cls(here, replay(here / "traces", names, config))

    def first(self, name: str, actions: tuple[str, ...]) -> int | None:
        calls = [int(d["call"]) for d in self.dets.get(name, []) if d["action"] in actions]  # type: ignore[call-overload]
        return min(calls) if calls else None

    def _killed_early(self, name: str) -> bool:
        k = self.first(name, ("kill",))
        return k is not None and k < self._n(name)

    def _n(self, name: str) -> int:
        return int(self.truth[name]["n_calls"])  # type: ignore[call-overload]

    def _loop_at(self, name: str) -> int:
        return int(self.truth[name]["loop_at"])  # type: ignore[call-overload]

    def _duplicate_write(self, name: str) -> bool:
        """The killed call repeats an identical write that already succeeded."""
        if not self.writes:
            return False
        with gzip.open(self.traces / f"{name}.gz", "rt", encoding="utf-8") as f:
            calls = [json.loads(line) for line in f if line.strip()]
        k = self.first(name, ("kill",))
        assert k is not None

        def sig(c: dict[str, object]) -> tuple[object, str]:
            return c.get("fn"), json.dumps(c.get("args"), sort_keys=True)

        c = calls[k - 1]
        return c.get("fn") in self.writes and any(sig(e) == sig(c) and not e.get("error")
                                                  for e in calls[:k - 1])

    def outcomes(self, names: Sequence[str] | None = None) -> Outcomes:
        """The figures over ``names`` (default: every run)."""
        names = self.names if names is None else names
        t = self.truth
        flag, kill = ("warn", "skip", "kill"), ("kill",)
        won = [n for n in names if t[n]["outcome"] == "resolved"]
        dup = [n for n in won if self._killed_early(n) and self._duplicate_write(n)]
        loops = [n for n in names if t[n]["loop_at"] is not None]
        stuck = [n for n in loops if t[n]["outcome"] != "resolved"]
        clean = [n for n in won if t[n]["loop_at"] is None]
        limited = [n for n in names if t[n].get("limit_exhausted")]
        return Outcomes(
            won=won,
            lost=[n for n in won if self._killed_early(n) and n not in dup],
            dup=dup,
            clean=clean,
            warned=[n for n in clean if self.first(n, flag) is not None],
            loops=loops,
            flagged=[n for n in loops if (f := self.first(n, flag)) is not None and f <= self._loop_at(n)],
            stuck=stuck,
            stopped=[n for n in stuck
                     if (k := self.first(n, kill)) is not None and k <= self._loop_at(n) + STUCK_SLACK],
            never=[n for n in stuck if self.first(n, kill) is None],
            saved=sum(self._n(n) - k + 1 for n in names
                      if t[n]["outcome"] != "resolved" and (k := self.first(n, kill)) is not None),
            limited=limited,
            limited_stopped=[n for n in limited if self.first(n, kill) is not None],
            writes=bool(self.writes),
        )

    def detail(self, o: Outcomes) -> list[str]:
        """Each resolved run killed, each loop not flagged in time, each stuck loop not stopped in time."""
        t, lines = self.truth, []
        for n in o.lost:
            layer = next(d.get("layer") for d in self.dets[n] if d["action"] == "kill")
            label = "loop-free" if t[n]["loop_at"] is None else f"labelled loop at {t[n]['loop_at']}"
            lines.append(f"resolved run killed ({label}) {n} at call {self.first(n, ('kill',))} of "
                         f"{t[n]['n_calls']} by {layer}")
        for n in o.loops:
            if n not in o.flagged:
                lines.append(f"loop not flagged in time {n} loop_at {t[n]['loop_at']} first flag "
                             f"{self.first(n, ('warn', 'skip', 'kill'))} | {str(t[n]['why'])[:100]}")
        for n in o.stuck:
            if n not in o.stopped:
                lines.append(f"stuck loop not stopped in time {n} loop_at {t[n]['loop_at']} first kill "
                             f"{self.first(n, ('kill',))} | {str(t[n]['why'])[:100]}")
        return lines


def main(here: pathlib.Path, argv: list[str]) -> int:
    """A corpus's ``score.py``: the summary line (and with ``--detail`` each run that is not right);
    exit 0 only when the figures are perfect, 2 when the corpus or the replay is broken."""
    config = None
    if "--config" in argv:
        given = argv[argv.index("--config") + 1:][:1]
        if not given or not pathlib.Path(given[0]).is_file():
            got = given[0] if given else "none"
            print(f"--config needs the path of a fuze.toml to replay under (got {got})")
            return 2
        config = pathlib.Path(given[0])
    try:
        corpus = Corpus.replayed(here, config)
    except SystemExit as broken:
        print(broken)
        return 2
    o = corpus.outcomes()
    if "--detail" in argv:
        for line in corpus.detail(o):
            print(line)
    print(o.summary())
    return 0 if o.perfect() else 1
