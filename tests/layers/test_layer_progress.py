"""The progress layer: different inputs, same output (Fuze layer 4)."""

from __future__ import annotations

import pytest
from scripted import Step, play, words

from fuzeguard import Config, ConfigError
from fuzeguard.layers._content import LARGE, NEUTRAL, content_of, error_template

ANSWER = "Python's asyncio.wait_for raises TimeoutError when the awaited task takes too long."


def varied_failures(n: int, error: type[Exception] = RuntimeError) -> list[Step]:
    return [Step("terminal", {"command": f"./check_release.sh --version 2.{i}"},
                 error=error("Command failed with exit status 1")) for i in range(n)]


def test_same_error_with_varied_inputs_is_warned_at_the_sixth_call_and_stopped_at_the_tenth() -> None:
    """Hermes loop guard issue: "retrying a terminal command that keeps failing" with small
    variations. A failing call with new arguments is exploration at first (issue: errors are
    judged by what was tried), so four repeats of the same error come before the warning."""
    played = play(varied_failures(12), layers=["progress"])
    assert played.at("progress", "warning") == [6, 7, 8, 9]
    assert played.killed_at == 10


def test_errors_that_echo_their_input_are_the_same_error() -> None:
    """Errors are compared by class and message template: the file name in the message varies."""
    steps = [Step("read_file", {"path": f"src/mod{i}.py"},
                  error=FileNotFoundError(f"[Errno 2] No such file or directory: 'src/mod{i}.py'"))
             for i in range(12)]
    played = play(steps, layers=["progress"])
    assert played.first("progress") == 6
    assert played.killed_at == 10


def test_two_errors_in_turn_are_an_error_loop() -> None:
    """Issue 3: an agent that alternates between two errors is stuck as well."""
    errors = [ValueError("invalid JSON in request body"), KeyError("missing field 'name'")]
    steps = [Step("call_api", {"body": f"attempt {i}"}, error=errors[i % 2]) for i in range(12)]
    played = play(steps, layers=["progress"])
    assert played.at("progress", "warning") == [7, 8, 9, 10]
    assert played.killed_at == 11


def test_different_inputs_same_output_is_stuck() -> None:
    """Fuze layer 4: "agents that get slightly different inputs but produce the same output"."""
    steps = [Step("ask_docs", {"question": f"how do I set a timeout, take {i}"}, ANSWER)
             for i in range(12)]
    played = play(steps, layers=["progress"])
    assert played.first("progress", "warning") == 6
    assert played.killed_at == 10


def test_a_search_that_keeps_finding_nothing_is_caught_at_any_length() -> None:
    """The commonest agent loop: "No results found." to query after query. Short answers are
    content: the 6th search is warned and the 10th stopped."""
    steps = [Step("web_search", {"query": f"fuzeguard release {i}"}, "No results found.")
             for i in range(20)]
    played = play(steps, layers=["progress"])
    assert played.first("progress", "warning") == 6
    assert played.killed_at == 10


def test_four_empty_searches_before_one_that_finds_something_are_exploration() -> None:
    steps = [*[Step("search_dir", {"term": f"term{i}"}, "No matches found.") for i in range(4)],
             Step("search_dir", {"term": "LoopGuard"}, "Found 3 matches in src/guard.py"),
             Step("open", {"path": "src/guard.py"}, ANSWER)]
    assert play(steps, layers=["progress"]).detections == []


def test_a_write_that_fails_the_same_way_twice_is_warned_at_once() -> None:
    """Hermes: a non-tolerant tool (a send, a write) that fails the same way for different
    recipients hits a systemic failure; the third attempt gets a warning."""
    steps = [Step("send_message", {"to": f"user{i}"}, error=ConnectionError("no route to host"))
             for i in range(4)]
    played = play(steps, layers=["progress"], on_loop="warn")
    assert played.first("progress", "warning") == 3


def test_empty_outputs_of_shell_commands_are_no_evidence() -> None:
    """A shell agent edits with `sed -i` and creates files with `cat >`: silence is no repeat."""
    steps = [Step("bash", {"command": f"sed -i 's/a{i}/b{i}/' src/x.py"}, "") for i in range(30)]
    assert play(steps, layers=["progress"]).detections == []


def test_volatile_fields_do_not_make_a_repeated_answer_new() -> None:
    """SPEC §3: a poll whose answer never changes but carries a fresh request id is no progress."""
    steps = [Step("get_build", {"job": "build-7", "attempt": i},
                  {"state": "queued", "detail": "The build is waiting for a free runner to start",
                   "request_id": f"req-{i}", "timestamp": 1700000000 + i}) for i in range(12)]
    played = play(steps, layers=["progress"])
    assert played.killed_at == 10


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
    pages = [hits, hits[1:3], [hits[0], hits[3]], hits[0:2], hits[2:4], hits[1:3]] * 2
    steps = [Step("search", {"query": f"asyncio timeout variant {i}"}, "\n".join(page))
             for i, page in enumerate(pages)]
    played = play(steps, layers=["progress"], on_loop="warn")
    assert played.first("progress", "warning") == 6
    assert played.first("progress", "loop") == 10


def test_switching_to_another_tool_is_not_flagged() -> None:
    """A call to a function outside the stuck window is the agent trying something else."""
    asked = [Step("ask_docs", {"question": f"take {i}"}, ANSWER) for i in range(5)]
    steps = [*asked, Step("final_answer", {"text": "Use asyncio.wait_for with a timeout."}, "done")]
    assert play(steps, layers=["progress"]).detections == []
    again = [*asked, Step("ask_docs", {"question": "take 5"}, ANSWER)]
    assert play(again, layers=["progress"]).at("progress") == [6]


def test_exact_repeats_are_left_to_dedup() -> None:
    """The same call with the same result is dedup's to report: never reported twice."""
    steps = [Step("ask_docs", {"question": "timeouts"}, ANSWER) for _ in range(8)]
    assert play(steps, layers=["progress"]).detections == []


def test_long_results_are_compared_by_fingerprint_only() -> None:
    """Results above the size limit keep no content units: identical ones are stuck, ones with one
    new line are not (near-copies of long texts are the semantic layer's job)."""
    big = "\n".join(words(i) for i in range(400))
    assert content_of(big, None) == LARGE
    same = [Step("fetch", {"url": f"https://example.com/?v={i}"}, big) for i in range(12)]
    assert play(same, layers=["progress"]).killed_at == 10
    grown = [Step("fetch", {"url": f"https://example.com/?v={i}"}, big + f"\nnew item {i}")
             for i in range(6)]
    assert play(grown, layers=["progress"]).detections == []


def test_content_of_wordless_results_is_neutral_and_short_ones_count() -> None:
    assert content_of("OK", None) == frozenset({"OK"})
    assert content_of("No results found.", None) == frozenset({("No", "results"), ("results", "found")})
    assert content_of("", None) is NEUTRAL
    assert content_of("╭─╭─╭─╭─", None) is NEUTRAL
    assert content_of(None, None) is NEUTRAL


def test_error_template_masks_what_echoes_the_input() -> None:
    assert error_template(FileNotFoundError("No such file: 'a.py'")) == error_template(
        FileNotFoundError("No such file: 'b/c.py'"))
    assert error_template(ValueError("bad 1")) != error_template(KeyError("bad 1"))


def test_a_warn_window_of_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="progress_warn_window"):
        Config.from_dict({"loop_detection": {"progress_warn_window": 1}})


def test_early_warning_can_be_switched_off() -> None:
    steps = [Step("send_message", {"to": f"user{i}"}, error=ConnectionError("no route to host"))
             for i in range(12)]
    played = play(steps, layers=["progress"], progress_warn_window=0, on_loop="warn")
    assert played.first("progress", "warning") == 6


def test_a_result_that_cannot_be_read_is_no_evidence() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert content_of(Unprintable(), None) is NEUTRAL
    steps = [Step("tool", {"n": i}, Unprintable()) for i in range(8)]
    assert play(steps, layers=["progress"]).detections == []
