"""Recording traces: the line format, redaction, truncation, refusals, failures and concurrency."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import Config, ConfigError, LoopDetected, guard
from fuzeguard._private.configuration.settings import VOLATILE_KEYS
from fuzeguard._private.meaning.fingerprint import fingerprint_result
from fuzeguard._private.meaning.values import decode_value, encode_value
from fuzeguard._private.reports.replay import Replayer


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_completed_call_is_one_json_line_with_the_issue_fields(tmp_path: Path) -> None:
    @guard(cost=0.002)
    def web_search(query: str) -> str:
        return f"results for {query}"

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run("r", config=Config(), trace=str(trace)):
        web_search("cats")
        web_search("dogs")
    first, second = _lines(trace)
    assert first["fn"] == "web_search"
    assert first["args"] == {"query": "cats"}
    assert first["result"] == "results for cats"
    assert first["cost"] == 0.002
    assert isinstance(first["ts"], float) and 0 <= first["ts"] <= second["ts"]
    assert "error" not in first and "detections" not in first and "action" not in first
    assert second["args"] == {"query": "dogs"}


def test_each_line_is_on_disk_as_soon_as_its_call_returns(tmp_path: Path) -> None:
    """Flushed per line: a reader sees the call before the run ends."""

    @guard
    def tool(n: int) -> int:
        return n

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)):
        tool(1)
        assert len(_lines(trace)) == 1
        tool(2)
        assert len(_lines(trace)) == 2


def test_a_failed_call_records_its_error_class_and_message(tmp_path: Path) -> None:
    @guard
    def read(path: str) -> str:
        raise FileNotFoundError(f"no such file: {path}")

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)), pytest.raises(FileNotFoundError):
        read("a.txt")
    (line,) = _lines(trace)
    assert line["error"] == "FileNotFoundError: no such file: a.txt"
    assert "result" not in line
    assert len(line["result_fp"]) == 32


def test_a_directory_gets_one_file_per_run_named_by_start_time_and_run_id(tmp_path: Path) -> None:
    @guard
    def tool(n: int) -> int:
        return n

    folder = tmp_path / "traces"
    ids = []
    for _ in range(2):
        with fuzeguard.run(config=Config(), trace=f"{folder}/") as run:
            tool(1)
            ids.append(run.id)
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == 2
    for run_id in ids:
        (name,) = [f for f in files if run_id in f]
        assert name.endswith(f"Z-{run_id}.jsonl")
        assert dt.datetime.strptime(name.split("-")[0], "%Y%m%dT%H%M%SZ")


def test_runs_sharing_one_file_are_told_apart_by_their_run_id(tmp_path: Path) -> None:
    @guard
    def tool(n: int) -> int:
        return n

    trace = tmp_path / "shared.jsonl"
    with fuzeguard.run("a", config=Config(), trace=str(trace)) as a:
        with fuzeguard.run("b", config=Config(), trace=str(trace)) as b:
            tool(1)
        tool(2)
    lines = _lines(trace)
    assert [line["run"] for line in lines] == [b.id, a.id]
    assert lines[0]["run_info"]["name"] == "b" and lines[1]["run_info"]["name"] == "a"


def test_fuze_trace_environment_variable_turns_tracing_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUZE_TRACE", str(tmp_path / "env.jsonl"))

    @guard
    def tool(n: int) -> int:
        return n

    with fuzeguard.run(config=Config()):
        tool(1)
    assert len(_lines(tmp_path / "env.jsonl")) == 1


def test_trace_in_code_wins_over_fuze_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUZE_TRACE", str(tmp_path / "env.jsonl"))

    @guard
    def tool(n: int) -> int:
        return n

    with fuzeguard.run(config=Config(), trace=str(tmp_path / "code.jsonl")):
        tool(1)
    assert (tmp_path / "code.jsonl").exists()
    assert not (tmp_path / "env.jsonl").exists()


def test_killed_and_skipped_calls_get_a_line_saying_so(tmp_path: Path) -> None:
    @guard(on_loop=["skip", "kill"], early_warnings=0)  # about the trace lines, not the grading
    def web_search(query: str) -> str:
        return "same"

    trace = tmp_path / "t.jsonl"
    with pytest.raises(LoopDetected), fuzeguard.run(config=Config(), trace=str(trace)):
        for _ in range(10):
            web_search("q")
    lines = _lines(trace)
    assert [line.get("action") for line in lines] == [None, None, "skip", "kill"]
    skipped, killed = lines[2], lines[3]
    assert "result" not in skipped and "result_fp" not in skipped
    assert skipped["detections"][0]["layer"] == "dedup"
    assert killed["detections"][0]["action"] == "kill"
    # The skipped 3rd call counts as one more repeat: the kill is at the 4th identical call.
    assert killed["detections"][0]["count"] == 4 and killed["detections"][0]["threshold"] == 2


def test_redacted_arguments_never_reach_disk_but_still_fingerprint(tmp_path: Path) -> None:
    @guard(redact=["password", "API_KEY"])
    def login(user: str, password: str, options: dict[str, Any]) -> str:
        return "ok"

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)):
        login("ann", "hunter2", {"api_key": "sk-1", "region": "eu"})
        login("ann", "other-secret", {"api_key": "sk-1", "region": "eu"})
    text = trace.read_text()
    assert "hunter2" not in text and "other-secret" not in text and "sk-1" not in text
    first, second = _lines(trace)
    assert first["args"] == {"user": "ann", "password": "[redacted]",
                             "options": {"api_key": "[redacted]", "region": "eu"}}
    assert first["args"] == second["args"]
    assert first["args_fp"] != second["args_fp"]


def test_record_args_and_results_off_keeps_values_out_but_fingerprints_in(tmp_path: Path) -> None:
    config = Config.from_dict({"defaults": {"record_args": False, "record_results": False}})

    @guard
    def secret(token: str) -> str:
        return f"balance for {token}: 100"

    @guard
    def broken(token: str) -> str:
        raise ValueError(f"bad token {token}")

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=config, trace=str(trace)):
        secret("tok-123")
        with pytest.raises(ValueError):
            broken("tok-456")
    assert "tok-" not in trace.read_text()
    ok, failed = _lines(trace)
    assert "args" not in ok and "result" not in ok
    assert len(ok["args_fp"]) == 32 and len(ok["result_fp"]) == 32
    assert failed["error"] == "ValueError"


def test_huge_results_are_truncated_with_a_marker_and_keep_the_full_fingerprint(
    tmp_path: Path,
) -> None:
    big = "x" * 5000 + "the end"

    @guard(trace_max_result_bytes=1000)
    def dump(n: int) -> Any:
        return big if n == 0 else {"rows": [big, big]}

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)) as run:
        dump(0)
        dump(1)
    text_line, json_line = _lines(trace)
    marker = text_line["result"]
    assert marker == {"$fuze": "truncated", "type": "str", "bytes": len(big), "head": big[:1000]}
    volatile = frozenset(VOLATILE_KEYS)
    assert text_line["result_fp"] == run.public_fp(fingerprint_result(big, volatile)).hex()
    assert json_line["result"]["$fuze"] == "truncated"
    assert json_line["result"]["type"] == "json" and len(json_line["result"]["head"]) == 1000
    assert json_line["result_fp"] == run.public_fp(
        fingerprint_result({"rows": [big, big]}, volatile)
    ).hex()
    assert len(trace.read_text().splitlines()[0]) < 1500


def test_non_json_values_are_written_in_a_tagged_form_that_reads_back() -> None:
    value = {
        "bytes": b"\x00\xff",
        "tuple": (1, "a"),
        "set": {3, 1, 2},
        "when": dt.datetime(2026, 1, 2, 3, 4, 5),
        "nan": float("nan"),
        "inf": float("-inf"),
        "int keys": {1: "one", 2: "two"},
        "nested": [("x", b"y")],
    }
    encoded = encode_value(value)
    assert json.loads(json.dumps(encoded, allow_nan=False)) == encoded
    decoded = decode_value(encoded)
    assert decoded["bytes"] == b"\x00\xff"
    assert decoded["tuple"] == (1, "a")
    assert decoded["set"] == {1, 2, 3}
    assert decoded["when"] == dt.datetime(2026, 1, 2, 3, 4, 5)
    assert decoded["nan"] != decoded["nan"] and decoded["inf"] == float("-inf")
    assert decoded["int keys"] == {1: "one", 2: "two"}
    assert decoded["nested"] == [("x", b"y")]


def test_objects_without_a_json_form_are_written_by_class_and_repr() -> None:
    class Handle:
        __slots__ = ()

        def __repr__(self) -> str:
            return "<Handle 7>"

    cycle: list[Any] = []
    cycle.append(cycle)
    assert encode_value(Handle())["repr"] == "<Handle 7>"
    assert encode_value(cycle) == [{"$fuze": "cycle"}]


def test_an_unwritable_path_logs_one_trace_error_and_never_breaks_the_call(
    tmp_path: Path,
) -> None:
    """Written as root-proof: a path under a regular file can never be created."""
    (tmp_path / "file").write_text("not a directory")
    blocked = str(tmp_path / "file" / "traces") + "/"

    @guard
    def tool(n: int) -> int:
        return n * 2

    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            with fuzeguard.run(config=Config(), trace=blocked):
                assert tool(1) == 2
                assert tool(2) == 4
    errors = [e for e in logs if e["event"] == "fuzeguard.trace_error"]
    assert len(errors) == 1
    assert errors[0]["log_level"] == "error" and "file" in errors[0]["path"]
    assert "cannot write the trace" in errors[0]["message"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full to simulate ENOSPC")
def test_a_full_disk_logs_one_trace_error_and_the_calls_go_on() -> None:
    @guard
    def tool(n: int) -> int:
        return n + 1

    results = []
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            with fuzeguard.run(config=Config(), trace="/dev/full"):
                results += [tool(n) for n in range(5)]
    assert results == [1, 2, 3, 4, 5] * 3
    errors = [e for e in logs if e["event"] == "fuzeguard.trace_error"]
    assert len(errors) == 1
    assert errors[0]["errno"] == 28  # ENOSPC


def test_a_path_that_works_again_gets_its_next_failure_logged(tmp_path: Path) -> None:
    """"Once" means once per failure: after a line was written there, a new failure is news."""
    (tmp_path / "blocker").write_text("")
    target = str(tmp_path / "blocker" / "t.jsonl")

    @guard
    def tool(n: int) -> int:
        return n

    def one_run() -> None:
        with fuzeguard.run(config=Config(), trace=target):
            tool(1)

    with structlog.testing.capture_logs() as logs:
        one_run()
        one_run()
        (tmp_path / "blocker").unlink()
        one_run()
        (tmp_path / "blocker" / "t.jsonl").unlink()
        (tmp_path / "blocker").rmdir()
        (tmp_path / "blocker").write_text("")
        one_run()
    assert len([e for e in logs if e["event"] == "fuzeguard.trace_error"]) == 2


def test_concurrent_calls_write_whole_lines_that_never_interleave(tmp_path: Path) -> None:
    @guard(max_iterations=10_000)
    def tool(worker: int, n: int) -> str:
        return f"{worker}-{n}-" + "y" * 300

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)) as run:
        threads = [threading.Thread(target=run.bind(lambda w=w: [tool(w, n) for n in range(200)]))
                   for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = _lines(trace)
    assert len(lines) == 1600
    assert {(line["args"]["worker"], line["args"]["n"]) for line in lines} == {
        (w, n) for w in range(8) for n in range(200)
    }


def test_a_generator_closed_early_is_recorded_as_interrupted(tmp_path: Path) -> None:
    @guard
    def stream(q: str) -> Any:
        yield from "abc"

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)):
        gen = stream("q")
        next(gen)
        gen.close()
    (line,) = _lines(trace)
    assert line["interrupted"] is True and line["stream"] is True
    assert line["result"] == ["a"]  # what it yielded before it was closed
    assert "result_fp" not in line


def test_a_completed_generator_records_its_chunks_as_a_stream(tmp_path: Path) -> None:
    @guard
    def stream(q: str) -> Any:
        yield from ("x", "y")

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)):
        assert list(stream("q")) == ["x", "y"]
    (line,) = _lines(trace)
    assert line["result"] == ["x", "y"] and line["stream"] is True
    assert "interrupted" not in line


def test_settings_given_in_code_are_written_on_the_first_line_of_each_function(
    tmp_path: Path,
) -> None:
    @guard(on_loop=["warn", "kill"], max_iterations=7)
    def tool(n: int) -> int:
        return n

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace), max_calls=40):
        tool(1)
        tool(2)
    first, second = _lines(trace)
    assert first["guard"] == {"on_loop": ["warn", "kill"], "max_iterations": 7}
    assert first["run_info"]["settings"] == {"max_calls": 40}
    assert "guard" not in second and "run_info" not in second


def test_a_sigkilled_recording_process_leaves_a_trace_whose_every_line_parses(
    tmp_path: Path,
) -> None:
    """Issue 4: killing a recording process with SIGKILL mid-run loses no line already written."""
    trace = tmp_path / "killed.jsonl"
    script = textwrap.dedent(
        f"""
        import fuzeguard
        from fuzeguard import Config, guard

        @guard(max_iterations=10**9)
        def tool(n: int) -> dict:
            return {{"n": n, "text": "z" * (n % 500), "items": list(range(n % 20))}}

        with fuzeguard.run("victim", config=Config(), trace={str(trace)!r}):
            n = 0
            while True:
                tool(n)
                n += 1
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if trace.exists() and trace.stat().st_size > 200_000:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the recording process wrote too little")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    raw = trace.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode("utf-8").splitlines()
    assert len(lines) > 100
    numbers = [json.loads(line)["args"]["n"] for line in lines]
    assert numbers == list(range(len(lines)))


def test_a_parent_s_trace_carries_what_its_subagents_spent_and_replays_to_the_same_kill(
    tmp_path: Path,
) -> None:
    """Cost a subagent's run counts toward its parent reaches the parent's trace as extra_cost
    (a ``CostAdded`` event), so replaying the parent's trace alone stops where live did."""
    from fuzeguard._private.reports.replay import replay

    paid = guard(lambda item: item, name="paid", cost=0.6)
    own = guard(lambda item: item, name="own")
    trace = tmp_path / "parent.jsonl"
    with fuzeguard.run("parent", config=Config(), max_cost=1.0, trace=str(trace)) as parent:
        own("first")
        with fuzeguard.run("child", config=Config(), parent=parent):
            paid("a")
            paid("b")
        with pytest.raises(LoopDetected) as live:
            own("second")
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [line.get("extra_cost") for line in lines] == [None, pytest.approx(1.2)]
    [summary] = replay([str(trace)], Config())
    assert [(k.call, k.detection.layer) for k in summary.kills] == [(2, "limits")]
    assert live.value.detection.layer == "limits"


def test_a_reset_before_the_first_call_is_marked_on_the_first_line(tmp_path: Path) -> None:
    tool = guard(lambda item: item, name="tool")
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(config=Config(), trace=str(trace)) as run:
        run.reset()
        tool(1)
    [line] = [json.loads(text) for text in trace.read_text().splitlines()]
    assert line["reset"] == 1


def test_an_int_too_long_for_decimal_text_is_written_in_hex_and_read_back(tmp_path: Path) -> None:
    """Second review d15: str() refuses ints of more than 4,300 digits; the line was dropped."""
    huge = 10**5000
    assert decode_value(encode_value({"n": huge})) == {"n": huge}
    trace = tmp_path / "t.jsonl"
    tool = guard(lambda x: [x], name="t", layers=["limits"])
    with structlog.testing.capture_logs() as logs, fuzeguard.run(trace=str(trace)):
        tool(huge)
    (line,) = _lines(trace)
    assert decode_value(line["args"]) == {"x": huge} and decode_value(line["result"]) == [huge]
    assert not [e for e in logs if e["log_level"] == "error"]


def test_every_attempted_call_is_written_those_refused_after_the_kill_too(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    tool = guard(lambda x: "same", name="t")
    with fuzeguard.run(trace=str(trace)):
        for _ in range(8):  # warned at the 3rd and 4th identical calls, killed at the 5th
            with pytest.raises(LoopDetected) if _ >= 4 else nullcontext():
                tool(1)
    lines = _lines(trace)
    assert [line.get("action") for line in lines] == [None, None, "warn", "warn"] + ["kill"] * 4
    assert [bool(line.get("detections")) for line in lines[2:]] == [True] * 3 + [False] * 3
    summary = Replayer(Config()).replay_file(str(trace))
    assert (summary.calls, summary.not_evaluated, len(summary.kills)) == (8, 3, 1)


def test_add_cost_of_an_infinite_amount_is_rejected_and_logged(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    tool = guard(lambda x: x, name="t", layers=["limits"])
    with structlog.testing.capture_logs() as logs, fuzeguard.run(trace=str(trace)) as run:
        tool("a")
        fuzeguard.add_cost(float("inf"))
        fuzeguard.add_cost(-(10**400))
        fuzeguard.add_cost(0.5)
        tool("b")
    assert run.stats().cost == 0.5
    assert [e["event"] for e in logs if e["log_level"] == "error"] == [
        "fuzeguard.cost_rejected", "fuzeguard.cost_rejected"
    ]
    assert [line.get("extra_cost") for line in _lines(trace)] == [None, 0.5]


def test_a_cost_function_returning_inf_is_rejected_and_the_call_written(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    tool = guard(lambda x: x, name="t", layers=["limits"], cost=lambda result: float("inf"))
    with structlog.testing.capture_logs() as logs, fuzeguard.run(trace=str(trace)) as run:
        tool(1)
        tool(2)
    assert run.stats().cost == 0.0 and len(_lines(trace)) == 2
    failed = [e for e in logs if e["event"] == "fuzeguard.cost_failed"]
    assert [e["error"] for e in failed] == ["returned inf", "returned inf"]


def test_an_infinite_cost_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected a finite number"):
        guard(lambda x: x, cost=float("inf"))
    with pytest.raises(ConfigError, match="max_cost"):
        Config.from_dict({"defaults": {"max_cost": float("inf")}})


def test_a_value_json_cannot_hold_is_written_as_a_marker_and_the_line_kept(tmp_path: Path) -> None:
    """Two finite costs that add up past the largest float: the line is still written."""
    trace = tmp_path / "t.jsonl"

    @guard(name="t", layers=["limits"])
    def tool(x: int) -> int:
        fuzeguard.add_cost(1e308)
        fuzeguard.add_cost(1e308)
        return x

    with structlog.testing.capture_logs(), fuzeguard.run(trace=str(trace)):
        tool(1)
    (line,) = _lines(trace)
    assert line["cost"] == {"$fuze": "unwritable", "type": "float"} and line["args"] == {"x": 1}
