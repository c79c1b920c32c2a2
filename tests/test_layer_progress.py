"""The progress layer: different inputs, same output (Fuze layer 4)."""

from __future__ import annotations

import pytest
from scripted import Step, play, words

from fuzeguard import Config, ConfigError
from fuzeguard.layers._content import LARGE, NEUTRAL, content_of, error_template

ANSWER = "Python's asyncio.wait_for raises TimeoutError when the awaited task takes too long."


def varied_failures(n: int, error: type[Exception] = RuntimeError) -> list[Step]:
    return [Step("terminal", {"command": f"pip install requests=={i}"},
                 error=error("Command failed with exit status 1")) for i in range(n)]


def test_same_error_with_varied_inputs_is_warned_after_third_and_stopped_after_fifth() -> None:
    """Hermes loop guard issue: "retrying a terminal command that keeps failing" with small
    variations; the third occurrence of the same error is flagged (OpenFang/Hermes warn at 3)."""
    played = play(varied_failures(10), layers=["progress"])
    assert played.at("progress", "warning") == [4, 5]
    assert played.killed_at == 6


def test_errors_that_echo_their_input_are_the_same_error() -> None:
    """Errors are compared by class and message template: the file name in the message varies."""
    steps = [Step("read_file", {"path": f"src/mod{i}.py"},
                  error=FileNotFoundError(f"[Errno 2] No such file or directory: 'src/mod{i}.py'"))
             for i in range(8)]
    played = play(steps, layers=["progress"])
    assert played.first("progress") == 4
    assert played.killed_at == 6


def test_two_errors_in_turn_are_an_error_loop() -> None:
    """Issue 3: an agent that alternates between two errors is stuck as well."""
    errors = [ValueError("invalid JSON in request body"), KeyError("missing field 'name'")]
    steps = [Step("call_api", {"body": f"attempt {i}"}, error=errors[i % 2]) for i in range(8)]
    played = play(steps, layers=["progress"])
    assert played.at("progress", "warning") == [5]
    assert played.killed_at == 6


def test_different_inputs_same_output_is_stuck() -> None:
    """Fuze layer 4: "agents that get slightly different inputs but produce the same output"."""
    steps = [Step("ask_docs", {"question": f"how do I set a timeout, take {i}"}, ANSWER)
             for i in range(8)]
    played = play(steps, layers=["progress"])
    assert played.first("progress", "warning") == 4
    assert played.killed_at == 6


def test_volatile_fields_do_not_make_a_repeated_answer_new() -> None:
    """SPEC §3: a poll whose answer never changes but carries a fresh request id is no progress."""
    steps = [Step("job_status", {"job": "build-7", "attempt": i},
                  {"state": "queued", "detail": "The build is waiting for a free runner to start",
                   "request_id": f"req-{i}", "timestamp": 1700000000 + i}) for i in range(8)]
    played = play(steps, layers=["progress"])
    assert played.killed_at == 6


def test_polling_a_status_that_changes_is_progress() -> None:
    """Fuze/Hermes poll exemption, made unnecessary: a status whose value moves is new content."""
    steps = [Step("job_status", {"job": "build-7", "attempt": i},
                  {"state": "running", "detail": "The build is running its test suite now",
                   "progress": 10 * i, "request_id": f"req-{i}"}) for i in range(10)]
    assert play(steps, layers=["progress"]).detections == []


def test_a_batch_over_distinct_items_is_progress() -> None:
    steps = [Step("read_file", {"path": f"docs/page{i}.md"}, words(i)) for i in range(50)]
    assert play(steps, layers=["progress"]).detections == []


def test_acknowledgements_are_no_evidence() -> None:
    """Fifty writes that each answer "File written successfully." are a batch, not a loop."""
    steps = [Step("write_file", {"path": f"out/{i}.txt", "text": words(i)},
                  "File written successfully.") for i in range(50)]
    assert play(steps, layers=["progress"]).detections == []


def test_results_that_only_repeat_what_the_window_had_bring_nothing_new() -> None:
    """Fuze layer 4, "no new tokens": refined searches that only return results already seen."""
    hits = ["Timeouts in asyncio explained for beginners", "Using wait_for with tasks and futures",
            "Cancelling slow coroutines the safe way", "The asyncio timeouts cookbook, 2nd edition"]
    pages = [hits, hits[1:3], [hits[0], hits[3]], hits[0:2], hits[2:4], hits[1:3]]
    steps = [Step("search", {"query": f"asyncio timeout variant {i}"}, "\n".join(page))
             for i, page in enumerate(pages)]
    played = play(steps, layers=["progress"], on_loop="warn")
    assert played.first("progress", "warning") == 4
    assert played.first("progress", "loop") == 6


def test_switching_to_another_tool_is_not_flagged() -> None:
    """A call to a function outside the stuck window is the agent trying something else."""
    steps = [*[Step("ask_docs", {"question": f"take {i}"}, ANSWER) for i in range(4)],
             Step("final_answer", {"text": "Use asyncio.wait_for with a timeout."}, "done")]
    assert play(steps, layers=["progress"]).at("progress") == [4]


def test_exact_repeats_are_left_to_dedup() -> None:
    """The same call with the same result is dedup's to report: never reported twice."""
    steps = [Step("ask_docs", {"question": "timeouts"}, ANSWER) for _ in range(8)]
    assert play(steps, layers=["progress"]).detections == []


def test_long_results_are_compared_by_fingerprint_only() -> None:
    """Results above the size limit keep no content units: identical ones are stuck, ones with one
    new line are not (near-copies of long texts are the semantic layer's job)."""
    big = "\n".join(words(i) for i in range(400))
    assert content_of(big, None) == LARGE
    same = [Step("fetch", {"url": f"https://example.com/?v={i}"}, big) for i in range(6)]
    assert play(same, layers=["progress"]).killed_at == 6
    grown = [Step("fetch", {"url": f"https://example.com/?v={i}"}, big + f"\nline {i}")
             for i in range(6)]
    assert play(grown, layers=["progress"]).detections == []


def test_content_of_short_and_empty_results_is_neutral() -> None:
    assert content_of("OK", None) is NEUTRAL
    assert content_of(None, None) is NEUTRAL
    assert content_of({"ok": True}, None) is NEUTRAL
    assert content_of(words(1), None) != NEUTRAL


def test_error_template_masks_what_echoes_the_input() -> None:
    assert error_template(FileNotFoundError("No such file: 'a.py'")) == error_template(
        FileNotFoundError("No such file: 'b/c.py'"))
    assert error_template(ValueError("bad 1")) != error_template(KeyError("bad 1"))


def test_warn_window_above_window_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="progress_warn_window"):
        Config.from_dict({"loop_detection": {"progress_window": 3, "progress_warn_window": 4}})


def test_early_warning_can_be_switched_off() -> None:
    played = play(varied_failures(8), layers=["progress"], progress_warn_window=0)
    assert played.at("progress", "warning") == [5]
    assert played.killed_at == 6


def test_a_result_that_cannot_be_read_is_no_evidence() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert content_of(Unprintable(), None) is NEUTRAL
    steps = [Step("tool", {"n": i}, Unprintable()) for i in range(8)]
    assert play(steps, layers=["progress"]).detections == []
