"""The trade-off between killing runs that would have succeeded and letting stuck runs go on: the
figures of the three labelled corpora under each setting of the knobs that move the balance, each
varied alone from the built-in defaults, and under a few reference settings.

    python benchmarks/corpora/tradeoff.py     # print the table (Markdown), measuring what is not kept

Each setting is replayed over every corpus with `python -m fuzeguard` of this checkout and scored by
the corpora's own scorers (``outcomes.py`` for the recorded runs, ``peers/score.py`` for the other
guards' scenarios). That takes minutes, so the figures are kept in ``tradeoff.json`` beside this
file together with a digest of everything they depend on (the fuzeguard package, the scorers, each
corpus's labels and traces): they are reused only while that digest is unchanged, and the whole
table is measured again when anything in it changed (a check of the page does not measure: it
finds the page out of date). The built-in defaults are never taken from there: their row is given
by the caller, measured afresh.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable

from outcomes import CHECKOUT, Corpus

HERE = pathlib.Path(__file__).resolve().parent
KEPT = HERE / "tradeoff.json"
RECORDED = ("real", "agentdojo")  # the corpora of recorded runs, scored by outcomes.py

# A setting: the keys it writes, each (key, value); no keys is the built-in defaults.
Setting = tuple[tuple[str, object], ...]
Figures = dict[str, dict[str, int]]  # corpus -> figure -> number

# The knobs that move the balance, and the values each is tried at (its default is added).
KNOBS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("early_warnings", (0, 1, 2)),
    ("persist_window", (0, 3, 5, 10)),
    ("streak_threshold", (3, 4, 5, 6)),
)
# Settings to read the knobs against: the first detection acted on at once, ladders that warn
# first, Fuze's repeat count, and a guard that only warns (every flag, no kill).
REFERENCES: tuple[Setting, ...] = (
    (("on_loop", ["warn", "kill"]), ("early_warnings", 0)),
    (("on_loop", ["warn", "skip", "kill"]), ("early_warnings", 0)),
    (("repeat_threshold", 3),),
    (("on_loop", "warn"),),
)


def defaults() -> dict[str, object]:
    """Each knob's built-in default, from the settings in code."""
    from fuzeguard._private.configuration.schema import schema

    return {key: schema()[key].default for key, _ in KNOBS}


def settings() -> list[tuple[str, Setting]]:
    """Every setting of the table, each under the knob it varies (or "reference")."""
    default = defaults()
    rows: list[tuple[str, Setting]] = []
    for key, values in KNOBS:
        for value in sorted({*values, default[key]}):  # type: ignore[type-var]
            rows.append((key, () if value == default[key] else ((key, value),)))
    return rows + [("reference", s) for s in REFERENCES]


def toml(setting: Setting) -> str:
    """The fuze.toml that writes ``setting``, each key in its table."""
    from fuzeguard._private.configuration.schema import schema

    tables: dict[str, list[str]] = {}
    for key, value in setting:
        tables.setdefault(schema()[key].section, []).append(f"{key} = {json.dumps(value)}")
    return "".join(f"[{table}]\n" + "\n".join(lines) + "\n" for table, lines in tables.items())


def label(setting: Setting) -> str:
    return ", ".join(f"`{key} = {json.dumps(value)}`" for key, value in setting) or "built-in defaults"


PEERS_LINE = re.compile(r"loops caught on time (\d+)/(\d+) .*false positives (\d+)/(\d+)")


def peers_line(*args: str) -> str:
    """The summary line of the peer corpus's scorer, run with ``args``."""
    done = subprocess.run([sys.executable, str(HERE / "peers" / "score.py"), *args],
                          capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, 1) or not PEERS_LINE.search(done.stdout):
        raise SystemExit(f"the peer corpus's scorer failed: {(done.stdout + done.stderr)[-300:]}")
    return done.stdout.strip().splitlines()[-1]


def peer_figures(line: str) -> dict[str, int]:
    """The figures of a summary line of the peer corpus's scorer."""
    found = PEERS_LINE.search(line)
    assert found is not None, line
    caught, loops, fp, legit = map(int, found.groups())
    return {"caught": caught, "loops": loops, "fp": fp, "legit": legit}


def measure(setting: Setting) -> Figures:
    """Every corpus's figures under ``setting``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "fuze.toml" if setting else None
        if config is not None:
            config.write_text(toml(setting), encoding="utf-8")
        figures = {name: Corpus.replayed(HERE / name, config).outcomes().counts() for name in RECORDED}
        figures["peers"] = peer_figures(peers_line(*(["--config", str(config)] if config else [])))
    return figures


def digest() -> str:
    """What the figures depend on: the package the replays run, the scorers, and the corpora (a
    setting's figures are kept under the text of its fuze.toml)."""
    h = hashlib.sha256()
    files: Iterable[pathlib.Path] = [
        *sorted((CHECKOUT / "fuzeguard").rglob("*")), HERE / "outcomes.py",
        HERE / "peers" / "score.py",
        *sorted(p for name in (*RECORDED, "peers") for p in (HERE / name).rglob("*")
                if p.name in ("truth.json", "writes.json") or p.parent.name == "traces"),
    ]
    for path in (p for p in files if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(CHECKOUT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class Stale(Exception):
    """The kept figures were not measured on this state of the package, scorers and corpora."""


def figures(default: Figures, check: bool,
            progress: Callable[[str], None]) -> list[tuple[str, Setting, Figures]]:
    """Each setting of the table with its figures: the defaults' as given, the others kept, or
    measured and kept in ``tradeoff.json`` for the next time. With ``check``, nothing is measured
    or written: figures that are not kept for this state raise ``Stale``."""
    key = digest()
    kept = json.loads(KEPT.read_text(encoding="utf-8")) if KEPT.exists() else {}
    table: dict[str, Figures] = kept.get("figures", {}) if kept.get("digest") == key else {}
    rows = []
    for knob, setting in settings():
        if not setting:
            rows.append((knob, setting, default))
            continue
        text = toml(setting)
        if text not in table:
            if check:
                raise Stale(f"{KEPT.name} holds no figures of {label(setting)} measured "
                            "on this state of the package, the scorers and the corpora")
            progress(f"measuring {label(setting)}")
            table[text] = measure(setting)
        rows.append((knob, setting, table[text]))
    wanted = {toml(s): table[toml(s)] for _, s in settings() if s}
    if kept != {"digest": key, "figures": wanted}:
        KEPT.write_text(json.dumps({"digest": key, "figures": wanted}, indent=1, sort_keys=True) + "\n",
                        encoding="utf-8")
    return rows


def _ratio(f: dict[str, int], part: str, whole: str) -> str:
    return f"{f[part]}/{f[whole]}"


HEADER = (
    "| setting | coding: resolved runs killed | coding: loops flagged | coding: stuck loops "
    "stopped | coding: calls saved | function-calling: resolved runs killed (+ duplicate writes "
    "stopped) | function-calling: loops flagged | function-calling: stuck loops stopped | "
    "function-calling: calls saved | peers: loops on time | peers: false positives |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def table(default: Figures, check: bool = False, progress: Callable[[str], None] = lambda _: None) -> str:
    """The trade-off table in Markdown, the built-in defaults' rows in bold; ``default``: the
    defaults' figures, measured by the caller; ``check``: as ``figures``."""
    base = defaults()
    lines = [HEADER]
    for knob, setting, f in figures(default, check, progress):
        if knob == "reference":
            text = f"{label(setting)} (reference)"
        else:
            text = f"`{knob} = {json.dumps(dict(setting).get(knob, base[knob]))}`"
            if not setting:
                text = f"**{text} (default)**"
        real, fc, peer = f["real"], f["agentdojo"], f["peers"]
        cells = [
            _ratio(real, "lost", "won"), _ratio(real, "flagged", "loops"), _ratio(real, "stopped", "stuck"),
            str(real["saved"]),
            f"{_ratio(fc, 'lost', 'won')} (+{fc['dup']})", _ratio(fc, "flagged", "loops"),
            _ratio(fc, "stopped", "stuck"), str(fc["saved"]),
            _ratio(peer, "caught", "loops"), _ratio(peer, "fp", "legit"),
        ]
        if not setting:
            cells = [f"**{c}**" for c in cells]
        lines.append(f"| {text} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    default = measure(())
    print(table(default, progress=lambda text: print(text, file=sys.stderr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
