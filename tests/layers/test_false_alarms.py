"""False alarms are defects: legitimate work that the default configuration must never flag.

Every scenario runs through the default layer stack (iterations, dedup, cycle, cost_velocity,
progress, limits) with the default action, kill, and asserts that nothing fires at all.
"""

from __future__ import annotations

import uuid

from scripted import Step, play, words

from fuzeguard._private.configuration.settings import DEFAULT_LAYERS

# No options: the batch scenarios run with the default max_iterations = 25, which a function that
# keeps returning new results is not held to (result-aware iteration cap, docs/layers.md).
BATCH: dict[str, object] = {}


def assert_quiet(steps: list[Step], **options: object) -> None:
    played = play(steps, **options)
    assert played.detections == [], [(d.call_index, d.layer, d.message) for d in played.detections]
    assert played.calls == len(steps)


def test_the_default_stack_is_the_documented_one() -> None:
    assert DEFAULT_LAYERS == ("iterations", "dedup", "cycle", "cost_velocity", "progress", "limits")


def test_polling_with_a_changing_answer() -> None:
    """Hermes/OpenFang exempt polls; result-aware layers need no exemption when the answer moves."""
    steps = [Step("check_status", {"job": "deploy-42"},
                  {"state": "running", "progress": 4 * i, "request_id": str(uuid.uuid4()),
                   "detail": "Rolling out the new version to the cluster, one node at a time"})
             for i in range(24)]
    assert_quiet(steps)


def test_fix_and_retest_cycles_with_changing_results() -> None:
    """Issue 3: edit → run tests → edit → run tests, with different test output each time."""
    steps = []
    for lap in range(11):
        steps.append(Step("edit_file", {"path": "parser.py", "patch": f"--- fix attempt {lap}"},
                          "Patch applied."))
        steps.append(Step("run_tests", {"path": "tests/"},
                          f"{11 - lap} failed, {40 + lap} passed in 3.2s\nFAILED test_case_{lap}"))
    assert_quiet(steps)


def test_read_patch_and_retest_with_changing_file_contents() -> None:
    steps = []
    for lap in range(8):
        steps.append(Step("read_file", {"path": "parser.py"}, words(lap, 40)))
        steps.append(Step("patch", {"path": "parser.py", "diff": f"@@ -{lap} +{lap} @@"},
                          f"Applied hunk at line {lap * 10}."))
        steps.append(Step("run_tests", {}, f"{8 - lap} failed"))
    assert_quiet(steps)


def test_a_batch_over_fifty_distinct_files() -> None:
    steps = []
    for i in range(50):
        steps.append(Step("read_file", {"path": f"src/module_{i}.py"}, words(i, 30)))
    assert_quiet(steps, **BATCH)


def test_a_batch_of_fifty_writes_acknowledged_identically() -> None:
    steps = [Step("write_file", {"path": f"out/report_{i}.md", "content": words(i, 30)},
                  "File written successfully.") for i in range(50)]
    assert_quiet(steps, **BATCH)


def test_a_batch_that_reads_then_writes_each_item() -> None:
    steps = []
    for i in range(20):
        steps.append(Step("read_file", {"path": f"in/{i}.txt"}, words(i, 20)))
        steps.append(Step("write_file", {"path": f"out/{i}.txt", "content": words(i, 20)}, "OK"))
    assert_quiet(steps)


def test_paging_through_one_long_file() -> None:
    steps = [Step("read_file", {"path": "logs/server.log", "offset": 100 * i, "limit": 100},
                  "\n".join(words(1000 + 100 * i + k, 10) for k in range(10))) for i in range(24)]
    assert_quiet(steps)


def test_a_search_refined_several_times_finding_new_results_each_time() -> None:
    steps = []
    seen = [words(k, 6) for k in range(40)]
    for i in range(8):
        hits = seen[3 * i: 3 * i + 5]  # two results overlap the previous page, three are new
        steps.append(Step("web_search", {"query": f"asyncio timeout {'detail ' * i}".strip()},
                          "\n".join(hits)))
        steps.append(Step("web_fetch", {"url": f"https://example.com/{i}"}, words(500 + i, 50)))
    assert_quiet(steps)


def test_repeated_short_acknowledgements() -> None:
    steps = [Step("send_message", {"to": f"user{i % 3}", "text": words(i, 8)},
                  ["OK", "Done", "OK", "Got it"][i % 4]) for i in range(25)]
    assert_quiet(steps)


def test_a_long_code_block_with_repeating_tokens() -> None:
    code = "\n".join(f"    def get_{i}(self):\n        return self._values[{i}]\n" for i in range(200))
    steps = [Step("write_file", {"path": f"gen/accessors_{i}.py", "content": code}, code)
             for i in range(3)]
    steps += [Step("run_tests", {}, f"{i} failed, {200 - i} passed") for i in range(3)]
    assert_quiet(steps)


def test_retrying_after_a_transient_error_that_then_succeeds() -> None:
    steps = [Step("fetch", {"url": "https://api.example.com/items"},
                  error=TimeoutError("read timed out")),
             Step("fetch", {"url": "https://api.example.com/items"}, words(1, 40)),
             Step("fetch", {"url": "https://api.example.com/items?page=2"}, words(2, 40))]
    assert_quiet(steps)


def test_a_batch_where_a_few_distinct_items_fail() -> None:
    steps = []
    for i in range(25):
        if i % 7 == 3:
            steps.append(Step("convert", {"path": f"img/{i}.png"},
                              error=ValueError(f"unsupported colour profile in img/{i}.png")))
        else:
            steps.append(Step("convert", {"path": f"img/{i}.png"}, f"converted img/{i}.png to webp"))
    assert_quiet(steps)


def test_costly_work_that_produces_new_results_is_not_cost_velocity() -> None:
    steps = [Step("ask_llm", {"prompt": f"summarise chapter {i}"}, words(i, 40), cost=2.0)
             for i in range(20)]
    played = play(steps, cost_velocity_threshold=1.0)
    assert played.detections == []
