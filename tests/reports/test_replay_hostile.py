"""A trace is data, never code, and one hostile line never ends a replay (SPEC §8).

From an adversarial review: a trace could make ``fuze replay`` import and call ``os.system``
through a recorded ``embed`` setting, and one line nested 100,000 deep, a 400-digit integer, a
20,000-digit duration or endless input ended the whole replay with a traceback, a hang or a
MemoryError.
"""

from __future__ import annotations

import io
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import fuzeguard
from fuzeguard import Config
from fuzeguard._private import cli
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replayed import TraceSummary
from fuzeguard._private.reports.trace_reading import bounded_lines

FUZE = os.path.join(os.path.dirname(sys.executable), "fuze")
GOOD = {"fn": "t", "args": {"q": 1}, "result": "r", "ts": 0.0}


def _write(path: Path, lines: list[dict[str, Any] | str]) -> str:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return str(path)


def _replay(path: str, config: dict[str, Any] | None = None, **kwargs: Any) -> TraceSummary:
    return Replayer(Config.from_dict(config or {}), **kwargs).replay_file(path)


def _messages(summary: TraceSummary) -> list[tuple[int, str]]:
    return [(p.line, p.message) for p in summary.problems]


# --------------------------------------------------------------------------- no code from traces


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable module that leaves a marker file when it is imported or called."""
    marker = tmp_path / "PWNED"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "planted_embedder.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('imported')\n"
        f"def embed(text):\n    Path({str(marker)!r}).write_text('called')\n    return [1.0]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    yield marker
    sys.modules.pop("planted_embedder", None)


def test_an_embed_recorded_in_run_info_is_never_imported(tmp_path: Path, planted: Path) -> None:
    text = "the same long text " * 4
    info = {"version": 1, "id": "r1",
            "settings": {"embed": "planted_embedder:embed", "layers": ["semantic"]}}
    path = _write(tmp_path / "t.jsonl", [
        {"fn": "t", "args": {"q": text}, "result": text, "run": "r1", "run_info": info},
        {"fn": "t", "args": {"q": text + "!"}, "result": text, "run": "r1"},
    ])
    summary = _replay(path)
    assert not planted.exists() and "planted_embedder" not in sys.modules
    assert summary.ignored_settings == {"embed"}


def test_an_embed_recorded_in_a_guard_field_is_never_imported(tmp_path: Path, planted: Path) -> None:
    text = "the same long text " * 4
    path = _write(tmp_path / "t.jsonl", [
        {"fn": "t", "args": {"q": text}, "result": text,
         "guard": {"embed": "planted_embedder:embed", "layers": ["semantic"]}},
        {"fn": "t", "args": {"q": text + "!"}, "result": text},
    ])
    _replay(path)
    assert not planted.exists() and "planted_embedder" not in sys.modules


def test_fuze_replay_of_the_os_system_trace_runs_no_command(tmp_path: Path) -> None:
    """The reproduction as reported: embed = "os:system" with the semantic layer on."""
    marker = tmp_path / "PWNED"
    cmd = f"touch {marker}  # padding"
    info = {"version": 1, "id": "r1", "settings": {"embed": "os:system", "layers": ["semantic"]}}
    trace = _write(tmp_path / "evil.jsonl", [
        {"fn": "t", "args": {"q": cmd}, "result": cmd, "run": "r1", "ts": 0.0, "run_info": info},
        {"fn": "u", "args": {"q": cmd}, "result": cmd,
         "guard": {"embed": "os:system", "layers": ["semantic"]}},
        {"fn": "u", "args": {"q": cmd + " "}, "result": cmd},
    ])
    done = subprocess.run([FUZE, "replay", "--format", "json", trace], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0 and not marker.exists()
    assert all(json.loads(line) for line in done.stdout.splitlines())
    assert "can name code or files are ignored: embed" in done.stderr


def test_a_trace_setting_from_replay_writes_no_file(tmp_path: Path) -> None:
    target = tmp_path / "written-by-replay.jsonl"
    info = {"settings": {"trace": str(target), "max_calls": 1}}
    path = _write(tmp_path / "t.jsonl", [{**GOOD, "run_info": info}, GOOD, GOOD])
    summary = _replay(path)
    assert not target.exists() and summary.ignored_settings == {"trace"}


def test_code_valued_settings_are_noticed_once_per_trace(tmp_path: Path) -> None:
    lines: list[dict[str, Any] | str] = []
    for run in range(5):
        info = {"settings": {"embed": "os:system", "cost": 1.0, "skip_value": "x"}}
        lines.append({**GOOD, "run": f"r{run}", "run_info": info})
    summary = _replay(_write(tmp_path / "t.jsonl", lines))
    assert [m for _, m in _messages(summary)] == [
        "settings recorded in the trace that can name code or files are ignored: cost, embed, "
        "skip_value (replay never imports, calls or writes anything a trace names; set them in "
        "the config given to replay)"
    ]


def test_plain_settings_beside_ignored_ones_still_apply(tmp_path: Path) -> None:
    info = {"settings": {"embed": "os:system", "max_calls": 2}}
    path = _write(tmp_path / "t.jsonl", [{**GOOD, "run_info": info}, GOOD, GOOD])
    summary = _replay(path, {"defaults": {"layers": ["limits"]}})
    assert [(d.call, d.detection.layer) for d in summary.detections] == [(3, "limits")]


def test_the_writer_records_no_setting_that_can_name_code(tmp_path: Path) -> None:
    @fuzeguard.guard(cost=0.5, skip_value="skipped", max_iterations=9)
    def tool(x: int) -> int:
        return x

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace), cost=0.25, max_calls=50):
        tool(1)
    line = json.loads(trace.read_text().splitlines()[0])
    assert line["guard"] == {"max_iterations": 9}
    assert line["run_info"]["settings"] == {"max_calls": 50}


# --------------------------------------------------------------------------- hostile lines

HOSTILE: dict[str, str] = {
    "deep_array": '{"fn":"t","args":{"q":' + "[" * 100_000 + "]" * 100_000 + "}}",
    "deep_object": '{"fn":"t","args":' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}",
    "deep_900_tagged": '{"fn":"t","args":{"q":' + "[" * 900 + '{"$fuze":"tuple","items":[]}'
    + "]" * 900 + "}}",
    "deep_result_text": json.dumps({"fn": "t", "result": "[" * 100_000 + "]" * 100_000}),
    "huge_int_ts": '{"fn":"t","args":{"q":1},"ts":' + "9" * 400 + "}",
    "huge_int_cost": '{"fn":"t","args":{"q":1},"cost":' + "9" * 400 + "}",
    "huge_int_extra_cost": '{"fn":"t","args":{"q":1},"extra_cost":' + "9" * 400 + "}",
    "huge_int_duration": '{"fn":"t","args":{"q":1},"duration":' + "9" * 400 + "}",
    "int_over_4300_digits": '{"fn":"t","args":{"q":' + "9" * 5000 + "}}",
    "nan_and_infinity": '{"fn":"t","args":{"q":1},"ts":Infinity,"cost":-Infinity,"duration":NaN}',
    "redos_duration": json.dumps({"fn": "t", "run_info": {"settings": {"max_duration": "1" * 60_000}}}),
    "redos_duration_guard": json.dumps({"fn": "t", "guard": {"max_duration": "1" * 60_000}}),
    "embed_os_system": json.dumps({"fn": "t", "guard": {"embed": "os:system"}}),
    "bad_types": '{"fn":"t","args":[1],"args_fp":5,"ts":"x","turn":1e308,"reset":null,'
    '"extra_cost":"a","guard":{"layers":[1,{}],"on_loop":5}}',
    "unhashable_run": '{"fn":"t","run":[1,2],"run_info":{"settings":[]}}',
    "not_an_object": "[1, 2, 3]",
    "no_fn": '{"fn": ""}',
    "torn_then_whole": '{"fn":"t","args":{"q":"xxxxxxx' + json.dumps(GOOD),
    "not_json": "this is not json {",
    "bad_tagged_values": '{"fn":"t","args":{"a":{"$fuze":"decimal","value":"1e999999999"},'
    '"b":{"$fuze":"bytes","base64":"!!"},"c":{"$fuze":"dict","items":[[[1],2]]}},"ts":0}',
}
# Lines that are replayed whole although something in them is unusual (no problem): tagged
# values that do not decode stay as they are, and a result whose JSON text is too deep to parse
# is fingerprinted as text.
QUIET = {"bad_tagged_values", "deep_result_text"}


def test_fuze_replay_over_a_directory_of_hostile_traces_reports_each_bad_line_once(
    tmp_path: Path,
) -> None:
    """Each trace: a hostile line, then a good one. Exit 0 or 2, one message per bad line naming
    file and line, no traceback, the good lines replayed, in bounded time and memory."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    for name, line in HOSTILE.items():
        (folder / f"{name}.jsonl").write_text(line + "\n" + json.dumps(GOOD) + "\n")
    (folder / "invalid_utf8.jsonl").write_bytes(
        b'{"fn":"t\xff\xfe","args":{"q":"\xc3\x28"}}\n\xff\xff\n' + json.dumps(GOOD).encode() + b"\n"
    )

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    started = time.monotonic()
    done = subprocess.run([FUZE, "replay", "--no-progress", str(folder)], capture_output=True,
                          text=True, timeout=120, preexec_fn=limit_memory, cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode in (0, 2)
    assert "Traceback" not in done.stderr + done.stdout
    reported = re.findall(rf"^fuze replay: {re.escape(str(folder))}/(\w+)\.jsonl:(\d+): ",
                          done.stderr, flags=re.MULTILINE)
    expected = {(name, "1") for name in HOSTILE if name not in QUIET} | {("invalid_utf8", "2")}
    assert sorted(reported) == sorted(expected)  # each bad line once, nothing else
    calls = sum(int(n) for n in re.findall(r"^\S+: ([\d,]+) calls?,", done.stdout, re.MULTILINE))
    assert calls >= 2 * len(HOSTILE)  # the good line after each hostile one was replayed
    assert elapsed < 60


def test_a_torn_line_reports_the_fragment_and_replays_the_whole_line_after_it(
    tmp_path: Path,
) -> None:
    whole = {"fn": "t", "args": {"q": 1}, "run": "r2", "run_info": {"settings": {"max_calls": 1}}}
    path = _write(tmp_path / "t.jsonl", [
        '{"fn":"w","args":{"i":"' + "x" * 5000 + json.dumps(whole), {**whole, "run_info": None},
    ])
    summary = _replay(path, {"defaults": {"layers": ["limits"]}})
    assert [line for line, _ in _messages(summary)] == [1]
    assert "a torn line: its first 5,023 characters" in summary.problems[0].message
    assert [(d.call, d.detection.layer) for d in summary.detections] == [(3, "limits")]


def test_a_torn_last_line_is_reported_and_every_line_before_it_replayed(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n" + '{"fn":"t","args":{"q"')
    summary = _replay(path)
    assert summary.calls == 3 and [line for line, _ in _messages(summary)] == [3]
    assert "not valid JSON" in summary.problems[0].message


def test_a_line_longer_than_the_limit_is_skipped_and_the_next_one_replayed(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [
        {"fn": "t", "result": "x" * 1500}, {"fn": "u", "args": {"q": 1}},
    ])
    summary = _replay(path, max_line=1000)
    assert _messages(summary) == [
        (1, "a line of 1,525 characters, longer than the 1,000 a trace line may have; line skipped")
    ]
    assert summary.calls == 2


class _Endless(io.TextIOBase):
    """A stream of NUL characters that never ends and never has a newline (/dev/zero)."""

    def __init__(self) -> None:
        self.read_chars = 0

    def readable(self) -> bool:
        return True

    def readline(self, size: int | None = -1) -> str:
        assert size is not None and size > 0, "an unbounded readline on endless input"
        self.read_chars += size
        return "\0" * size


def test_endless_input_without_newlines_stops_after_twice_the_line_limit() -> None:
    stream = _Endless()
    summary = Replayer(Config(), max_line=10_000).replay_lines(bounded_lines(stream, 10_000), "-")
    assert _messages(summary) == [
        (1, "no end of line in 20,001 characters: this is not a trace; the rest of it is not read")
    ]
    assert stream.read_chars <= 30_001


def test_fuze_replay_of_endless_stdin_ends_with_a_message_in_bounded_memory() -> None:
    """``fuze replay -`` < /dev/zero under a 2 GiB address-space limit (before: MemoryError)."""

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    with open("/dev/zero", "rb") as zero:
        done = subprocess.run([FUZE, "replay", "--no-progress", "-"], stdin=zero,
                              capture_output=True, text=True, timeout=120,
                              preexec_fn=limit_memory)
    assert done.returncode == 2, done.stderr[-500:]  # not a trace
    assert "Traceback" not in done.stderr
    assert re.search(r"^fuze replay: -:1: no end of line in [\d,]+ characters: this is not a "
                     r"trace; the rest of it is not read$", done.stderr, re.MULTILINE)


def test_fuze_replay_reads_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A named pipe (``<(zcat old.jsonl.gz)``) is a trace like a file (before: "no such file")."""
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    lines = "".join(json.dumps({"fn": "t", "args": {"q": 1}, "result": "r"}) + "\n"
                    for _ in range(5))

    def feed() -> None:
        with open(fifo, "w") as f:
            f.write(lines)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    status = cli.replay([str(fifo)], fmt="json")
    if writer.is_alive():  # replay never opened the pipe: let the writer's open() return
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    writer.join(timeout=10)
    out = capsys.readouterr().out
    assert status == 0
    # Every line was read: warned at the 3rd and 4th identical call, killed at the 5th.
    assert [(d["call"], d["layer"], d["action"]) for d in map(json.loads, out.splitlines())] == [
        (3, "dedup", "warn"), (4, "dedup", "warn"), (5, "dedup", "kill")
    ]


def test_a_replayed_trace_keeps_a_bounded_number_of_problems(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", ["not json"] * 1500)
    seen: list[object] = []
    summary = Replayer(Config(), on_problem=seen.append).replay_file(path)
    assert (len(summary.problems), summary.problem_count, len(seen)) == (1000, 1500, 1500)


def test_a_run_id_that_is_not_a_string_is_reported_and_the_line_replayed(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{"fn": "t", "run": {"a": 1}}, {"fn": "t"}, {"fn": "t"}])
    summary = _replay(path, {"defaults": {"layers": ["dedup"], "on_loop": "warn"}})
    assert [line for line, _ in _messages(summary)] == [1]
    assert [d.call for d in summary.detections] == [3]


def test_a_trace_of_many_run_ids_replays_with_a_bounded_number_of_open_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fuzeguard._private.reports import replay

    monkeypatch.setattr(replay, "MAX_OPEN_RUNS", 3)
    lines: list[dict[str, Any] | str] = [{"fn": "t", "run": f"r{i}"} for i in range(6)]
    lines += [{"fn": "t", "run": "r5"}] * 2  # r5 is still open: its third call is a loop
    summary = _replay(_write(tmp_path / "t.jsonl", lines), {"defaults": {"layers": ["dedup"]}})
    assert summary.runs == 6
    assert [line for line, _ in _messages(summary)] == [4]
    assert "more than 3 runs open at once" in summary.problems[0].message
    assert [(d.call, d.detection.kind) for d in summary.detections] == [(8, "warning")]


ESCAPES = "\x1b[2J\x1b[32mall clear\x1b[0m\x1b]0;pwned\x07\x9b31m\u202eevil"


def test_replay_text_output_shows_control_characters_from_a_trace_as_escapes(
    tmp_path: Path,
) -> None:
    """Second review d17: recorded names were printed raw, so a trace could clear the screen,
    print fake text in colour and retitle the window of whoever replayed it."""
    path = _write(tmp_path / "t.jsonl", [
        {"fn": "search" + ESCAPES, "args": {"q": 1}, "result": "same", "run": "r" + ESCAPES,
         "ts": float(i)} for i in range(5)
    ] + [{"fn": 7, "run": ESCAPES}])
    out, err = io.StringIO(), io.StringIO()
    cli.replay([path], out=out, err=err, progress=False)
    text = out.getvalue() + err.getvalue()
    assert not any(c in text for c in "\x1b\x07\x9b\u202e")
    assert r"search\x1b[2J\x1b[32mall clear\x1b[0m\x1b]0;pwned\x07\x9b31m\u202eevil" in text


def test_replay_json_output_escapes_the_control_characters_json_leaves_raw(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [
        {"fn": "search" + ESCAPES, "args": {"q": 1}, "result": "same", "ts": float(i)}
        for i in range(5)
    ])
    out = io.StringIO()
    cli.replay([path], fmt="json", out=out, err=io.StringIO(), progress=False)
    assert not any(c in out.getvalue() for c in "\x1b\x9b\u202e")
    assert {json.loads(line)["fn"] for line in out.getvalue().splitlines()} == {"search" + ESCAPES}
