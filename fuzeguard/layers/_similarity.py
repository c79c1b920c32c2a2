"""Text similarity for the ``semantic`` layer: Ralph's fuzzy ratio, a sketch for long texts, cosine
similarity for embeddings, and the "chanting" scanner that finds one output repeating itself.

Short and medium texts (up to ``LONG_TEXT`` characters each) are compared exactly with rapidfuzz:
the similarity is the larger of

* the character similarity: the longest common subsequence over the length of the longer text
  (``"Hello world"`` vs ``"Hello world!"``: 11/12 = 0.917), and
* the word similarity: the same ratio over the sorted content words, lower-cased, with filler words
  and word endings dropped, so that a rephrasing ("Let me check the database for user
  information..." / "Checking the database for user information...") is seen as the same request.

Longer texts are compared by a bottom-k sketch (``SKETCH_SIZE`` hashes) of their word 3-shingles:
the Dice coefficient estimated from the sketches' resemblance. Building a sketch is linear in the
text and comparing two is constant, so a 100 KB result against a window of 5 costs one pass over the
100 KB. The trade-off: the estimate has an error of a few hundredths, and shingle overlap is
stricter than an edit ratio (scattered one-word edits in every sentence lower it more), so long
texts are flagged when they are near-copies rather than loosely similar.
"""

from __future__ import annotations

import dataclasses
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from itertools import compress, repeat
from operator import lt
from typing import Any, Final

from fuzeguard._private.configuration.settings import VOLATILE_KEYS

LONG_TEXT: Final = 5000
MAX_TEXT: Final = 1_000_000
SKETCH_SIZE: Final = 128
CHANT_MIN_PASSAGE: Final = 20
CHANT_MIN_TEXT: Final = 200
CHANT_REPEATS: Final = 3
CHANT_SHARE: Final = 0.5
_CHANT_MAX_KEYS: Final = 10_000
_CHANT_MAX_PENDING: Final = 2000

_VOLATILE = frozenset(k.lower() for k in VOLATILE_KEYS)
_TOKEN = re.compile(r"\w+|[^\w\s]+")
_WORD = re.compile(r"\w+")
_FILLER = frozenset((
    "a", "an", "the", "me", "my", "i", "ll", "let", "now", "to", "of", "and", "or", "is", "are",
    "be", "it", "this", "that", "please", "just", "so", "then", "will", "can", "you", "we",
))
_ENDINGS = ("ing", "ed", "es", "s")
# A passage ends at ``.``, ``!``, ``?`` or a line end: all made line ends, then split on them
# (ten times faster than a regex split over a long output; the empty pieces between two ends in
# a row are shorter than any passage, and are never counted).
_PASSAGE_ENDS = str.maketrans(".!?", "\n\n\n")

Embedder = Callable[[str], Sequence[float]]


def text_of(value: Any, limit: int = MAX_TEXT) -> str:
    """The text in a value: strings and numbers of any structure, one per line, volatile keys
    (ids, timestamps...) left out, at most ``limit`` characters."""
    parts: list[str] = []
    _collect(value, parts, [limit], 0)
    return "\n".join(parts)


def _collect(value: Any, parts: list[str], budget: list[int], depth: int) -> None:
    if budget[0] <= 0 or depth > 32:
        return
    if isinstance(value, str):
        text = value[: budget[0]]
    elif isinstance(value, (bytes, bytearray)):
        text = bytes(value[: budget[0]]).decode("utf-8", "replace")
    elif value is None or isinstance(value, bool):
        return
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in _VOLATILE:
                continue
            _collect(v, parts, budget, depth + 1)
        return
    elif isinstance(value, (list, tuple, Set)):
        for item in value:
            _collect(item, parts, budget, depth + 1)
        return
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _collect(getattr(value, f.name, None), parts, budget, depth + 1)
        return
    else:
        try:
            text = str(value)[: budget[0]]
        except Exception:
            return
    if text:
        parts.append(text)
        budget[0] -= len(text)


def _stem(word: str) -> str:
    for ending in _ENDINGS:
        if len(word) > len(ending) + 2 and word.endswith(ending):
            return word[: -len(ending)]
    return word


def content_words(text: str) -> str:
    """Sorted, lower-cased content words and punctuation of ``text``: what a rephrasing keeps."""
    return " ".join(sorted(_stem(t) for t in _TOKEN.findall(text.lower()) if t not in _FILLER))


def sketch(text: str) -> frozenset[int]:
    """A bottom-k sketch of the word 3-shingles of ``text`` (linear in its length).

    Words are hashed with CRC-32 and shingles are tuples of those integers, whose ``hash()`` does
    not depend on ``PYTHONHASHSEED``: a trace replayed in another process sees the same sketches,
    and so the same verdicts, as the live run. Every step runs in C (``map``, ``zip``).
    """
    # whitespace words: a third of the cost of a regex
    words = list(map(zlib.crc32, text.lower().encode("utf-8", "surrogatepass").split()))
    if len(words) < 3:
        return frozenset({hash(tuple(words))})
    hashes = list(map(hash, zip(words, words[1:], words[2:], strict=False)))
    # Shingle hashes spread evenly over the 64-bit range: about 4 * SKETCH_SIZE of them fall
    # below ``bound``. When at least SKETCH_SIZE distinct ones do, the smallest are among them,
    # so the whole set need not be built (a repetitive text may have fewer: then it is).
    bound = -(1 << 63) + ((4 * SKETCH_SIZE) << 64) // len(hashes)
    # ``operator.lt`` is called faster than a bound ``bound.__gt__``: a third of the filter's cost.
    below = set(compress(hashes, map(lt, hashes, repeat(bound))))
    # The smallest, by a sort (in C) rather than ``heapq.nsmallest`` (a loop in Python).
    return frozenset(sorted(below if len(below) >= SKETCH_SIZE else set(hashes))[:SKETCH_SIZE])


def sketch_similarity(a: frozenset[int], b: frozenset[int]) -> float:
    """Dice coefficient of two texts estimated from their bottom-k sketches."""
    merged = sorted(a | b)[:SKETCH_SIZE]  # the bottom-k of the union (a sort runs in C)
    if not merged:
        return 0.0
    both = len(a.intersection(b, merged))  # of them, in both sketches
    resemblance = both / len(merged)
    return 2 * resemblance / (1 + resemblance)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Text:
    """A text prepared once for comparisons: exact forms when short, a sketch when long, and an
    embedding vector when an embedding function is configured."""

    text: str
    words: str | None
    sketch: frozenset[int] | None
    vector: tuple[float, ...] | None

    @classmethod
    def of(cls, text: str, embed: Embedder | None = None) -> Text:
        vector = tuple(float(x) for x in embed(text)) if embed is not None else None
        if len(text) > LONG_TEXT:
            return cls(text="", words=None, sketch=sketch(text), vector=vector)
        return cls(text=text, words=content_words(text), sketch=None, vector=vector)


def similarity(a: Text, b: Text, cutoff: float = 0.0) -> float:
    """How alike two prepared texts are, from 0 to 1 (below ``cutoff`` may be reported as 0)."""
    if a.vector is not None and b.vector is not None:
        return cosine(a.vector, b.vector)
    if a.sketch is not None or b.sketch is not None:
        if a.sketch is None or b.sketch is None:
            return 0.0  # one short, one over LONG_TEXT: their lengths alone keep them apart
        return sketch_similarity(a.sketch, b.sketch)
    if a.text == b.text:
        return 1.0
    from rapidfuzz.distance import Indel, LCSseq  # here: loading it costs every start-up

    chars = LCSseq.normalized_similarity(a.text, b.text, score_cutoff=cutoff)
    words = 0.0
    if a.words and b.words:
        words = Indel.normalized_similarity(a.words, b.words, score_cutoff=cutoff)
    return max(chars, words)


@dataclasses.dataclass(frozen=True, slots=True)
class Chant:
    """One passage that an output repeats: how often, and what share of the output is repeats."""

    passage: str
    count: int
    share: float


class ChantScanner:
    """Finds an output that repeats one passage over and over, fed piece by piece.

    A passage is a sentence or a line (at least ``CHANT_MIN_PASSAGE`` characters, compared
    lower-cased with spaces collapsed). The output chants when one passage occurs
    ``CHANT_REPEATS`` times or more and repeated passages make up at least ``CHANT_SHARE`` of an
    output of at least ``CHANT_MIN_TEXT`` characters. Memory is bounded: the unfinished passage is
    cut at ``_CHANT_MAX_PENDING`` characters and at most ``_CHANT_MAX_KEYS`` passages are counted.
    Repeated short lines (a code block's ``}`` or ``return x``) are below the passage length and
    never count.
    """

    __slots__ = ("_counts", "_pending", "_repeated", "_top", "_total")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._pending = ""
        self._total = 0
        self._repeated = 0
        self._top: tuple[str, int] = ("", 0)

    def feed(self, piece: str) -> Chant | None:
        """Add text; return the chant if the output seen so far chants."""
        self._total += len(piece)
        text = self._pending + piece
        pieces = text.translate(_PASSAGE_ENDS).split("\n")
        self._pending = pieces.pop()[-_CHANT_MAX_PENDING:]
        for passage in pieces:
            self._count(passage)
        return self.finding()

    def close(self) -> Chant | None:
        """Count the unfinished last passage and return the final verdict."""
        if self._pending:
            self._count(self._pending)
            self._pending = ""
        return self.finding()

    def _count(self, passage: str) -> None:
        key = " ".join(passage.lower().split())
        if len(key) < CHANT_MIN_PASSAGE:
            return
        counts = self._counts
        seen = counts.get(key)
        if seen is None:
            if len(counts) < _CHANT_MAX_KEYS:
                counts[key] = 1
            return
        counts[key] = seen + 1
        self._repeated += len(key)
        if seen + 1 > self._top[1]:
            self._top = (key, seen + 1)

    def finding(self) -> Chant | None:
        passage, count = self._top
        if count < CHANT_REPEATS or self._total < CHANT_MIN_TEXT:
            return None
        share = self._repeated / self._total
        if share < CHANT_SHARE:
            return None
        return Chant(passage, count, round(share, 3))


def chant_of(text: str) -> Chant | None:
    """The chant in one whole output, if it has one."""
    if len(text) < CHANT_MIN_TEXT:
        return None
    scanner = ChantScanner()
    scanner.feed(text)
    return scanner.close()


def pieces_of(chunks: Iterable[Any]) -> Iterable[str]:
    for chunk in chunks:
        if isinstance(chunk, str):
            yield chunk
