"""The semantic layer: Ralph's fuzzy output check, rephrased requests, embeddings, chanting."""

from __future__ import annotations

import pytest
from scripted import Step, bag_of_words_embedding, play, words

import fuzeguard
from fuzeguard import Config, ConfigError, guard
from fuzeguard.layers._similarity import ChantScanner, Text, chant_of, similarity
from fuzeguard.testing import capture_detections

DB_OUTPUTS = [
    "Let me check the database for user information...",
    "I'll query the database to find the user data...",
    "Checking the database for user information...",
]


def outputs(texts: list[str], fn: str = "agent") -> list[Step]:
    """One agent iteration per text, plus the iteration after the last one."""
    steps = [Step(fn, {"iteration": i}, text) for i, text in enumerate(texts)]
    return [*steps, Step(fn, {"iteration": len(texts)}, "Next step: write the report to disk.")]


def sim(a: str, b: str) -> float:
    return similarity(Text.of(a), Text.of(b))


def test_ralph_database_example_is_a_loop() -> None:
    """Ralph: outputs 1-3 of the TypeScript example; #3 is ~91% similar to #1: LOOP DETECTED
    (after the third output, so at the fourth call); #2 is similar to neither."""
    assert sim(DB_OUTPUTS[0], DB_OUTPUTS[2]) >= 0.9
    assert sim(DB_OUTPUTS[0], DB_OUTPUTS[1]) < 0.9
    assert sim(DB_OUTPUTS[1], DB_OUTPUTS[2]) < 0.9
    played = play(outputs(DB_OUTPUTS), layers=["semantic"], on_loop="warn")
    assert played.at("semantic") == [4]


def test_ralph_detects_similar_outputs_test() -> None:
    """Ralph's test "should detect similar outputs": 'Processing the user data...' no loop,
    'Creating the database schema...' no loop, 'Processing user data now...' loop."""
    texts = ["Processing the user data...", "Creating the database schema...",
             "Processing user data now..."]
    played = play(outputs(texts), layers=["semantic"], on_loop="warn")
    assert played.at("semantic") == [4]


def test_ralph_custom_threshold_test() -> None:
    """Ralph's test "should respect custom threshold": 'Hello world' then 'Hello world!' would
    trigger at 0.9 but not at 0.95."""
    assert 0.9 <= sim("Hello world", "Hello world!") < 0.95
    texts = ["Hello world", "Hello world!"]
    strict = play(outputs(texts), layers=["semantic"], similarity_threshold=0.95, on_loop="warn")
    assert strict.detections == []
    default = play(outputs(texts), layers=["semantic"], on_loop="warn")
    assert default.at("semantic") == [3]


def test_ralph_clear_history_test() -> None:
    """Ralph's test "should clear history on reset": 'Same message', clear, 'Same message' is no
    loop (run.reset() is our clearLoopHistory); without the reset it is one."""
    @guard(layers=["semantic"], on_loop="warn")
    def agent(iteration: int) -> str:
        return "Same message"

    with capture_detections() as found, fuzeguard.run() as run:
        agent(1)
        run.reset()
        agent(2)
        agent(3)
    assert found == []
    with capture_detections() as found, fuzeguard.run():
        agent(1), agent(2), agent(3)
    assert [d.call_index for d in found] == [3]


def test_ralph_thresholds_are_ordered_as_documented() -> None:
    """Ralph: 0.85 is looser than the recommended 0.90, 0.95 stricter."""
    texts = ["Deploying the service to production now", "Deploying service to production servers now"]
    assert 0.85 <= sim(*texts) < 0.9
    assert play(outputs(texts), layers=["semantic"], similarity_threshold=0.85,
                on_loop="warn").at("semantic") == [3]
    assert play(outputs(texts), layers=["semantic"], on_loop="warn").detections == []


def test_ok_twice_is_not_a_loop() -> None:
    """Issue 3: short texts do not trip it by accident."""
    played = play(outputs(["OK", "OK", "Done", "OK"]), layers=["semantic"], on_loop="warn")
    assert played.detections == []


def test_two_agents_bouncing_rephrasings_are_caught_at_the_third_call() -> None:
    """Fuze layer 5: ping-pong where two agents bounce variations of one request (A, A', A'')."""
    a = "Please find the email address of user 42."
    a1 = "Find the email address of user 42, please."
    a2 = "Please, find the email address of user 42!"
    steps = [Step("ask_researcher", {"request": a}, a1), Step("ask_planner", {"request": a1}, a2),
             Step("ask_researcher", {"request": a2}, a), Step("ask_planner", {"request": a}, a1)]
    played = play(steps, layers=["semantic"], on_loop="warn")
    assert played.first("semantic") == 3


def test_rephrased_requests_that_keep_getting_the_same_answer_are_a_loop() -> None:
    """Fuze layer 5: "an agent rephrasing the same question", across three tools, no new answer."""
    answer = "No invoices match this customer; the account was closed in 2021 and archived."
    steps = [Step("search_crm", {"q": "Find all open invoices for ACME Corp"}, answer),
             Step("search_billing", {"q": "Find all open invoices for ACME Corp."}, answer),
             Step("search_erp", {"q": "find all open invoices for ACME corp"}, answer)]
    played = play(steps, layers=["semantic"], on_loop="warn")
    assert [(d.call_index, d.pattern[0]) for d in played.detections] == [(3, "requests")]


def test_rephrased_requests_with_new_results_each_time_are_work() -> None:
    """A refined search that finds new results each time is not a loop."""
    steps = [Step("web_search", {"query": f"asyncio timeout handling in python example {i}"},
                  "\n".join(words(10 * i + k) for k in range(3))) for i in range(8)]
    assert play(steps, layers=["semantic"]).detections == []


def test_paging_through_one_long_file_is_work() -> None:
    steps = [Step("read_file", {"path": "src/fuzeguard/very_long_module.py", "offset": 200 * i},
                  "\n".join(words(100 * i + k, 8) for k in range(20))) for i in range(10)]
    assert play(steps, layers=["semantic"]).detections == []


def test_an_output_that_chants_one_passage_is_caught_within_itself() -> None:
    """Issue 3: a model "chanting" the same sentence over and over, in one output."""
    chant = "Here is the summary of the file. " + "I will now check the file again. " * 20
    steps = [Step("ask_llm", {"prompt": "Summarise main.py"}, chant),
             Step("ask_llm", {"prompt": "Summarise main.py briefly"}, "ok")]
    played = play(steps, layers=["semantic"], on_loop="warn")
    assert [(d.call_index, d.pattern) for d in played.detections] == [(2, ("chant", "ask_llm"))]


def test_a_long_code_block_with_repeating_tokens_is_not_chanting() -> None:
    """Issue 3 false alarm: code repeats tokens and short lines, not passages."""
    code = "\n".join(
        f"def handler_{i}(request):\n    if request is None:\n        return None\n"
        f"    value = request.get('field_{i}')\n    return value\n" for i in range(60))
    assert chant_of(code) is None
    steps = [Step("generate_code", {"spec": "handlers"}, code),
             Step("generate_code", {"spec": "more handlers"}, code.replace("handler", "view"))]
    assert play(steps, layers=["semantic"]).detections == []


def test_long_texts_are_compared_by_sketch() -> None:
    """100 KB outputs: a near-copy is caught, a different text is not, and neither is compared with
    a quadratic ratio (the prepared text keeps a sketch, not the text)."""
    base = " ".join(f"token{i % 5000} word{i}" for i in range(10_000))
    assert len(base) > 100_000
    prepared = Text.of(base)
    assert prepared.sketch is not None and prepared.text == ""
    near = base.replace("word5000 ", "changed ")
    other = " ".join(f"other{i} text{i}" for i in range(10_000))
    assert similarity(prepared, Text.of(near)) >= 0.9
    assert similarity(prepared, Text.of(other)) < 0.5
    steps = [Step("fetch", {"url": "https://example.com/a"}, base),
             Step("fetch", {"url": "https://example.com/b"}, near),
             Step("fetch", {"url": "https://example.com/c"}, other)]
    assert play(steps, layers=["semantic"], on_loop="warn").at("semantic") == [3]


def test_embedding_function_in_code_uses_cosine_similarity() -> None:
    """Fuze layer 5: optional embedding similarity; word order does not matter to this embedder."""
    texts = ["the cache was cleared and the server restarted",
             "the server restarted and the cache was cleared"]
    played = play(outputs(texts), layers=["semantic"], embed=bag_of_words_embedding,
                  on_loop="warn")
    assert played.at("semantic") == [3]
    different = ["the cache was cleared and the server restarted",
                 "deploy the new release to the staging cluster tonight"]
    assert play(outputs(different), layers=["semantic"], embed=bag_of_words_embedding).detections == []


def test_embedding_function_from_an_import_path_in_toml() -> None:
    config = Config.from_dict({
        "defaults": {"layers": ["semantic"], "on_loop": "warn"},
        "loop_detection": {"embed": "scripted:bag_of_words_embedding"},
    })

    @guard
    def agent(iteration: int) -> str:
        return "the server restarted and the cache was cleared" if iteration else \
            "the cache was cleared and the server restarted"

    with capture_detections() as found, fuzeguard.run(config=config):
        agent(0), agent(1), agent(2)
    assert [d.call_index for d in found] == [3]


def test_bad_embedding_import_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="embed"):
        Config.from_dict({"loop_detection": {"embed": "no_such_module_here:embed"}})
    with pytest.raises(ConfigError, match="embed"):
        Config.from_dict({"loop_detection": {"embed": "not an import path"}})


def test_chant_scanner_keeps_bounded_state() -> None:
    scanner = ChantScanner()
    assert scanner.feed("x" * 1_000_000) is None
    assert len(scanner._pending) <= 2000


def test_an_embedding_function_that_fails_never_loses_the_call() -> None:
    """SPEC §5 fail-open: the call runs and is recorded; the failure is logged."""
    def broken(text: str) -> list[float]:
        raise RuntimeError("embedding service down")

    @guard(layers=["semantic", "dedup"], embed=broken, on_loop="warn")
    def agent(step: int) -> str:
        return "the same long answer every single time"

    with capture_detections() as found, fuzeguard.run() as run:
        results = [agent(1) for _ in range(4)]
    assert results == ["the same long answer every single time"] * 4
    assert run.stats().calls == 4
    assert [d.layer for d in found] == ["dedup", "dedup"]


def test_long_text_sketches_are_the_same_in_every_process() -> None:
    """Replay runs in another process: the sketch of a long text must not depend on the hash seed,
    or a replayed trace could see other similarities than the live run did."""
    import os
    import subprocess
    import sys

    code = (
        "from fuzeguard.layers._similarity import sketch\n"
        "text = ' '.join(f'word{i % 977} item{i % 131}' for i in range(4000))\n"
        "print(sorted(sketch(text))[:5])\n"
    )
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
