"""The line of a config file where a key or table is written, for error messages."""

from __future__ import annotations

import re


def line_of(text: str | None, dotted: str) -> int | None:
    """The line where a dotted key (or table) is written, found by a light scan of the TOML text."""
    if not text:
        return None
    table = ""
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    keyline = re.compile(r'^\s*("[^"]*"|\'[^\']*\'|[A-Za-z0-9_.\-]+)\s*=')
    for number, line in enumerate(text.splitlines(), start=1):
        h = header.match(line)
        if h:
            table = _unquote_dotted(h.group(1))
            if table == dotted:
                return number
            continue
        k = keyline.match(line)
        if k:
            key = _unquote_dotted(k.group(1))
            full = f"{table}.{key}" if table else key
            if full == dotted or full.startswith(dotted + "."):
                return number
    return None


def _unquote_dotted(raw: str) -> str:
    parts = [p.strip().strip("\"'") for p in re.split(r"\.(?=(?:[^\"']*[\"'][^\"']*[\"'])*[^\"']*$)", raw)]
    return ".".join(parts)
