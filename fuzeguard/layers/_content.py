"""What a result says, for the layers that judge results: text, content units and "nothing new".

Shared by ``progress``, ``cost_velocity`` and ``semantic`` so that "did this call bring anything new?"
is answered in one place.

Content of a result, as ``content_of`` extracts it once per call (the ``CONTENT`` feature, shared by
the layers that read it):

* an error is always content: its class name and its message *template* (quoted strings, numbers and
  hex ids masked), so that the same failure with varied inputs is recognised as the same error;
* a non-error result is reduced to *units*: word pairs of each line of text (pairs do not cross
  lines, so reordering the items of a list of results adds nothing new), and ``key=value`` for
  numbers and booleans inside structures, so that a counter that moves is new content. Layers are
  given the result's skeleton, so volatile parts (ids, timestamps...) are already out, and words
  that only echo the call's string arguments are masked (``echo_of``);
* a result with no words at all (an empty output, a divider line), ``None`` or a boolean is no
  evidence either way (``NEUTRAL``). Short answers ("OK", "No results found.") are content: whether
  an "OK" is progress depends on the call (a write with new arguments: yes; a search: no), which
  the layers judge;
* a result with more than ``SMALL_TEXT`` characters of text is judged by its fingerprint only
  (``LARGE``): collecting its units would cost more than the window is worth, and near-copies of long
  texts are the semantic layer's job.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence, Set
from itertools import pairwise
from typing import Any, Final

from fuzeguard._private.judging.layer import Feature
from fuzeguard._private.meaning.outcome import error_template as template_of
from fuzeguard._private.meaning.outcome import error_text
from fuzeguard._private.meaning.records import CallRecord
from fuzeguard.layers._evidence import ACKNOWLEDGING, INFORMING

SMALL_TEXT: Final = 4096
NEUTRAL: Final = None
LARGE: Final = "large"

_ECHO_ITEMS: Final = 16
_ECHO_CHARS: Final = 2000
_NO_ECHO: Final[frozenset[str]] = frozenset()
_WORD = re.compile(r"\w+")
# The same words in a text that is all ASCII (the common case), found faster: in ASCII, ``\w``
# is the same set of characters with the flag or without it.
_ASCII_WORD = re.compile(r"\w+", re.ASCII)


def error_template(error: BaseException | str) -> str:
    """An error's class and message with the parts that echo inputs masked (see
    ``fuzeguard._private.meaning.outcome.error_template``)."""
    return template_of(error if isinstance(error, str) else error_text(error))


class _Budget(Exception):
    """Raised inside the walk when the text grows past ``SMALL_TEXT``."""


def echo_of(arguments: Mapping[str, Any]) -> frozenset[str]:
    """The words of a call's string arguments: a result that only echoes them ("No results found
    for 'x'") says nothing new about a new ``x``."""
    found: set[str] = set()
    try:
        for value in arguments.values():
            t = type(value)
            if t is str:  # the common cases, without the tuple
                value = value[:_ECHO_CHARS]
                found.update((_ASCII_WORD if value.isascii() else _WORD).findall(value))
                continue
            if t is int or t is float or t is bool or value is None:
                continue
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items[:_ECHO_ITEMS]:
                if isinstance(item, str):
                    found.update(_WORD.findall(item[:_ECHO_CHARS]))
    except Exception:
        return frozenset()
    return frozenset(found)


def content_of(
    result: Any, error: BaseException | None, echo: frozenset[str] = frozenset()
) -> frozenset[Any] | str | None:
    """The content units of one call's outcome, ``LARGE``, or ``NEUTRAL`` (no evidence); words in
    ``echo`` (see ``echo_of``) are masked.

    Never raises: a result that cannot be read (its ``__str__`` fails) is no evidence."""
    try:
        return _content(result, error, echo)
    except Exception:
        return NEUTRAL


def _content(
    result: Any, error: BaseException | None, echo: frozenset[str]
) -> frozenset[Any] | str | None:
    if error is not None:
        template = error_template(error)
        if echo:
            template = _WORD.sub(lambda m: "_" if m.group() in echo else m.group(), template)
        return frozenset((("!", template),))
    if result is None or isinstance(result, bool):
        return NEUTRAL
    if type(result) is str and len(result) <= SMALL_TEXT and "\n" not in result:
        # The common case, a one-line text, without the walk.
        words = _WORD.findall(result)
        if echo:
            words = [w if w not in echo else "_" for w in words]
        if len(words) < 2:
            return frozenset(words) if words else NEUTRAL
        return frozenset(pairwise(words))
    units: set[Any] = set()
    words = [0, 0]  # words seen, characters seen
    try:
        _walk(result, None, units, words, 0, echo)
    except _Budget:
        return LARGE
    if not words[0] and not units:
        return NEUTRAL
    return frozenset(units)


def _walk(
    value: Any, key: str | None, units: set[Any], counts: list[int], depth: int,
    echo: frozenset[str],
) -> None:
    t = type(value)
    if t is int or t is float or t is bool or value is None:  # the commonest, without isinstance
        units.add(f"{key}={value!r}")
    elif t is str:
        _text_units(value, units, counts, echo)
    elif t is dict and depth <= 32:
        for k, v in value.items():
            _walk(v, str(k), units, counts, depth + 1, echo)
    elif isinstance(value, str):
        _text_units(value, units, counts, echo)
    elif isinstance(value, (bytes, bytearray)):
        text = bytes(value[: SMALL_TEXT + 1]).decode("utf-8", "replace")
        _text_units(text, units, counts, echo)
    elif isinstance(value, (bool, int, float)) or value is None:
        units.add(f"{key}={value!r}")
    elif depth > 32:
        return
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _walk(v, str(k), units, counts, depth + 1, echo)
    elif isinstance(value, (list, tuple, Set)):
        for item in value:
            _walk(item, key, units, counts, depth + 1, echo)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _walk({f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}, key,
              units, counts, depth + 1, echo)
    elif hasattr(value, "model_dump"):
        try:
            dumped = value.model_dump()
        except Exception:
            dumped = repr(value)
        _walk(dumped, key, units, counts, depth + 1, echo)
    else:
        # An unreadable value raises here: no evidence (content_of).
        _text_units(str(value), units, counts, echo)


def _text_units(text: str, units: set[Any], counts: list[int], echo: frozenset[str]) -> None:
    counts[1] += len(text)
    if counts[1] > SMALL_TEXT:
        raise _Budget
    findall = (_ASCII_WORD if text.isascii() else _WORD).findall
    for line in text.splitlines():
        words = findall(line)
        if echo:
            words = [w if w not in echo else "_" for w in words]
        if not words:
            continue
        counts[0] += len(words)
        if len(words) == 1:
            units.add(words[0])
        else:
            units.update(pairwise(words))


def observe(
    arguments: Mapping[str, Any], result: Any, error: BaseException | None,
    kind: str | None = None,
) -> Any:
    """What ``progress`` and ``cost_velocity`` keep of a call: ``NEUTRAL``, ``LARGE``, or its content
    units twice, as they are and with the words that echo the arguments masked (``units_of``
    picks one by the call's kind). Given the call's ``kind``, only the one ``units_of`` reads
    for that kind is computed, and stands in both places (``CONTENT`` is kept ``by_kind``)."""
    t = type(result)
    if (t is int or t is float) and error is None:
        # A number's one unit (``None=3``, as ``_walk`` keeps it) holds no word to mask.
        number = frozenset((f"None={result!r}",))
        return (number, number)
    # Whether the masked units are read (an informing kind, or the kind unknown), and the plain
    # ones (any other kind, or the kind unknown).
    informing = kind is not None and kind in INFORMING
    masks = kind is None or informing
    plain_read = not informing
    if t is str and error is None and len(result) <= SMALL_TEXT and "\n" not in result:
        # A one-line text (``_content``'s common case): its words are split once for both.
        words = (_ASCII_WORD if result.isascii() else _WORD).findall(result)
        if not words:
            return NEUTRAL
        if masks:
            echo = _echo_words(arguments)
            if echo and not echo.isdisjoint(words):
                # The plain units are paired only when read (not for an informing kind).
                masked = _pairs([w if w not in echo else "_" for w in words])
                return (_pairs(words) if plain_read else masked, masked)
        line = _pairs(words)
        return (line, line)
    if t is str and error is None and len(result) <= SMALL_TEXT:
        if not masks:
            return _observe_lines(result, _NO_ECHO)
        units = _observe_lines(result, echo_of(arguments))
        return units if plain_read or type(units) is not tuple else (units[1], units[1])
    plain = content_of(result, error)
    if not isinstance(plain, frozenset):
        return plain
    if not masks:
        return (plain, plain)
    if error is not None:
        masked = _error_units(error, arguments)
    else:
        echo = echo_of(arguments)
        masked = _masked(plain, echo) if echo else plain
    return (plain if plain_read else masked, masked)


def _error_units(error: BaseException, arguments: Mapping[str, Any]) -> frozenset[Any]:
    """An error's content with what echoes the arguments masked: its template (quoted strings and
    numbers masked), and each string argument found whole in it (``No customer alice``). Whole
    arguments, not their words: a word of the query that also names the place searched
    (``jackson`` in ``/src/jackson-core``) is not an echo."""
    template = error_template(error)
    for value in arguments.values():
        if type(value) is str and 2 <= len(value) <= _ECHO_CHARS:
            for phrase in {value, value.strip("'\"` ")}:
                if len(phrase) >= 2 and phrase in template:
                    template = re.sub(rf"(?<!\w){re.escape(phrase)}(?!\w)", "_", template)
    return frozenset((("!", template),))


def _echo_words(arguments: Mapping[str, Any]) -> Set[str]:
    """``echo_of(arguments)``, as a set made without the frozenset when every argument is a
    string, a number, a boolean or ``None`` (the common case): the words of the strings."""
    found: set[str] = set()
    try:
        for value in arguments.values():
            t = type(value)
            if t is str:
                value = value[:_ECHO_CHARS]
                found.update((_ASCII_WORD if value.isascii() else _WORD).findall(value))
            elif not (t is int or t is float or t is bool or value is None):
                return echo_of(arguments)
    except Exception:
        return _NO_ECHO
    return found


def _masked(units: frozenset[Any], echo: frozenset[str]) -> frozenset[Any]:
    """``units`` with the words in ``echo`` masked in each: the same as masking the words before
    pairing them."""
    masked: set[Any] = set()
    for unit in units:
        if type(unit) is tuple:
            a, b = unit
            if a in echo or b in echo:
                unit = ("_" if a in echo else a, "_" if b in echo else b)
        elif unit in echo:
            unit = "_"
        masked.add(unit)
    return frozenset(masked)


def _observe_lines(text: str, echo: frozenset[str]) -> Any:
    """``observe`` of a small text of several lines: the units as ``_text_units`` collects them
    (without the walk), and the same with the words in ``echo`` masked when a line holds one."""
    plain: set[Any] = set()
    hit = False
    findall = (_ASCII_WORD if text.isascii() else _WORD).findall
    for line in text.splitlines():
        words = findall(line)
        if not words:
            continue
        if len(words) == 1:
            plain.add(words[0])
        else:
            plain.update(pairwise(words))
        if echo and not hit and not echo.isdisjoint(words):
            hit = True
    if not plain:
        return NEUTRAL
    frozen = frozenset(plain)
    return (frozen, _masked(frozen, echo) if hit else frozen)


def _pairs(words: list[str]) -> frozenset[Any]:
    """The units of one line's words: its word pairs, or its one word."""
    return frozenset(pairwise(words)) if len(words) > 1 else frozenset(words)


# Kept once per call in ``CallRecord.features["content"]``, however many layers read it.
CONTENT: Final = Feature("content", observe, by_kind=True)


def units_of(record: CallRecord, key: str) -> Any:
    """A record's content as ``observe`` kept it, echo masked for the kinds whose answers are
    information (an answer to a read or a search that only repeats the query says nothing)."""
    content = record.features.get(key, NEUTRAL)
    if type(content) is tuple:
        return content[1] if record.kind in INFORMING else content[0]
    return content


def acknowledged(record: CallRecord, others: Sequence[CallRecord]) -> bool:
    """A call of an acting kind (or an unknown one) with arguments the others did not have, that
    did not fail: its answer, however plain ("OK", "converted a.png"), is progress."""
    if record.kind not in ACKNOWLEDGING or record.error is not None:
        return False
    fn, args_fp = record.fn, record.args_fp
    for r in others:  # noqa: SIM110 - a plain loop: no tuple and no generator per record
        if r.args_fp == args_fp and r.fn == fn:
            return False
    return True


def brought_nothing_new(
    record: CallRecord, others: Sequence[CallRecord], key: str
) -> bool:
    """True if ``record``'s outcome is already in ``others``: same result fingerprint, or (for
    small texts) every content unit of it appears in their results. Neutral and unknown outcomes,
    and acknowledged work (``acknowledged``), are no evidence (False)."""
    content = units_of(record, key)
    if content is NEUTRAL or record.result_fp is None or acknowledged(record, others):
        return False
    fp = record.result_fp
    small = type(content) is frozenset
    known: list[frozenset[Any]] = []
    for other in others:  # one pass: the same fingerprint, and the units of each (``units_of``)
        if other.result_fp == fp:
            return True
        if small:
            units = other.features.get(key, NEUTRAL)
            if type(units) is tuple:
                units = units[1] if other.kind in INFORMING else units[0]
            if type(units) is frozenset:
                known.append(units)
    if not known:
        return False
    for unit in content:  # most results bring a new unit early: stop at the first one
        for units in known:
            if unit in units:
                break
        else:
            return False
    return True


def count_new(records: Sequence[CallRecord], key: str) -> int:
    """How many of ``records`` brought something the others did not have (neutral ones count as
    new: no evidence is no accusation; so does acknowledged work)."""
    new = 0
    for i, record in enumerate(records):
        others = [r for j, r in enumerate(records) if j != i]
        if not brought_nothing_new(record, others, key):
            new += 1
    return new

