"""Text read from a trace, for a terminal: control characters written as escapes."""

from __future__ import annotations

import re

# Characters that drive a terminal rather than show: C0 and C1 controls (ESC starts colour,
# cursor and title sequences) and the bidirectional marks and overrides that reorder what is shown.
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` for a terminal: control characters written as escapes (``\\x1b``), so that a
    name read from a trace can never drive the terminal of whoever replays it."""
    if text.isprintable():
        return text
    return CONTROLS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
