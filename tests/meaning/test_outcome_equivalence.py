"""Faster forms of the outcome reading give exactly what the slower ones gave: the counter mask,
grouped by leading character and made of the branches its probes find, masks what the plain
alternation masked, the error lines found between a text's ends are the same with only the
branches whose words the text holds as with the whole pattern, and a shell command polls or writes
as the plain patterns of its kind read it; on every text of the labelled corpora, and on generated
texts dense with counters, error words and shell syntax."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fuzeguard._private.meaning import outcome

ROOT = Path(__file__).resolve().parents[2]
CORPORA = [ROOT / "benchmarks" / "corpora" / name / "traces" for name in ("peers", "real")]

# The plain alternation, as it was written before it was grouped.
PLAIN = re.compile(
    "|".join(
        [
            *(rf"{w}\s?[#:=]?\s?(?:[A-Za-z]{{1,8}}[-_])?\d+(?!\w)"
              for c in outcome._COUNTERS for w in {c, c.capitalize()}),
            r'", line\s\d+(?!\w)',
            r"id(?<![A-Za-z]id)\s?[=:]\s?[\"']?[\w.-]+",
            r"ID(?<![A-Za-z]ID)\s?[=:]\s?[\"']?[\w.-]+",
            r"Id(?<=[a-z]Id)\s?[=:]\s?[\"']?[\w.-]+",
            r"In\s?\[\d+\]", r"Out\s?\[\d+\]", r"Cell In\s?\[\d+\](?:, line\s\d+(?!\w))?",
            r"/tmp/[^\s'\"/:]*\d[^\s'\"/:]*", r"/var/folders/[^\s'\"/:]*",
        ]
    )
)


# The error lines looked for between a text's ends, as the pattern was written before it was
# split into branches.
PLAIN_DEEP = re.compile(
    r"""^[ \t]*(?:[-*>|]\s+|E\ {3})?(?:[A-Z]\d{2,4}\s+)?(?:
      [A-Za-z_][\w.]*(?:Error|Exception)\b:\s*\S.*
    | \[(?:ERROR|FATAL)\].*
    | (?:error|ERROR|Error|fatal|FATAL|Fatal)\b\s*:\s*\S.*
    | BUILD\ FAILURE.*
    | error\[E\d{4}\]:.*
    | npm\ ERR!.*
    | [\w./-]+\.go:\d+:\d+:\ \S.*
    | .{0,200}?(?:command\ not\ found|No\ such\ file\ or\ directory|Permission\ denied).*
    )$""",
    re.VERBOSE | re.MULTILINE,
)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _corpus_texts() -> list[str]:
    texts = []
    for folder in CORPORA:
        for path in sorted(folder.iterdir()):
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                for line in f:
                    obj = json.loads(line)
                    for key in ("result", "error", "args"):
                        texts.extend(_strings(obj.get(key)))
    return texts


def _masked_both_ways(texts: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], ...]:
    """Each text masked as it is, then with the probes used on texts of any length (the short
    ones are masked with the whole pattern), and with the plain alternation of every branch in
    place of the branches the probes keep (the same pre-test on the hints before it)."""
    default = [outcome.mask_text(t) for t in texts]
    monkeypatch.setattr(outcome, "_PROBED_FROM", 0)
    probed = [outcome.mask_text(t) for t in texts]
    assert probed == default
    every = tuple(range(len(outcome._WORD_LED_BRANCHES)))
    monkeypatch.setattr(outcome, "_LED_PROBES", ((lambda low: True, every),))
    monkeypatch.setattr(outcome, "_LED_BY_BRANCHES", {every: PLAIN})
    plain = [outcome.mask_text(t) for t in texts]
    monkeypatch.undo()
    return probed, plain


def test_the_grouped_counter_mask_masks_the_corpora_exactly_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = _corpus_texts()
    assert len(texts) > 20_000
    grouped, plain = _masked_both_ways(texts, monkeypatch)
    assert grouped == plain
    assert sum(g != t for g, t in zip(grouped, texts, strict=True)) > 1000  # it did mask


def test_the_grouped_counter_mask_matches_the_plain_one_on_texts_dense_with_counters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pieces = [*outcome._COUNTERS, *(c.capitalize() for c in outcome._COUNTERS), "Line", "line",
              "LINE", '", line ', ", line ", "run", "job", "iteration", "build", "id", "ID", "Id",
              "xid", "messageId", "In", "Out", "Cell In", "/tmp/", "/var/folders/", "sess-",
              "job_", " ", "  ", ":", "=", "#", "[", "]", "'", '"', "-", "_", ".", "\n", "\t",
              "7", "42", "2026", "ab12", "x", "\u212a", "\u0130", "Kelvin", "tmp", "/"]
    rng = random.Random(25)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(20_000)]
    for text in texts:
        assert outcome._WORD_LED.sub("_", text) == PLAIN.sub("_", text), text
    grouped, plain = _masked_both_ways(texts, monkeypatch)
    assert grouped == plain


def test_the_error_lines_read_deep_in_the_corpora_are_the_same_without_the_pre_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = _corpus_texts()
    tested = [outcome.read_failure(t, True) for t in texts]
    monkeypatch.setattr(outcome, "_deep_error", lambda text: PLAIN_DEEP)
    assert [outcome.read_failure(t, True) for t in texts] == tested
    assert sum(found is not None for found in tested) > 500


def test_the_error_line_found_with_the_kept_branches_is_the_one_the_plain_pattern_finds() -> None:
    pieces = ["ValueError", "Exception", "Error", "error", "ERROR", "fatal", "FATAL", "Fatal",
              "[ERROR]", "[FATAL]", "BUILD FAILURE", "command not found", "Permission denied",
              "No such file or directory", ":", " ", "\t", "\n", "- ", "E999 ", "x", "a.b", "'q'",
              "E   ", "error[E0425]", "npm ERR!", "main.go:12:5", "./x.go:3:1: "]
    rng = random.Random(26)
    found = 0
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        whole = PLAIN_DEEP.search(text)
        assert (whole and whole.span()) == ((m := outcome._DEEP_ERROR.search(text)) and m.span())
        kept = outcome._deep_error(text)
        match = kept.search(text) if kept is not None else None
        assert (whole and whole.span()) == (match and match.span()), text
        found += whole is not None
    assert found > 2000


@pytest.mark.parametrize("line", [
    "ValueError: bad", "[ERROR] x", "[FATAL] x", "error: x", "ERROR: x", "Error: x", "fatal: x",
    "FATAL: x", "Fatal: x", "BUILD FAILURE", "sh: foo: command not found",
    "cat: a: No such file or directory", "open: Permission denied", "- E999 SyntaxError: x",
    "KeyException: k", "error[E0425]: cannot find value `x`", "npm ERR! code ELIFECYCLE",
    "./main.go:12:5: undefined: x", "E   ModuleNotFoundError: No module named 'x'",
])
def test_every_deep_error_line_is_found_with_the_branches_kept_for_it(line: str) -> None:
    text = "start\n" + "filler line\n" * 300 + line + "\n" + "more filler\n" * 300 + "end"
    assert outcome._DEEP_ERROR.search(text)
    kept = outcome._deep_error(text)
    assert kept is not None and kept.search(text).group() == outcome._DEEP_ERROR.search(text).group()


# A shell command's kind, as its two patterns were written before they were split (the poll
# pattern into a match at the start and a search led by a separator; the write pattern's
# redirections looked for only in a command holding ``>`` or ``<<``).
PLAIN_POLL = re.compile(
    r"(?:^|[;&|(]\s*)(?:sleep|watch|squeue|qstat|jobs|top|ps)(?=$|[\s;&|)])"
    r"|(?:^|[;&|(]\s*)(?!(?:grep|rg|ag|find|sed|awk|cat|echo|printf|python\d*|node)\b)"
    r"[\w./-]+(?:\s+[\w./-]+)?\s+(?:status|health|healthz|wait|poll|ps)(?=$|[\s;&|)])"
    r"|\s--?(?:watch|wait|status)\b",
)
PLAIN_WRITE = re.compile(
    r"""(?:^|[^<>&0-9-])[12]?>>?\s*(?!\s*(?:/dev/null|&))[\w"'./$~{-]
    | <<-?\s*(?:''|""|\w)
    | (?:^|[;&|(`]\s*|\bsudo\s+|\bxargs\s+)(?:
        tee|rm|rmdir|mv|cp|mkdir|touch|chmod|chown|ln|truncate|dd|unzip|patch|install
      | sed\s+(?:-\w+\s+)*-i | perl\s+(?:-\w+\s+)*-\w*i
      | git\s+(?:apply|am|checkout|switch|restore|reset|stash|commit|add|rm|mv|merge|rebase
          |cherry-pick|revert|clean|pull|init|clone)
      | (?:pip3?|python3?\s+-m\s+pip|uv\s+pip|conda|npm|yarn|pnpm|apt|apt-get|brew|gem|cargo)
          \s+(?:install|add|uninstall|remove|build)
      | make | cmake | mvn | gradle | \./gradlew | \./mvnw | javac | tar\s+-?\w*x
      | python3?\s+setup\.py
      )(?=$|[\s;&|)])""",
    re.VERBOSE | re.MULTILINE,
)
COMMAND_TOKENS = [
    "sleep", "watch", "ps", "top", "jobs", "git", "status", "health", "wait", "poll", "grep", "echo",
    "python3", "kubectl", "rollout", " ", "  ", "\t", "\n", ";", "&", "|", "(", ")", "`", "-", "--",
    "--watch", "-wait", "--status", "x", "./a", "a.py", ">", ">>", "2>", "&>", "< ", "<<", "<<-",
    " /dev/null", "&1", "'", '"', "'a > b'", "sudo ", "xargs ", "rm", "mv", "tee", "sed -i",
    "perl -pi", "pip", "install", "make", "tar -xf", "npm", "add", "EOF", "1", "0",
]


def _kinds_both_ways(command: str) -> tuple[tuple[bool, bool], tuple[bool, bool]]:
    """Whether ``command`` polls and whether it writes, read with the plain patterns and as
    ``kinds.polls`` and ``kinds.writes`` read it."""
    from fuzeguard._private.meaning import kinds

    cut = command[:4000]
    plain_writes = PLAIN_WRITE.search(kinds._QUOTED.sub("''", cut)) is not None or (
        ("open(" in cut or ".write_" in cut) and kinds._CODE_WRITE.search(cut) is not None)
    plain = (PLAIN_POLL.search(command[:500].strip()) is not None, plain_writes)
    return plain, (kinds.polls(command), kinds.writes(command))


def test_a_commands_kind_is_read_as_the_plain_patterns_read_it_on_the_corpora() -> None:
    texts = _corpus_texts()
    found = [0, 0]
    for text in texts:
        plain, fast = _kinds_both_ways(text)
        assert fast == plain, text[:300]
        found[0] += plain[0]
        found[1] += plain[1]
    assert found[0] > 10 and found[1] > 1000, found  # both patterns match, and often


def test_a_commands_kind_is_read_as_the_plain_patterns_read_it_on_generated_commands() -> None:
    rng = random.Random(11)
    found = [0, 0]
    for _ in range(60_000):
        command = "".join(rng.choice(COMMAND_TOKENS) for _ in range(rng.randint(0, 12)))
        plain, fast = _kinds_both_ways(command)
        assert fast == plain, command
        found[0] += plain[0]
        found[1] += plain[1]
    assert min(found) > 1_000, found  # both patterns match, and often


def test_the_words_of_an_ascii_text_are_the_same_found_with_the_ascii_flag() -> None:
    """Content units are split with ``re.ASCII`` in a text that is all ASCII: the same words."""
    from fuzeguard.layers import _content

    for code in range(128):
        char = chr(code)
        assert bool(_content._ASCII_WORD.fullmatch(char)) == bool(_content._WORD.fullmatch(char))
    texts = [t for t in _corpus_texts() if t.isascii()]
    assert len(texts) > 20_000
    for text in texts:
        assert _content._ASCII_WORD.findall(text) == _content._WORD.findall(text)


def test_the_volatile_tokens_of_an_ascii_text_are_masked_alike_with_the_ascii_flag() -> None:
    """``_VOLATILE_ASCII`` (for texts that are all ASCII) masks what ``_VOLATILE_TOKEN`` masks: on
    the corpora, and on texts dense with tokens and with the ASCII separators Unicode counts as
    spaces."""
    texts = [t for t in _corpus_texts() if t.isascii()]
    assert len(texts) > 20_000
    rng = random.Random(12)
    tokens = ["12", "3", "0.5", "ms", "s", " ", "\t", "\n", "\x1c", "\x1d", "\x1e", "\x1f", "T",
              "2024-01-02", "12:30:01", "deadbeef", "0x1f2e3d4c", "-", "a", "Foo.java:", "[", "]",
              ",", ":", ".", "abc123def456", "1234567890", "x", "_", "e"]
    texts += ["".join(rng.choice(tokens) for _ in range(rng.randint(0, 16))) for _ in range(30_000)]
    changed = 0
    for text in texts:
        masked = outcome._VOLATILE_TOKEN.sub(outcome._hex, text)
        assert outcome._VOLATILE_ASCII.sub(outcome._hex, text) == masked, text[:300]
        changed += masked != text
    assert changed > 10_000  # the patterns do mask


def test_the_ascii_form_adds_the_separators_to_each_space_and_refuses_what_it_cannot_convert() -> None:
    assert outcome._ascii_form(r"[T\s]x\s # a \s in a comment") == r"[T\s\x1c-\x1f]x[\s\x1c-\x1f] "
    for pattern in (r"a\S", r"\bword", r"[]a]", r"[^]a]"):
        with pytest.raises(ValueError):
            outcome._ascii_form(pattern)
