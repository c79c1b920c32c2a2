"""Reading traces: the files a path stands for, lines read with a bounded length (gzip or not),
and the bounded checks of a line's values that replay and merging share."""

import gzip
import io
import json
import json.scanner
import math
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

_scanner: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]  # typeshed types the context as the class
)
_NUMBER = (int, float)

# The longest line read (in characters). Lines are at most a few times trace_max_result_bytes
# long (64 KiB by default); a longer one is reported and skipped. If its end does not come within
# as many characters again, the input is taken for something that is not a trace (``fuze replay
# -`` reading /dev/zero) and the rest of it is not read.
MAX_LINE = 1 << 28
# The deepest nesting a line may have. The writer cuts values at 64 levels, and a tagged value
# takes at most three JSON levels per level of the value.
MAX_LINE_DEPTH = 200
# Positions tried when looking for a whole line glued to the fragment of a torn one.
# The files a directory given to replay stands for.
TRACE_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")


def _finite(value: Any) -> float | None:
    """``value`` as a float if it is a finite JSON number, else None (a 400-digit integer too)."""
    if type(value) not in _NUMBER:
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _show(value: Any, limit: int = 60) -> str:
    """A short repr of a value read from a trace, for messages."""
    if type(value) is int and not -(10**40) < value < 10**40:
        return f"a {len(str(abs(value)))}-digit integer"
    try:
        text = repr(value)
    except ValueError:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _too_deep(value: Any, limit: int) -> bool:
    """Whether a parsed line nests more than ``limit`` levels (walked without recursion)."""
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > limit:
            return True
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                push((child, depth + 1))
    return False


class _Overlong:
    """Stands in for a line longer than the reader's limit; ``ended`` is False when no end of
    line came within twice the limit and reading stopped."""

    __slots__ = ("ended", "size")

    def __init__(self, size: int, ended: bool) -> None:
        self.size = size
        self.ended = ended


def bounded_lines(stream: IO[str], limit: int = MAX_LINE) -> Iterator[str | _Overlong]:
    """The lines of a text stream, each at most ``limit`` characters: a longer line is read
    through (without keeping it) and yielded as an ``_Overlong``. Memory stays bounded on any
    input, and endless input without newlines ends after twice the limit."""
    readline = stream.readline
    while True:
        line = readline(limit + 1)
        if len(line) <= limit or (len(line) == limit + 1 and line[-1] == "\n"):
            if not line:
                return
            yield line
            continue
        size = len(line)
        del line
        while True:
            piece = readline(min(limit, 1 << 20))
            size += len(piece)
            if not piece or piece[-1] == "\n":
                yield _Overlong(size - (piece[-1:] == "\n"), True)
                break
            if size > 2 * limit:
                yield _Overlong(size, False)
                return


class _Unreadable:
    """Marks where a compressed trace broke (truncated or corrupt): nothing after it is read."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


GZIP_MAGIC = b"\x1f\x8b"


def _decompressed(lines: Iterator[str | _Overlong]) -> Iterator[str | _Overlong | _Unreadable]:
    """The lines of a gzip stream; a truncated or corrupt archive ends them with an
    ``_Unreadable`` instead of an exception, so every line before the break is replayed."""
    try:
        yield from lines
    except EOFError:
        yield _Unreadable("the compressed trace ends early (truncated gzip); the rest is lost")
    except (gzip.BadGzipFile, zlib.error) as exc:
        yield _Unreadable(f"the compressed trace is corrupt ({_clip(str(exc))}); the rest is not read")


def open_trace(
    binary: io.BufferedReader, limit: int = MAX_LINE
) -> Iterator[str | _Overlong | _Unreadable]:
    """The bounded lines of a trace read from a binary stream, decompressed first when it starts
    with gzip's magic bytes. Bytes that are not UTF-8 are read as U+FFFD."""
    if binary.peek(2)[:2] == GZIP_MAGIC:
        unzipped = gzip.GzipFile(fileobj=binary, mode="rb")
        text = io.TextIOWrapper(unzipped, encoding="utf-8", errors="replace")
        return _decompressed(bounded_lines(text, limit))
    return bounded_lines(io.TextIOWrapper(binary, encoding="utf-8", errors="replace"), limit)


def _moment(line: str | _Overlong | _Unreadable) -> float:
    """When a trace line's call began, for merging traces (lines without a time, and lines that
    cannot be read, sort first). Parsed as replay parses a line: a hostile one is -inf."""
    if type(line) is not str or line[:1] != "{":
        return -math.inf
    try:
        obj, _ = _scanner(line, 0)
    except (ValueError, StopIteration, RecursionError):
        return -math.inf
    if type(obj) is not dict:
        return -math.inf
    for key in ("at", "ts"):
        value = obj.get(key)
        if value is not None and type(value) is not bool:
            moment = _finite(value)
            if moment is not None:
                return moment
    return -math.inf


def trace_files(paths: Iterable[str]) -> Iterator[str]:
    """Expand the command line's TRACE arguments: a directory stands for its ``*.jsonl`` files
    (and ``*.jsonl.gz``)."""
    for path in paths:
        if path != "-" and os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if name.endswith(TRACE_SUFFIXES) and os.path.isfile(full):
                    yield full
        else:
            yield path
