"""TOML keys as written: the line of a config file where a key or table is written (for error
messages), and a name written as a key (for the lines fuzeguard suggests)."""

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


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def quoted_key(name: str) -> str:
    """``name`` as one TOML key: bare when it can be, else a quoted string with quotes,
    backslashes and every control or invisible formatting character escaped, so that a key
    written from a name (a tool's) reads back as that name and never spills onto another line."""
    if _BARE.fullmatch(name):
        return name
    out = ['"']
    for ch in name:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
