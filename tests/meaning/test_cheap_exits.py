"""Cheap exits and fast paths give exactly what the full computation gives."""

from __future__ import annotations

import copy
import dataclasses
import heapq
import pickle
import random
import re
import threading
import zlib
from collections.abc import Callable
from typing import Any

import pytest

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.judging import completion
from fuzeguard._private.judging.completion import LateRecord, _late_by_class, _late_by_slots, judged
from fuzeguard._private.judging.layer import Feature, RunView
from fuzeguard._private.meaning import outcome
from fuzeguard._private.meaning.fingerprint import fingerprint
from fuzeguard._private.meaning.kinds import KINDS
from fuzeguard._private.meaning.outcome import mask_text, reads_as_error, skeleton
from fuzeguard._private.meaning.records import IN_FLIGHT, Call, CallRecord, Detection
from fuzeguard.layers import Cycle, Dedup, Iterations, Progress, Semantic
from fuzeguard.layers._content import CONTENT, content_of, echo_of, observe
from fuzeguard.layers._evidence import INFORMING
from fuzeguard.layers._quiet import quiet_check
from fuzeguard.layers._similarity import SKETCH_SIZE, Chant, ChantScanner, sketch, sketch_similarity
from fuzeguard.layers.iterations import DEFAULT_CAP, MIN_EVIDENCE, PRODUCTIVE_SHARE, WAIVER_WINDOW


def _mask_everything(text: str) -> str:
    """``mask_text`` of a short text with every pattern applied, none skipped by a pre-test."""
    if not re.search(r"\d", text):
        return text
    text = outcome._VOLATILE_TOKEN.sub(outcome._hex, text)
    text = outcome._WORD_LED.sub("_", text)
    return outcome._SHELL_LINE.sub("_", text)


TOKENS = [
    "pid", "PID", "Pid", "attempt", "Retry", "rev", "REV", "Revision", "run", "Run", "job",
    "Session", "build", "In", "Out", "Cell In", "[", "]", "12", "3", " ", "=", ":", "#", "id", "ID",
    "Id", "messageId", "request_id", "/tmp/", "/var/folders/", "abc", "deadbeef", "0x1f2e3d4c",
    "2024-01-02T03:04:05Z", "12:30:01", "0.52s", "120 ms", "line ", "\n", "Error", "error:",
    "fatal:", "FATAL:", "Traceback (most recent call last)", "command not found", "x" * 1500,
    "ValueError: bad", "No such file or directory", "denied", "Exit", "\u0130", "\u03a3", "{",
    '"a"', "}", "[1, 2]", "deadbeef-dead-beef-dead-beefdeadbeef", "\r", "\u2028", "None",
]


def _texts(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 14))) for _ in range(count)]


def test_every_counter_pattern_holds_one_of_the_hints_that_let_masking_skip_it() -> None:
    for word in outcome._COUNTERS:
        for form in (word, word.capitalize()):
            assert any(hint in form.lower() for hint in outcome._WORD_HINTS), form


def test_masking_with_its_pre_tests_masks_what_every_pattern_would() -> None:
    for text in _texts(seed=1, count=5000):
        assert mask_text(text) == _mask_everything(text), text


def test_an_error_line_at_either_end_of_a_long_text_reads_as_an_error() -> None:
    filler = "an ordinary line of output\n" * 200
    assert reads_as_error("Traceback (most recent call last)\n" + filler)
    assert reads_as_error(filler + "ValueError: bad input\n")


def test_an_error_word_only_in_the_middle_of_a_long_text_is_not_looked_for() -> None:
    filler = "an ordinary line of output\n" * 200
    assert not reads_as_error(filler + "error: in the middle\n" + filler)


@pytest.mark.parametrize("value", [0, 7, -3, 2**80, 1.5, float("nan"), True, False, None])
def test_a_number_or_none_is_judged_as_its_own_skeleton_and_never_an_error(value: Any) -> None:
    def tool() -> Any:
        return value

    plan = guard(tool).guard.plan(Config())  # type: ignore[attr-defined]
    fp, failed, kept = plan.judge_result(value, Call("tool", 1, b"", {}))
    assert (fp, failed, kept is value) == (fingerprint(skeleton(value)), None, True)
    assert not reads_as_error(value)


@pytest.mark.parametrize("value", [0, 7, -3, 2**80, 1.5, float("inf")])
def test_a_numbers_content_is_the_unit_the_walk_keeps(value: Any) -> None:
    units = content_of(value, None)
    assert observe({"query": "None 7 x"}, value, None) == (units, units)


def test_a_texts_content_is_its_units_as_they_are_and_with_the_echoed_words_masked() -> None:
    rng = random.Random(3)
    for text in _texts(seed=2, count=3000):
        arguments = {"query": " ".join(rng.choice(["ab", "x", "None", "3", "run", "\u00e9"])
                                       for _ in range(rng.randint(0, 3))), "limit": 3}
        plain = content_of(text, None)
        expected = plain if not isinstance(plain, frozenset) else (
            plain, content_of(text, None, echo_of(arguments)))
        assert observe(arguments, text, None) == expected, text


def test_the_content_kept_for_a_kind_is_what_its_readers_read_of_both_variants() -> None:
    """Given the call's kind, ``observe`` computes only the variant ``units_of`` reads for that
    kind (plain, or with the echoed words masked) and keeps it in both places."""
    rng = random.Random(6)
    texts = _texts(seed=5, count=1500)
    texts += ["\n".join(rng.sample(texts, rng.randint(2, 6))) for _ in range(500)]
    texts += ["\n".join(rng.sample(texts, 40)) * 3 for _ in range(20)]  # past the small-text size
    masked_kinds = 0
    for text in texts:
        arguments = {"query": " ".join(rng.choice(["ab", "x", "None", "3", "run", "\u00e9"])
                                       for _ in range(rng.randint(0, 3))), "limit": 3}
        for result, error in ((text, None), (None, ValueError(text)), (7, None)):
            both = observe(arguments, result, error)
            for kind in KINDS:
                one = observe(arguments, result, error, kind)
                if type(both) is not tuple:
                    assert one == both, (text, kind)
                    continue
                read = 1 if kind in INFORMING else 0
                assert one == (both[read], both[read]), (text, kind)
                masked_kinds += both[0] != both[1]
    assert masked_kinds > 200  # echoed words were masked often enough to tell the variants apart


def test_a_feature_kept_by_kind_is_given_the_kind_of_the_call() -> None:
    seen: list[Any] = []

    def by_kind(arguments: Any, result: Any, error: Any, kind: str | None) -> str | None:
        seen.append(kind)
        return kind

    def plain(arguments: Any, result: Any, error: Any) -> int:
        return 1

    @dataclasses.dataclass(frozen=True)
    class Reads:
        name = "reads"
        features = (Feature("kind", by_kind, by_kind=True), Feature("plain", plain))

        def check(self, run: RunView, call: Call) -> Detection | None:
            return None

    @guard(layers=[Reads()])
    def read_file(path: str) -> str:
        return "text of " + path

    @guard(layers=[Reads()], kind="write")
    def save(path: str) -> str:
        return "saved"

    with fuzeguard.run("kinds") as run:
        read_file("a")
        save("b")
    assert seen == ["read", "write"]
    assert [(r.features["kind"], r.features["plain"]) for r in run.history] == [
        ("read", 1), ("write", 1)]


def _tools(names: list[str], body: Callable[[str], Any], layer: object) -> dict[str, Any]:
    """A guarded tool of each name, each running ``body``, judged by ``layer`` alone."""
    tools = {}
    for name in names:
        def fn(arg: str) -> Any:
            return body(arg)

        fn.__name__ = fn.__qualname__ = name
        tools[name] = guard(fn, layers=[layer])
    return tools


def _random_runs(
    rng: random.Random, names: list[str], layer: object, answers: list[Any], *, in_flight: float,
    lengths: tuple[int, int], args: list[str], streak: float,
) -> None:
    """150 runs of random calls of tools named ``names``, judged by ``layer`` alone: each answers
    one of ``answers`` ("boom" raises, "new" is new to the run), sometimes while another call
    runs (``in_flight``); the first tool of a run's pool is called with probability ``streak``,
    else any of the pool; arguments are drawn from ``args`` ("new" is new to the run)."""

    def body(arg: str) -> Any:
        if rng.random() < in_flight:  # a call made while this one runs: this one is in flight
            tools[rng.choice(names)](rng.choice(["a", "b"]))
        answer = rng.choice(answers)
        if answer == "boom":
            raise ValueError("failed")
        return f"new {arg}" if answer == "new" else answer

    tools = _tools(names, body, layer)
    for _ in range(150):
        pool = rng.sample(names, rng.randint(1, 3))
        with fuzeguard.run("random", config=Config()):
            for i in range(rng.randint(*lengths)):
                arg = rng.choice(args)
                try:
                    tools[pool[0] if rng.random() < streak else rng.choice(pool)](
                        f"new {i}" if arg == "new" else arg)
                except ValueError:
                    pass


class _BothWays:
    """Runs the cycle layer's check and its full scan on every call and keeps both answers."""

    name = "both_ways"

    def __init__(self, layer: Cycle) -> None:
        self.layer = layer
        self.history_needed = layer.history_needed
        self.pairs: list[tuple[Detection | None, Detection | None]] = []

    def check(self, run: RunView, call: Call) -> None:
        history = run.history
        fewest = self.layer.cycle_warn_repeats or self.layer.cycle_repeats + 1
        full = None
        if len(history) + 1 >= self.layer.cycle_min_length * fewest:
            full = self.layer._scan(history, call)
        self.pairs.append((self.layer.check(run, call), full))


@pytest.mark.parametrize("result_aware", [True, False])
def test_the_cycle_layers_cheap_exit_never_hides_what_the_full_scan_finds(
    result_aware: bool,
) -> None:
    rng = random.Random(4)
    both = _BothWays(Cycle(result_aware=result_aware))

    def tool(arg: str) -> str:
        if rng.random() < 0.05:  # a call made while this one runs: this one is in flight
            tools[rng.choice(names)](rng.choice(["a", "b"]))
        outcome_ = rng.choice(["same"] * 8 + ["other", "boom", "third"])
        if outcome_ == "boom":
            raise ValueError("failed")
        return outcome_

    names = ["search_docs", "write_file", "get_status", "plan"]
    tools = _tools(names, tool, both)
    for _ in range(200):
        pool = rng.sample(names, rng.randint(1, 3))
        with fuzeguard.run("cycles", config=Config()):
            for i in range(rng.randint(5, 40)):
                name = pool[i % len(pool)] if rng.random() < 0.8 else rng.choice(pool)
                arg = rng.choice(["a"] * 6 + ["b", f"new {i}"])
                try:
                    tools[name](arg)
                except ValueError:
                    pass
    found = sum(full is not None for _, full in both.pairs)
    assert found > 20  # the walk does find cycles
    for cheap, full in both.pairs:
        assert cheap == full


@pytest.mark.parametrize("pattern", ["AB", "ABC", "AAB", "AABB", "ABAC", "AAAB"])
def test_the_cycle_layers_cheap_exit_finds_laps_of_new_arguments_with_unchanged_answers(
    pattern: str,
) -> None:
    """Every call has new arguments and every answer is the same: cycles of names only, which
    the exit must not rule out as it rules out one function called with new arguments."""
    both = _BothWays(Cycle())
    tools = _tools([f"plan_{letter}" for letter in set(pattern)], lambda arg: "the same answer", both)
    with fuzeguard.run("names", config=Config()):
        for i in range(12 * len(pattern)):
            tools[f"plan_{pattern[i % len(pattern)]}"](f"new {i}")
    assert any(full is not None for _, full in both.pairs)
    for cheap, full in both.pairs:
        assert cheap == full


class _History:
    """The parts of a run the iteration waiver reads: a history and its argument index."""

    def __init__(self, records: list[CallRecord]) -> None:
        self.history = records

    def same_args(self, args_fp: bytes) -> list[CallRecord]:
        return [r for r in self.history if r.args_fp == args_fp]


def _productive_in_full(run: _History, fn: str) -> bool:
    """The iteration waiver counted over every call it looks at, with no early answer."""
    mine = [r for r in run.history[-WAIVER_WINDOW:] if r.fn == fn and not r.in_flight]
    mine = mine[-DEFAULT_CAP:]
    if len(mine) < MIN_EVIDENCE:
        return bool(mine)
    seen_args: set[bytes] = set()
    seen_results: set[bytes] = set()
    fresh = 0
    for record in mine:
        fp = record.result_fp
        if (fp is not None and fp not in seen_results) or (
            record.args_fp not in seen_args and record.error is None
        ):
            fresh += 1
        seen_args.add(record.args_fp)
        if fp is not None:
            seen_results.add(fp)
    return fresh >= PRODUCTIVE_SHARE * len(mine)


def test_the_iteration_waivers_early_answers_match_the_full_count() -> None:
    rng = random.Random(5)
    layer = Iterations()
    answers = []
    for _ in range(3000):
        args_pool = rng.choice([1, 2, 3, 5, 8, 40])
        results_pool = rng.choice([1, 2, 3, 5, 8, 40])
        records = []
        for i in range(rng.randint(0, 90)):
            in_flight = rng.random() < 0.03
            records.append(CallRecord(
                fn=rng.choice(["a", "a", "a", "b"]), index=i + 1,
                args_fp=bytes([rng.randrange(args_pool)]),
                result_fp=None if in_flight or rng.random() < 0.1 else bytes(
                    [rng.randrange(results_pool)]),
                error="ValueError" if not in_flight and rng.random() < rng.random() * 0.6 else None,
                features=IN_FLIGHT if in_flight else {},
            ))
        run = _History(records)
        full = _productive_in_full(run, "a")
        assert layer._productive(run, "a") == full  # type: ignore[arg-type]
        answers.append(full)
    assert 0.1 < sum(answers) / len(answers) < 0.9  # both answers are exercised


class _ProgressBothWays:
    """Runs the progress layer's check and its full judgement on every call, keeps both."""

    name = "progress_both_ways"

    def __init__(self, layer: Progress) -> None:
        self.layer = layer
        self.history_needed = layer.history_needed
        self.features = layer.features
        self.pairs: list[tuple[Detection | None, Detection | None]] = []

    def check(self, run: RunView, call: Call) -> None:
        self.pairs.append((self.layer.check(run, call), self.layer._look(run.history, call)))


def test_the_progress_layers_cheap_exit_never_hides_what_the_full_judgement_finds() -> None:
    both = _ProgressBothWays(Progress())
    _random_runs(
        random.Random(6), ["search_docs", "write_file", "get_status", "plan", "bash"], both,
        ["No results found.", "OK", "same words here", "boom", "new"], in_flight=0.1,
        lengths=(5, 40), args=["a", "b", "c", "new"], streak=0.0,
    )
    assert sum(full is not None for _, full in both.pairs) > 20  # the full judgement does fire
    for cheap, full in both.pairs:
        assert cheap == full


def test_the_progress_layers_news_is_a_unit_of_the_answer_in_none_of_the_earlier_ones() -> None:
    from fuzeguard.layers._content import CONTENT
    from fuzeguard.layers.progress import _NEWS_AT_ONCE, _news

    rng = random.Random(8)
    words = [f"w{i}" for i in range(400)]

    def record(i: int, units: frozenset[str], kind: str) -> CallRecord:
        return CallRecord(fn="search_docs", index=i, args_fp=bytes([i]),
                          result_fp=bytes([rng.randrange(40)]), kind=kind,
                          features={CONTENT.key: (units, units) if rng.random() < 0.5 else units})

    answers = []
    for _ in range(2000):
        size = rng.choice((1, 2, 3, 4, _NEWS_AT_ONCE - 1, _NEWS_AT_ONCE, _NEWS_AT_ONCE + 1, 150))
        pool = words[:rng.choice((size, size + 2, 2 * size, 400))]
        content = frozenset(rng.sample(pool, min(size, len(pool))))
        earlier = [record(i, frozenset(rng.sample(pool, rng.randint(0, len(pool)))), "search")
                   for i in range(rng.randint(0, 8))]
        latest = record(99, content, "search")
        known = [_plain_units(r) for r in earlier]
        plain = all(r.result_fp != latest.result_fp for r in earlier) and any(
            all(unit not in units for units in known) for unit in content)
        assert _news(latest, earlier) == plain
        answers.append(plain)
    assert 0.2 < sum(answers) / len(answers) < 0.8  # both answers are exercised


def _plain_units(record: CallRecord) -> frozenset[str]:
    content = record.features["content"]
    return content[1] if type(content) is tuple else content


class _RegexChantScanner(ChantScanner):
    """The chanting scanner splitting passages with the regex it was written with."""

    __slots__ = ()

    def feed(self, piece: str) -> Chant | None:
        self._total += len(piece)
        pieces = re.split(r"[.!?\n]+", self._pending + piece)
        self._pending = pieces.pop()[-2000:]
        for passage in pieces:
            self._count(passage)
        return self.finding()


def test_the_chanting_scanner_counts_the_passages_a_regex_split_gives() -> None:
    rng = random.Random(7)
    passages = ["the same passage comes back again", "another line of the output here", "ok",
                "", " ", "x" * 30]
    ends = [".", "!", "?", "\n", "..", ".\n", "?!", " "]
    for _ in range(500):
        text = "".join(rng.choice(passages) + rng.choice(ends) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 6))))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        fast, slow = ChantScanner(), _RegexChantScanner()
        for chunk in chunks:
            assert fast.feed(chunk) == slow.feed(chunk), text
        assert fast.close() == slow.close(), text
        assert fast._counts == slow._counts


def _sketch_of_every_shingle(text: str) -> frozenset[int]:
    """The bottom-k sketch taken over the whole set of shingle hashes."""
    words = list(map(zlib.crc32, text.lower().encode("utf-8", "surrogatepass").split()))
    shingles = (
        {hash(tuple(words))} if len(words) < 3
        else set(map(hash, zip(words, words[1:], words[2:], strict=False)))
    )
    return frozenset(heapq.nsmallest(SKETCH_SIZE, shingles))


def test_a_sketch_taken_from_the_smallest_hashes_is_the_sketch_of_every_shingle() -> None:
    rng = random.Random(8)
    vocabulary = [_texts(seed=9, count=1)[0], "word", "other", "third", "x", "\u00e9t\u00e9", "42"]
    for _ in range(400):
        size = rng.choice([0, 1, 2, 3, 10, 100, 130, 600, 3000, 20000])
        kinds = rng.randint(1, 400)  # few kinds of words: a repetitive text, few distinct shingles
        pool = [rng.choice(vocabulary) + str(rng.randrange(kinds)) for _ in range(kinds)]
        text = " ".join(rng.choice(pool) for _ in range(size))
        assert sketch(text) == _sketch_of_every_shingle(text), (size, kinds)


def test_the_similarity_of_two_sketches_is_the_bottom_k_estimate_of_their_union() -> None:
    rng = random.Random(12)
    for _ in range(2000):
        shared = {rng.randrange(-(1 << 63), 1 << 63) for _ in range(rng.randint(0, 200))}
        a = frozenset(set(rng.sample(sorted(shared), len(shared) // 2 if shared else 0))
                      | {rng.randrange(-(1 << 63), 1 << 63) for _ in range(rng.randint(0, 200))})
        b = frozenset(shared | {rng.randrange(-(1 << 63), 1 << 63)
                                for _ in range(rng.randint(0, 200))})
        a, b = frozenset(heapq.nsmallest(SKETCH_SIZE, a)), frozenset(heapq.nsmallest(SKETCH_SIZE, b))
        merged = heapq.nsmallest(SKETCH_SIZE, a | b)
        both = sum(1 for h in merged if h in a and h in b)
        resemblance = both / len(merged) if merged else 0.0
        expected = 2 * resemblance / (1 + resemblance) if merged else 0.0
        assert sketch_similarity(a, b) == expected
    text = " ".join(_texts(seed=13, count=400))
    assert sketch_similarity(sketch(text), sketch(text)) == 1.0
    assert sketch_similarity(frozenset(), frozenset()) == 0.0


def test_a_remembered_key_verdict_is_the_verdict_whatever_volatile_names_the_user_adds() -> None:
    """``is_volatile_key`` keeps its verdict per key; the user's own names still count on every
    call, and keys too long to keep are judged afresh."""
    rng = random.Random(11)
    words = ["request", "Id", "id", "duration", "ms", "status", "result", "at", "created",
             "exit", "code", "_", "-", "X", "trace", "line", "seq", "a" * 40]
    extras = [frozenset(), frozenset({"resultat"}), frozenset({"statuscode", "createdat"})]
    for _ in range(5000):
        key = "".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
        extra = rng.choice(extras)
        expected = key.lower() in extra or outcome._volatile_name(key)
        assert outcome.is_volatile_key(key, extra) == expected, (key, extra)
    assert len(outcome._KEY_VERDICTS) <= outcome._KEYS_REMEMBERED
    assert all(len(key) <= outcome._KEY_REMEMBERED for key in outcome._KEY_VERDICTS)


class _QuietBothWays:
    """Asks the combined cheap exit and each default layer about every call, keeps both."""

    name = "quiet_both_ways"
    history_needed = 200
    features = (CONTENT,)  # what progress reads of each answer, kept as its own stack keeps it

    def __init__(self, stack: list[Any]) -> None:
        self.stack = stack
        self.quiet = quiet_check(stack)
        # Per call: the layers the combined cheap exit leaves to ask, and each layer's answer.
        self.answers: list[tuple[tuple[Any, ...] | None, list[Detection | None]]] = []
        # Settled calls after an answer to a read or a search by another function (a rotation):
        # settled by progress's and cycle's own cheap exits, not by the looks of ``Quiet``.
        self.after_answers = 0

    def check(self, run: RunView, call: Call) -> None:
        state: Any = run
        assert self.quiet is not None
        left = self.quiet.left(state._history, state._by_args, state._calls_by_fn,
                               state._errors, call)
        self.answers.append((left, [layer.check(run, call) for layer in self.stack]))
        history = state._history
        if left == () and history and history[-1].kind in INFORMING and history[-1].fn != call.fn:
            self.after_answers += 1


@pytest.mark.parametrize("options", [{}, {"max_iterations": 6, "cycle_min_length": 3},
                                     {"cycle_warn_repeats": 0, "repeat_threshold": 1}])
def test_the_default_stacks_combined_cheap_exit_settles_only_calls_every_layer_lets_go(
    options: dict[str, Any],
) -> None:
    settings = {**Config().settings_for(None), **options}
    stack = [
        cls(**{f: settings[f] for f in cls.__dataclass_fields__ if f in settings})
        for cls in (Iterations, Dedup, Cycle, Progress)
    ]
    both = _QuietBothWays(stack)
    assert both.quiet is not None and both.quiet.others == ()
    _random_runs(
        random.Random(8), ["search_docs", "write_file", "get_status", "convert", "bash", "think"],
        both, ["No results found.", "OK", "same words", "boom", "new", 7], in_flight=0.05,
        lengths=(2, 40), args=["a", "b", "new", "new", "new"], streak=0.6,
    )
    # Reads and searches taking turns, answering words the run already had or new ones.
    _random_runs(
        random.Random(9), ["search_docs", "read_page", "find_refs"], both,
        ["No results found.", "alpha beta", "beta gamma alpha", "new", "new", "boom"],
        in_flight=0.02, lengths=(2, 40), args=["a", "b", "c", "new", "new"], streak=0.2,
    )
    assert both.quiet.unsure == (both.stack[3],)
    settled = [found for left, found in both.answers if left == ()]
    unsure = [found for left, found in both.answers if left == both.quiet.unsure]
    assert len(settled) > 300 and len(settled) < len(both.answers)  # all answers are exercised
    assert len(unsure) > 100
    assert sum(found[3] is not None for found in unsure) > 20  # where progress does fire
    assert sum(any(found) for _, found in both.answers) > 20  # and the layers do fire
    assert both.after_answers > 50
    for found in settled:
        assert found == [None] * 4
    for found in unsure:
        assert found[:3] == [None] * 3


def test_the_combined_cheap_exit_is_made_only_for_a_stack_holding_the_four_default_layers() -> None:
    four = [Iterations(), Dedup(), Cycle(), Progress()]
    assert quiet_check(four) is not None
    assert quiet_check(four[:3]) is None
    assert quiet_check([*four, Dedup()]) is None
    semantic = Semantic()
    made = quiet_check([*four, semantic])
    assert made is not None and made.others == (semantic,)
    assert made.unsure == (four[3], semantic)


_FEATURES_SLOT = CallRecord.__dict__["features"]  # a record's features as they are held


def _detections_and_records(defer: bool, seed: int) -> tuple[list[Any], list[Any], int, int]:
    """Random runs of acknowledging tools that answer short texts or numbers (now and then the
    same one), with what the layers keep of each extracted at completion or when first read."""
    rng = random.Random(seed)
    config = Config.from_dict({"defaults": {"on_loop": "warn"}})
    tools = []
    for name in ("convert", "save_note", "tag_item"):
        def body(arg: str) -> object:
            return rng.choice([f"converted {arg}", "OK", f"saved {arg}\nline two", arg, "done",
                               len(arg), 7, 0.5, True, None, "Error: cannot convert " + arg,
                               f'{{"id": 3, "saved": "{arg}"}}'])

        body.__name__ = name
        tool = guard(body)
        plan = tool.guard.plan(config)  # type: ignore[attr-defined]
        assert plan.defer
        tool.guard._plans[id(config)] = (config, dataclasses.replace(plan, defer=defer))  # type: ignore[attr-defined]
        tools.append(tool)
    detections: list[Any] = []
    records: list[Any] = []
    deferred = numbers = 0
    for _ in range(60):
        with fuzeguard.run("deferred", config=config) as run:
            for i in range(rng.randint(2, 40)):
                tools[0 if rng.random() < 0.7 else rng.randrange(3)](
                    rng.choice(["a", "b", f"new {i}", f"new {i}"]))
            detections += [(d.layer, d.call_index, d.action) for d in run.detections]
            late = [r for r in run.history if type(r) is LateRecord]
            deferred += len(late)
            numbers += sum(type(getattr(_FEATURES_SLOT.__get__(r), "result", "")) in (int, float)
                           for r in late)  # the late ones not read yet
            records += [(r.fn, r.index, r.args_fp, r.result_fp, r.error, r.kind, dict(r.features))
                        for r in run.history]
    return detections, records, deferred, numbers


def test_records_judged_when_first_read_give_the_verdicts_and_records_of_eager_ones() -> None:
    eager = _detections_and_records(defer=False, seed=9)
    deferred = _detections_and_records(defer=True, seed=9)
    assert len(eager[0]) > 10  # the layers do fire on these runs
    assert eager[2] == 0 and deferred[2] > 100  # and many extractions were deferred
    assert deferred[3] > 10  # numbers among them (counted: those no layer had read by the end)
    assert deferred[:2] == eager[:2]


def test_a_late_record_is_built_as_a_record_that_changes_class_where_python_allows_it() -> None:
    # CPython does: the slower builder, slot by slot, is for an interpreter that refuses.
    assert completion.late_record is _late_by_class


def test_a_late_record_is_the_eager_one_whichever_is_read_first() -> None:
    @guard
    def convert(name: str, size: int) -> str:
        return name

    plan = convert.guard.plan(Config())  # type: ignore[attr-defined]
    for text in ["converted a.png", "a.png 12", "two words\nand a line", "", "one", "a b a b",
                 '{"id": 4, "name": "a.png"}', "run 1234 took 3.2s", 3, -2, 0.25, float("nan")]:
        for arguments in ({"name": "a.png", "size": 3}, {"name": "words", "size": 1}):
            call = Call("convert", 5, b"args", arguments, plan.kind)
            fp, failed, value = judged(plan, call, text)
            assert failed is None
            eager = CallRecord("convert", 5, b"args", fp, None, 0.5, 1.0, 2.0,
                               plan.features(arguments, value, None, kind=plan.kind), plan.kind)
            for make in (_late_by_class, _late_by_slots):
                for features_first in (True, False):
                    late = make(plan, call, text, 0.5, 1.0, 2.0)
                    assert type(late) is LateRecord and not late.in_flight
                    if features_first:
                        assert dict(late.features) == dict(eager.features)
                    assert late.result_fp == eager.result_fp
                    assert dict(late.features) == dict(eager.features)
                    assert type(_FEATURES_SLOT.__get__(late)) is dict  # the call let go
                    assert late == eager and eager == late and (late != eager) is False
                    for copied in (pickle.loads(pickle.dumps(make(plan, call, text, 0.5, 1.0, 2.0))),
                                   copy.copy(make(plan, call, text, 0.5, 1.0, 2.0))):
                        assert type(copied) is CallRecord and copied == eager
                    with pytest.raises(dataclasses.FrozenInstanceError):
                        late.result_fp = b"other"  # type: ignore[misc]
                    fresh = make(plan, call, text, 0.5, 1.0, 2.0)
                    assert dataclasses.replace(fresh, cost=None) == dataclasses.replace(
                        eager, cost=None)


@pytest.mark.parametrize(("source", "deferred"), [
    ("def convert(name: str) -> str: ...", True),
    ("def write_file(path: str) -> str: ...", True),
    ("def search_docs(query: str) -> str: ...", False),  # informing: its masked units are read
    ("def bash(command: str) -> str: ...", False),  # its kind may change with each command
])
def test_only_a_fixed_acknowledging_kind_is_judged_when_first_read(
    source: str, deferred: bool,
) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # a function of that name and signature
    fn = next(v for k, v in namespace.items() if k != "__builtins__")
    assert guard(fn).guard.plan(Config()).defer is deferred  # type: ignore[attr-defined]
    layers = guard(fn, layers=["iterations", "dedup", "progress", "semantic"])
    assert layers.guard.plan(Config()).defer is False  # type: ignore[attr-defined]


def test_a_late_record_read_by_many_threads_at_once_gives_each_the_eager_one() -> None:
    @guard
    def convert(name: str) -> str:
        return name

    plan = convert.guard.plan(Config())  # type: ignore[attr-defined]
    texts = [f"converted file {i} of {i % 7}" for i in range(300)]
    calls = [Call("convert", i, b"args", {"name": "f"}, plan.kind) for i in range(300)]
    eager = [(judged(plan, call, text)[0],
              plan.features({"name": "f"}, judged(plan, call, text)[2], None, kind=plan.kind))
             for call, text in zip(calls, texts, strict=True)]
    late = [_late_by_class(plan, call, text, None, 0.0, None)
            for call, text in zip(calls, texts, strict=True)]
    start = threading.Barrier(8)
    seen: list[list[Any]] = []

    def read(features_first: bool) -> None:
        start.wait()
        if features_first:
            seen.append([(r.features, r.result_fp)[::-1] for r in late])
        else:
            seen.append([(r.result_fp, r.features) for r in late])

    threads = [threading.Thread(target=read, args=(i % 2 == 0,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [eager] * 8
