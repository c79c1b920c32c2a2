"""``fuze replay -j N``: traces split across processes give the output of one process, byte for
byte, in every output mode."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fuzeguard import Config
from fuzeguard._private import cli
from fuzeguard._private.cli import common, parser
from fuzeguard._private.reports.replay import Replayer
from fuzeguard._private.reports.replay_pool import replay_files
from fuzeguard._private.reports.replayed import Problem, ReplayedDetection

ROOT = Path(__file__).resolve().parents[2]
CORPORA = [str(ROOT / "benchmarks" / "corpora" / name / "traces") for name in ("peers", "real")]
EXAMPLES = ROOT / "examples" / "traces"


def _replay(*args: str, jobs: int) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    parsed = parser._parser().parse_args(["replay", *args, "-j", str(jobs)])
    if parsed.compare is not None:
        status = cli.compare(parsed.traces, *parsed.compare, fmt=parsed.format, jobs=parsed.jobs,
                             out=out, err=err)
    else:
        status = cli.replay(parsed.traces, config_path=parsed.config, fmt=parsed.format,
                            merge=parsed.merge, jobs=parsed.jobs, out=out, err=err,
                            fail_on_detect=parsed.fail_on_detect)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _no_project_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays here run under the built-in defaults (no fuze.toml found), as the corpora's scores."""
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("FUZE_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize(("fmt", "corpora"), [("json", CORPORA), ("text", CORPORA[:1])])
def test_two_processes_replay_the_corpora_exactly_as_one(fmt: str, corpora: list[str]) -> None:
    """Both corpora in the format their scores read; the text tables on the smaller one."""
    one = _replay(*corpora, "--format", fmt, jobs=1)
    two = _replay(*corpora, "--format", fmt, jobs=2)
    assert two == one
    assert one[1].count("\n") > 40  # the corpora's loops were found


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_two_processes_replay_the_example_traces_exactly_as_one(fmt: str) -> None:
    config = str(EXAMPLES / "live.toml")
    one = _replay(str(EXAMPLES), "--config", config, "--format", fmt, "--fail-on-detect", jobs=1)
    assert _replay(str(EXAMPLES), "--config", config, "--format", fmt, "--fail-on-detect",
                   jobs=2) == one
    assert one[0] == cli.EXIT_DETECTED


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_two_processes_compare_two_configs_exactly_as_one(fmt: str) -> None:
    configs = (str(EXAMPLES / "live.toml"), str(EXAMPLES / "candidate.toml"))
    one = _replay(str(EXAMPLES), "--compare", *configs, "--format", fmt, jobs=1)
    assert _replay(str(EXAMPLES), "--compare", *configs, "--format", fmt, jobs=2) == one
    assert "B stops it 1 call earlier" in one[1]


def test_a_merged_replay_is_the_same_whatever_jobs_says() -> None:
    traces = [str(p) for p in sorted(EXAMPLES.glob("*.jsonl"))]
    assert _replay(*traces, "--merge", jobs=2) == _replay(*traces, "--merge", jobs=1)


def test_problems_in_one_trace_are_reported_in_order_as_with_one_process(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"fn": "search", "args": {"q": 1}}\nnot json\n{"args": {}}\n'
                   '{"fn": "search", "ts": "soon"}\n')
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"fn": "search", "args": {"q": "x"}}) + "\n"
                            for _ in range(4)))
    paths = [str(good), str(bad), str(good), str(bad)]
    one = _replay(*paths, jobs=1)
    assert _replay(*paths, jobs=2) == one
    assert one[2].count("bad.jsonl:2:") == 2 and "bad.jsonl:4:" in one[2]


def test_standard_input_is_replayed_in_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = "".join(json.dumps({"fn": "search", "args": {"q": "x"}}) + "\n" for _ in range(4))
    paths = [str(EXAMPLES / "polling.jsonl"), "-", str(EXAMPLES / "stuck_search.jsonl")]
    outputs = []
    for jobs in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "fuzeguard", "replay", *paths, "--format", "json", "-j", jobs],
            input=trace, capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        outputs.append((done.returncode, done.stdout, done.stderr))
    assert outputs[0] == outputs[1]
    assert '"trace": "-"' in outputs[0][1]


def test_a_trace_that_cannot_be_read_stops_the_replay_in_its_turn(tmp_path: Path) -> None:
    """As one process does: everything before it is reported, nothing after it."""
    found: list[ReplayedDetection | Problem] = []
    replayer = Replayer(Config(), on_detection=found.append, on_problem=found.append)
    first = str(EXAMPLES / "stuck_search.jsonl")
    replayed = replay_files([replayer], [first, str(tmp_path / "gone.jsonl"), first], 2)
    [summary] = next(replayed)
    assert summary.detected and len(found) == summary.detected
    with pytest.raises(FileNotFoundError):
        next(replayed)


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_jobs_must_be_a_whole_number_of_processes(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["replay", str(EXAMPLES), "-j", value]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "-j/--jobs" in err and ("at least 1" in err or "whole number" in err)


def test_small_traces_replay_in_this_process_by_default() -> None:
    assert common._processes(None, 50, 1024) == 1
    assert common._processes(None, 50, common.PARALLEL_BYTES) >= 1
    assert common._processes(4, 2, 0) == 2
    assert common._processes(3, 50, 0) == 3


def test_workers_are_forked_only_from_a_process_that_runs_no_other_thread() -> None:
    from fuzeguard._private.reports import replay_pool

    def start_method() -> str:
        return str(replay_pool._context().get_start_method())

    if threading.active_count() == 1:
        assert start_method() == "fork"
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert start_method() == "forkserver"  # a fork would copy locks the other thread holds
    finally:
        release.set()
        other.join()


@pytest.mark.parametrize("threaded", [False, True])
def test_forked_and_served_workers_give_the_output_of_one_process(threaded: bool) -> None:
    """Each start method, chosen by whether the process runs another thread, in a fresh
    interpreter: the output of two processes is that of one, and what the parent wrote to its
    standard output before the workers started is written once."""
    code = (
        "import sys, threading\n"
        "from fuzeguard._private import cli; from fuzeguard._private.reports import replay_pool\n"
        "if sys.argv[1] == 'threaded':\n"
        "    threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
        "sys.stdout.write('before\\n')\n"
        "method = replay_pool._context().get_start_method()\n"
        "sys.stderr.write(method + '\\n')\n"
        "sys.exit(cli.main(['replay', *sys.argv[3:], '--format', 'json', '-j', sys.argv[2]]))\n"
    )
    outputs = []
    for jobs in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", code, "threaded" if threaded else "plain", jobs, *CORPORA[:1]],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert done.stderr.splitlines()[0] == ("forkserver" if threaded else "fork")
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].count("before\n") == 1 and outputs[0].count('"trace"') > 20


def test_a_replay_process_that_dies_ends_the_replay_with_a_clear_error(tmp_path: Path) -> None:
    """A worker killed while it replays a trace (out of memory, a signal): the replay stops with
    a message that says what happened, from which trace on nothing is reported, and what to do;
    exit status 2. The traces the workers held when it died are lost with the pool, so the
    message names the first trace not reported, not the one that killed the process."""
    code = (
        "import os, sys\n"
        "from fuzeguard._private import cli; from fuzeguard._private.reports import replay_pool\n"
        "replayed = replay_pool._replay_in_worker\n"
        "def dying(path):\n"
        "    if path.endswith('stuck_search.jsonl'):\n"
        "        os._exit(9)\n"
        "    return replayed(path)\n"
        "replay_pool._replay_in_worker = dying\n"
        "sys.exit(cli.main(['replay', *sys.argv[1:], '--format', 'json', '-j', '2']))\n"
    )
    # Each of these traces has a detection to report under the defaults: a trace reported is seen.
    traces = [str(EXAMPLES / name) for name in ("ping_pong.jsonl", "stuck_search.jsonl",
                                                 "spending.jsonl")]
    done = subprocess.run(
        [sys.executable, "-c", code, *traces], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == cli.EXIT_USAGE, done.stderr[-2000:]
    assert "a replay process ended unexpectedly" in done.stderr
    [message] = done.stderr.splitlines()
    reported = [json.loads(line)["trace"] for line in done.stdout.splitlines()]
    assert set(reported) <= {traces[0]}  # nothing from the trace that killed the process on
    first_lost = traces[1] if reported else traces[0]
    assert f"before {first_lost} was reported" in message and "-j 1" in message
