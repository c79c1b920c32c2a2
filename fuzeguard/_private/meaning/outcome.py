"""What a call's outcome means, computed once per call for every layer: its skeleton and whether
it failed.

"Progress" is a change in meaning, not in bytes. The *skeleton* of a result is the result with its
volatile parts taken out, so that two results that differ only in them fingerprint alike:

* in structures (and in JSON held in strings, at any depth, as MCP ``content`` blocks carry it):
  keys whose name says they are volatile (``id``, ``*_id``, ``uuid``, ``*_at``, ``timestamp``,
  ``duration*``, ``elapsed*``, ``*_ms``, ``pid``, ``cwd``, ``execution_count``, ``attempt``,
  ``revision`` ...; camelCase names too) are left out, and values shaped like a uuid, a hex digest
  or a timestamp are masked whatever their key;
* in text: uuids, hex digests and addresses, timestamps and clock times, durations (``0.52s``,
  ``120 ms``), pids, temporary directories, counters named as such (``attempt 3``, ``revision 7``,
  ``In [12]``, ``id=4``) and a shell's ``line N:`` prefix are masked.

Other numbers are kept: a status moving from 12% to 40% is progress, and so is a test run whose
count of failures changes.

A result *fails* when the tool raised, and also when it reads as an error without raising: a text
whose first line, or one of its last three, is a traceback, ``SomethingError: ...``,
``error: ...``, ``fatal: ...``, ``command not found`` or ``No such file or directory``; a
mapping with a non-empty ``error``, a ``status`` of ``"error"``/``"failed"``, ``ok``/``success``
false, or MCP's ``isError``. Errors are compared by what was tried: the same call failing again is
a repeat, however the message drifts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from fuzeguard._private.meaning.fingerprint import fingerprint

#: The label recorded as ``CallRecord.error`` for a result that reads as an error.
TEXT_ERROR: Final = "ErrorResult"

_MAX_JSON_TEXT: Final = 1 << 20
_MAX_DEPTH: Final = 32
_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# Volatile key names, compared after splitting camelCase and separators into words.
_VOLATILE_WORDS: Final = frozenset(
    {
        "id", "ids", "uuid", "guid", "uid", "nonce", "etag", "pid", "ppid", "cwd", "pwd",
        "timestamp", "ts", "time", "created", "updated", "modified", "expires", "date",
        "duration", "elapsed", "latency", "took", "runtime", "uptime",
        "attempt", "attempts", "retry", "retries", "revision", "rev", "seq", "sequence",
    }
)
_VOLATILE_LAST: Final = frozenset(
    {"id", "ids", "uuid", "at", "ts", "ms", "seconds", "secs", "sec", "ns", "us", "time",
     "timestamp"}
)
_VOLATILE_FIRST: Final = frozenset({"duration", "elapsed", "latency", "execution", "exec", "working"})
# Keys that end like a volatile one but carry meaning.
_KEEP_WORDS: Final = frozenset({"exit", "status", "return", "error", "result", "failure", "line"})

# Volatile tokens in text: those that start with a digit and those that start with a hex letter,
# in one pattern scanned once (where one may start is known from the first character, so the
# engine skips quickly between candidate places; the counters, led by words, are a pattern of
# their own behind a cheap pre-test). Both kinds are found in one left-to-right pass, so a UUID
# that starts with a digit is masked whole even when a group inside it starts with a letter.
_VOLATILE_TOKEN = re.compile(
    r"""[0-9a-fA-F](?<![\w.][0-9a-fA-F])(?:
      (?<=\d)(?:
        [0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?!\w)  # uuid
      | x[0-9a-fA-F]{4,}(?!\w)                                                     # address
      | \d{3}-\d\d-\d\d(?:[T\s]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?  # date
      | \d?:\d\d:\d\d(?:[.,]\d+)?                                                    # clock
      | \d*(?:\.\d+)?\s?(?:ms|msec|milliseconds?|s|secs?|seconds?|µs|us|ns|min|minutes?)(?!\w)
      | \d{9}(?:\d{3})?(?![\w.])                                                    # epoch, id
      | (?<=[A-Za-z]:\d)\d*(?::\d+)?(?=:)              # a position: Foo.java:12: error, a.py:3:5:
      | (?<=\[\d)\d*,\s?\d+(?=\])                                  # a position: Foo.java:[12,5]
      | (?P<digest>[0-9a-fA-F]{6,})(?![\w-])                      # digest: checked by _hex
      )
    | (?<=[a-fA-F])(?:
        [0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}       # uuid
      | (?P<hexdigest>[0-9a-fA-F]{6,})                             # digest: checked by _hex
      )(?![\w-])
    )""",
    re.VERBOSE,
)


def _ascii_form(pattern: str) -> str:
    """``pattern`` (verbose) for ``re.ASCII``, matching in a text that is all ASCII exactly what it
    matches without the flag: there ``\\w`` and ``\\d`` are the same characters either way, and
    ``\\s`` is, once the four ASCII separators Unicode counts as spaces (``\\x1c``-``\\x1f``) are
    added to it."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            escape = pattern[i : i + 2]
            if escape == "\\s":
                escape = "\\s\\x1c-\\x1f" if in_class else "[\\s\\x1c-\\x1f]"
            elif escape in ("\\S", "\\b", "\\B"):
                raise ValueError(f"{escape} has no ASCII form here")
            out.append(escape)
            i += 2
            continue
        if c == "#" and not in_class:  # a comment, to the end of its line
            end = pattern.find("\n", i)
            i = len(pattern) if end < 0 else end
            continue
        if c == "[" and not in_class:
            in_class = True
            if pattern[i + 1 : i + 2] == "]" or pattern[i + 1 : i + 3] == "^]":
                raise ValueError("a class led by ']' has no ASCII form here")
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


# ``_VOLATILE_TOKEN`` for a text that is all ASCII (most are): the same matches, found faster.
_VOLATILE_ASCII = re.compile(_ascii_form(_VOLATILE_TOKEN.pattern), re.VERBOSE | re.ASCII)
# Words that name an identifier or a retry's number, which drift without meaning. A count of work
# done (``iteration 1200``, ``run 3``, ``job 4``, ``build 17``) is not among them: in a poll it is
# the progress.
_COUNTERS = ("pid", "PID", "process", "attempt", "try", "retry", "revision", "rev", "execution",
             "request", "session", "sess", "conversation")
# The counters' branches, each beside a probe: a pattern that finds, in the lowercased text, what
# every match of the branch holds (lowercasing maps the branch's letters one to one and leaves
# spaces and digits as they are, so a text the branch matches is one its probe finds).
_WORD_LED_PROBED: Final = (
    # pid 4242, session sess-17, job job_12
    *((rf"{c.lower()}\s?[#:=]?\s?(?:[a-z]{{1,8}}[-_])?\d",
       rf"{w}\s?[#:=]?\s?(?:[A-Za-z]{{1,8}}[-_])?\d+(?!\w)")
      for c in _COUNTERS for w in dict.fromkeys((c, c.capitalize()))),
    # A position in a traceback: File "x.py", line 12 / Cell In[1], line 10 (a line number
    # elsewhere, "line 0" -> "line 1", may be the progress).
    (r'", line\s\d', r'", line\s\d+(?!\w)'),
    (r"id\s?[=:]", r"id(?<![A-Za-z]id)\s?[=:]\s?[\"']?[\w.-]+"),  # id=4, request_id: ab12
    (r"id\s?[=:]", r"ID(?<![A-Za-z]ID)\s?[=:]\s?[\"']?[\w.-]+"),
    (r"id\s?[=:]", r"Id(?<=[a-z]Id)\s?[=:]\s?[\"']?[\w.-]+"),  # messageId=om_1
    (r"in\s?\[\d", r"In\s?\[\d+\]"), (r"out\s?\[\d", r"Out\s?\[\d+\]"),  # notebook counters
    (r"in\s?\[\d", r"Cell In\s?\[\d+\](?:, line\s\d+(?!\w))?"),
    (r"/tmp/[^\s'\"/:]*\d", r"/tmp/[^\s'\"/:]*\d[^\s'\"/:]*"),  # temporary dirs
    (r"/var/folders/", r"/var/folders/[^\s'\"/:]*"),
)
_WORD_LED_BRANCHES: Final = tuple(branch for _, branch in _WORD_LED_PROBED)


def _by_first_character(branches: tuple[str, ...]) -> str:
    """One alternation of ``branches`` (each led by a plain character), grouped by that character:
    ``p(?:id...|rocess...)|a(?:ttempt...)|...``. Branches led by different characters never match
    at the same place, and those led by one keep their order, so it matches exactly what the
    plain alternation matches; the engine skips to places where a leading character is (every
    group starts with one) and there tries one group instead of every branch."""
    groups: dict[str, list[str]] = {}
    for branch in branches:
        groups.setdefault(branch[0], []).append(branch[1:])
    return "|".join(f"{re.escape(c)}(?:{'|'.join(rest)})" for c, rest in groups.items())


_WORD_LED = re.compile(_by_first_character(_WORD_LED_BRANCHES))
# What every match of _WORD_LED holds, lowercased: a counter's word (``try`` in ``retry``, ``rev``
# in ``revision``, ``id`` in ``pid``), ``id``, the ``[`` of a notebook counter, a temporary
# directory. Plain substring tests on the lowercased text rule most texts out at once.
_WORD_HINTS: Final = ("id", "process", "attempt", "try", "rev", "execution", "request",
                      "session", "conversation", "[", "/tmp/", "/var/folders/", "line ", "sess")
# The probes, one search each (every probe starts with plain characters, which the engine skips
# to), with the branches each one stands for.
_LED_PROBES: Final = tuple(
    (re.compile(probe).search, tuple(i for i, (p, _) in enumerate(_WORD_LED_PROBED) if p == probe))
    for probe in dict.fromkeys(probe for probe, _ in _WORD_LED_PROBED)
)
# The counter mask made of the branches a text's probes found, by the branches' positions.
_LED_BY_BRANCHES: dict[tuple[int, ...], re.Pattern[str]] = {}
_LED_REMEMBERED: Final = 256
# Shorter texts are masked with the whole pattern: the probes would cost more than they save.
_PROBED_FROM: Final = 256


def _word_led(text: str) -> re.Pattern[str] | None:
    """The counter mask to apply to ``text``: ``_WORD_LED`` without the branches that match nowhere
    in it, which the engine would otherwise try at every place one of their leading characters is
    (a branch that matches nowhere takes no match from another: the result is the same), or the
    whole of it for a short text. None when ``_WORD_LED`` cannot match ``text``: it holds none of
    ``_WORD_HINTS``, or no probe finds anything."""
    low = text.lower()
    for hint in _WORD_HINTS:  # a plain loop: half the cost of any() over a generator
        if hint in low:
            break
    else:
        return None
    if len(text) < _PROBED_FROM:
        return _WORD_LED
    found: list[int] = []
    for probe, branches in _LED_PROBES:
        if probe(low):
            found += branches
    if not found:
        return None
    key = tuple(sorted(found))
    pattern = _LED_BY_BRANCHES.get(key)
    if pattern is None:
        if len(_LED_BY_BRANCHES) >= _LED_REMEMBERED:
            _LED_BY_BRANCHES.clear()
        pattern = _LED_BY_BRANCHES[key] = re.compile(
            _by_first_character(tuple(_WORD_LED_BRANCHES[i] for i in key))
        )
    return pattern


_SHELL_LINE = re.compile(r"^(?:[\w./-]+:\ )?line\ \d+:", re.MULTILINE)  # bash: line 12:
_HAS_DIGIT = re.compile(r"\d")
# Long texts are masked at both ends, where tools print timings, ids and counters; the middle of a
# long text is compared as it is (masking all of it would cost more than the call is worth).
_MASK_WHOLE: Final = 16384
_MASK_ENDS: Final = 8192
_VALUE_MASK = re.compile(
    r"""\A(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}
    | (?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{16,}
    | \d{4}-\d\d-\d\d[T\s]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)\Z""",
    re.VERBOSE,
)
_ERROR_LINE = re.compile(
    r"""\A\s*(?:Traceback\ \(most\ recent\ call\ last\)
    | [A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::|\Z)
    | (?i:error|fatal|exception)\b\s*[:!\]]
    | \[?(?i:error)\]
    | error\[E\d{4}\]:                                 # rustc: error[E0425]: ...
    | npm\ ERR!                                       # npm ERR! code ELIFECYCLE
    | [\w./-]+\.go:\d+:\d+:\ \S                         # go: ./main.go:12:5: undefined: x
    | .{0,200}?(?:command\ not\ found|No\ such\ file\ or\ directory|Permission\ denied
        |is\ not\ recognized\ as\ an\ internal\ or\ external\ command))""",
    re.VERBOSE,
)
# Error lines looked for between the ends of a command's output (``read_failure``, deep): stricter
# than at the ends (a name-led error needs its message, and a line may be led by a list mark or
# a linter's code, as in ``- E999 SyntaxError: invalid syntax``).
_DEEP_START: Final = r"^[ \t]*(?:[-*>|]\s+|E {3})?(?:[A-Z]\d{2,4}\s+)?(?:"
# Its branches, each with the words one of which every match of the branch holds.
_DEEP_BRANCHES: Final = (
    (("Error", "Exception"), r"[A-Za-z_][\w.]*(?:Error|Exception)\b:\s*\S.*"),
    (("[ERROR]", "[FATAL]"), r"\[(?:ERROR|FATAL)\].*"),
    (("error", "ERROR", "Error", "fatal", "FATAL", "Fatal"),
     r"(?:error|ERROR|Error|fatal|FATAL|Fatal)\b\s*:\s*\S.*"),
    (("BUILD FAILURE",), r"BUILD FAILURE.*"),
    (("error[E",), r"error\[E\d{4}\]:.*"),
    (("npm ERR!",), r"npm ERR!.*"),
    ((".go:",), r"[\w./-]+\.go:\d+:\d+: \S.*"),
    (("command not found", "No such file or directory", "Permission denied"),
     r".{0,200}?(?:command not found|No such file or directory|Permission denied).*"),
)


def _deep_pattern(branches: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(_DEEP_START + "|".join(branches) + ")$", re.MULTILINE)


_DEEP_ERROR = _deep_pattern(tuple(branch for _, branch in _DEEP_BRANCHES))
# _DEEP_ERROR without the branches a text holds no word of, by the branches kept (a branch that
# matches nowhere takes no match from another: the search finds the same line). The last branch
# tries up to 200 characters at the start of every line, so leaving it out when no text can
# match it makes the search several times faster.
_DEEP_BY_BRANCHES: dict[tuple[bool, ...], re.Pattern[str] | None] = {}
_TRACEBACK_END = re.compile(
    r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*$", re.MULTILINE
)
_TRACEBACK_LOOK: Final = 65536
_FAILURE_CHARS: Final = 300
_ECHO = re.compile(
    r"'[^'\n]*'|\"[^\"\n]*\"|`[^`\n]*`|\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{8,}\b|\d+(?:\.\d+)?"
)
_TEMPLATE_CHARS: Final = 300
# Words one of which every error line holds: a cheap first look before the line patterns (plain
# substring tests, which are much faster than one regex alternation over the text).
_ERROR_WORDS: Final = ("rror", "RROR", "xception", "raceback", "atal", "Exit", "Interrupt",
                       "not found", "No such file", "denied", "not recognized", "ERR!", ".go:")
_ERROR_LOOK: Final = 2000
_FAILED_STATUS: Final = frozenset({"error", "failed", "failure", "fail", "errored", "exception"})


# A tool answers with the same keys call after call: the verdict on each short key is kept (a
# bounded number of them, forgotten all at once when full).
_KEY_VERDICTS: dict[str, bool] = {}
_KEY_REMEMBERED: Final = 64
_KEYS_REMEMBERED: Final = 4096


def is_volatile_key(key: str, extra: frozenset[str]) -> bool:
    """Whether a result key names a volatile value (``requestId``, ``duration_ms``, ``cwd``...)."""
    if extra and key.lower() in extra:
        return True
    verdict = _KEY_VERDICTS.get(key)
    if verdict is None:
        verdict = _volatile_name(key)
        if len(key) <= _KEY_REMEMBERED:
            if len(_KEY_VERDICTS) >= _KEYS_REMEMBERED:
                _KEY_VERDICTS.clear()
            _KEY_VERDICTS[key] = verdict
    return verdict


def _volatile_name(key: str) -> bool:
    """``is_volatile_key`` without the user's own volatile names."""
    parts = [w.lower() for w in _SPLIT.split(key) if w]
    if not parts:
        return False
    if len(parts) == 1:
        return parts[0] in _VOLATILE_WORDS
    if parts[0] in _KEEP_WORDS or parts[-1] in _KEEP_WORDS:
        return False
    return (
        parts[-1] in _VOLATILE_LAST or parts[0] in _VOLATILE_FIRST
        or key.lower() in _VOLATILE_WORDS
    )


_DIGESTS: Final = ("digest", "hexdigest")


def _hex(match: re.Match[str]) -> str:
    token = match.group()
    if match.lastgroup in _DIGESTS and (
        token.isdigit() or not any(c.isdigit() for c in token)
    ):
        return token  # a plain number, or a word that happens to be hex-shaped ("defaced")
    return "_"


def _mask(text: str) -> str:
    if not _HAS_DIGIT.search(text):
        return text  # every volatile token has a digit
    text = (_VOLATILE_ASCII if text.isascii() else _VOLATILE_TOKEN).sub(_hex, text)
    led = _word_led(text)
    if led is not None:
        text = led.sub("_", text)
    return _SHELL_LINE.sub("_", text) if "line " in text else text


def mask_text(text: str) -> str:
    """``text`` with its volatile tokens replaced by ``_`` (at both ends only, for a long text)."""
    if len(text) <= _MASK_WHOLE:
        return _mask(text)
    head, tail = text[:_MASK_ENDS], text[-_MASK_ENDS:]
    return _mask(head) + text[_MASK_ENDS:-_MASK_ENDS] + _mask(tail)


def skeleton(value: Any, extra: frozenset[str] = frozenset(), depth: int = 0) -> Any:
    """``value`` with volatile keys left out and volatile tokens masked (see the module doc).

    Plain data only is rebuilt (dicts, lists, tuples, strings); anything else is returned as it is
    and fingerprinted by the usual encoding. Never raises for plain data.
    """
    t = type(value)
    if t is str:
        return _skeleton_text(value, extra, depth)
    if depth >= _MAX_DEPTH:
        return value
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is str and is_volatile_key(k, extra):
                continue
            out[k] = skeleton(v, extra, depth + 1)
        return out
    if t is list or t is tuple:
        return [skeleton(v, extra, depth + 1) for v in value]
    return value


def _skeleton_text(text: str, extra: frozenset[str], depth: int) -> Any:
    head = text[:1]
    if head.isspace():
        head = text.lstrip()[:1]
    if head in ("{", "[") and len(text) <= _MAX_JSON_TEXT and depth < _MAX_DEPTH:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):
            pass
        else:
            if isinstance(parsed, (dict, list)):
                return skeleton(parsed, extra, depth + 1)
    if _VALUE_MASK.match(text):
        return "_"
    return mask_text(text)


def error_text(error: BaseException) -> str:
    """``"Name: message"`` for an exception (its name alone when the message is empty or
    unreadable): the text traces record and errors are fingerprinted from."""
    name = type(error).__name__
    try:
        message = str(error)
    except Exception:
        message = ""
    return f"{name}: {message}" if message else name


def failure_fingerprint(label: str | None, detail: str | None = None) -> bytes:
    """The fingerprint of a failure, by what failed: its ``"Name: message"`` label (an exception,
    a recorded error) and the error line found in its output, each with its volatile parts masked
    (line numbers, counters, ids, pids, times), so that the same failure matches itself however
    its message drifts, and two different failures stay apart."""
    return fingerprint((
        "failed",
        mask_text(label[:_FAILURE_CHARS]) if label else "",
        mask_text(detail[:_FAILURE_CHARS]) if detail else "",
    ))


def output_failure(output: Any) -> str:
    """What failed, read from the output of a call that is known to have failed (a trace line
    with both an ``error`` and a ``result``): the error line found anywhere in it, else the end
    of its output (its last ``_FAILURE_CHARS`` characters, not only its last line: outputs that
    differ above one common footer are different failures)."""
    if type(output) is not str:
        return ""
    line = _failure_text(output, True)
    if line:
        return line
    return output[-_FAILURE_CHARS:].strip()


def error_template(text: str) -> str:
    """A failure's ``"Name: message"`` text with the parts that echo inputs masked (quoted
    strings, numbers, hex ids): ``No such file: 'a.py'`` and ``... 'b.py'`` share one template."""
    return _ECHO.sub("_", text[:_TEMPLATE_CHARS])


def reads_as_error(value: Any, deep: bool = False) -> bool:
    """Whether a result that did not raise still reports a failure (see the module doc); ``deep``
    also looks for the error between the ends of a text (``read_failure``)."""
    return read_failure(value, deep) is not None


def read_failure(value: Any, deep: bool = False) -> str | None:
    """What a result that did not raise reports as its failure, or ``None`` when it reads as no
    failure: the error line of a text, ``""`` for a mapping that reports one (the mapping is the
    failure as a whole).

    A text is read at its ends: its first line, or one of its last three (a traceback or a
    compiler ends with the error; a notebook adds a line or two after it). ``deep`` looks at every
    line near either end as well, for the output of a command or an edit: a ``SyntaxError`` followed
    by a footer, a build's ``[ERROR]`` lines, the last line of a traceback in the middle. Reads and
    searches are not read deeply: a file or a search hit that shows an error line is content."""
    try:
        t = type(value)
        if t is str:
            return _failure_text(value, deep)
        return "" if _reads_as_error(value, 0) else None
    except Exception:
        return None


def _error_word(text: str) -> bool:
    """Whether the first or the last ``_ERROR_LOOK`` characters hold one of ``_ERROR_WORDS``
    (every match of ``_ERROR_LINE`` that ``_reads_as_error`` looks for does)."""
    if len(text) <= _ERROR_LOOK:
        for word in _ERROR_WORDS:  # noqa: SIM110 - a plain loop costs half of any()
            if word in text:
                return True
        return False
    head, tail = text[:_ERROR_LOOK], text[-_ERROR_LOOK:]
    for word in _ERROR_WORDS:  # noqa: SIM110 - a plain loop costs half of any()
        if word in head or word in tail:
            return True
    return False


def _failure_text(text: str, deep: bool) -> str | None:
    """``read_failure`` of a text: its error line, or None."""
    if not text or not _error_word(text):
        return None
    first = text[:_ERROR_LOOK]
    if _ERROR_LINE.match(first):
        if deep or first.lstrip().startswith("Traceback"):
            found = _traceback_error(text)
            if found:
                return found
        return _first_line(first)
    tail = text[-_ERROR_LOOK:].rstrip().splitlines()[1:][-3:]
    for line in tail:
        if _ERROR_LINE.match(line):
            return line.strip()[:_FAILURE_CHARS]
    if not deep:
        return None
    found = _traceback_error(text)
    if found:
        return found
    for part in (first, text[-_ERROR_LOOK:]) if len(text) > _ERROR_LOOK else (text,):
        pattern = _deep_error(part)
        if pattern is None:
            continue
        match = pattern.search(part)
        if match:
            return match.group().strip()[:_FAILURE_CHARS]
    return None


def _deep_error(text: str) -> re.Pattern[str] | None:
    """The pattern of the error lines to look for in ``text``: ``_DEEP_ERROR`` with only the
    branches ``text`` holds a word of, or None when it holds none (nothing can match)."""
    found: list[bool] = []
    for words, _ in _DEEP_BRANCHES:  # plain loops: no list or generator per branch
        for word in words:
            if word in text:
                found.append(True)
                break
        else:
            found.append(False)
    held = tuple(found)
    try:
        return _DEEP_BY_BRANCHES[held]
    except KeyError:
        pass
    kept = tuple(branch for (_, branch), h in zip(_DEEP_BRANCHES, held, strict=True) if h)
    pattern = _DEEP_BY_BRANCHES[held] = _deep_pattern(kept) if kept else None
    return pattern


def _first_line(text: str) -> str:
    return text.lstrip().partition("\n")[0].strip()[:_FAILURE_CHARS]


def _traceback_error(text: str) -> str | None:
    """The error a Python traceback in ``text`` ends with (its first unindented ``Name: ...``
    line after the ``Traceback`` line), or None."""
    start = text.find("Traceback (most recent call last)")
    if start < 0:
        return None
    match = _TRACEBACK_END.search(text, start, start + _TRACEBACK_LOOK)
    return match.group().strip()[:_FAILURE_CHARS] if match else None


def _reads_as_error(value: Any, depth: int) -> bool:
    t = type(value)
    if t is str:
        return _failure_text(value, False) is not None
    if depth > 2:
        return False
    if isinstance(value, Mapping):
        if value.get("isError") is True or value.get("is_error") is True:
            return True
        error = value.get("error")
        if error and not isinstance(error, (bool, int, float)):
            return True
        status = value.get("status")
        if isinstance(status, str) and status.lower() in _FAILED_STATUS:
            return True
        return value.get("ok") is False or value.get("success") is False
    return False
