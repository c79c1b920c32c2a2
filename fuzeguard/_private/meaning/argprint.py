"""Code generated per function: binds, encodes and fingerprints a call's arguments in one pass.

Most tools are called with all their parameters, all positional or all by name, each a short
string, a number, a boolean or None. For those calls the function ``compile_binder`` makes for a
signature builds exactly the mapping ``Binder.arguments`` builds, and exactly the fingerprint
``fingerprint(arguments, prefix=...)`` gives, without a loop, a sort or a method call per value:
the parameters' order in the encoding is known when the guard is built (key encodings never
start one another, so sorting the key-and-value encodings sorts by key). Calls made otherwise (a
default left out, positional and named arguments mixed) are bound by ``Binder`` and then
fingerprinted by the function ``compile_printer`` makes, from the same encoding. Any value of
another type, or a long text, gets ``None`` and takes the general path.

The generated source holds no name of the user's: parameter names and their encodings are passed
in as values (``_n0``, ``_k0``...), so nothing a signature says is ever executed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from blake3 import blake3

from fuzeguard._private.meaning.fingerprint import _STREAM_FROM as STREAM_FROM
from fuzeguard._private.meaning.fingerprint import FINGERPRINT_BYTES

BindAndPrint = Callable[[tuple[Any, ...], Mapping[str, Any]], "tuple[dict[str, Any], bytes] | None"]
PrintBound = Callable[[Mapping[str, Any]], "bytes | None"]

# Longest signature given a generated binder: beyond it the general path is as good.
MAX_PARAMS = 12


def key_encoding(name: str) -> bytes:
    """How ``fingerprint`` encodes a mapping key (a string)."""
    raw = name.encode("utf-8", "surrogatepass")
    return b"s%d:%b" % (len(raw), raw)


def _environment(names: tuple[str, ...], prefix: bytes) -> dict[str, Any]:
    env: dict[str, Any] = {
        "_blake3": blake3, "_size": FINGERPRINT_BYTES, "_stream": STREAM_FROM, "_str": str,
        "_int": int, "_bool": bool, "_float": float, "_type": type, "_len": len,
        "_open": prefix + b"{", "_dict": dict,
    }
    for i, name in enumerate(names):
        env[f"_n{i}"] = name
        env[f"_k{i}"] = key_encoding(name)
    return env


def _encoding(names: tuple[str, ...], kept: list[int], result: str) -> list[str]:
    """Source lines that encode values ``v<i>`` of the ``kept`` parameters in the fingerprint's
    order and return ``result`` (an expression of ``fp``), or None for a value they do not take."""
    order = sorted(kept, key=lambda i: key_encoding(names[i]))
    lines: list[str] = []
    for i in order:
        v, p, k = f"v{i}", f"p{i}", f"_k{i}"
        lines += [
            f"    t = _type({v})",
            "    if t is _str:",
            f"        b = {v}.encode('utf-8', 'surrogatepass')",
            "        if _len(b) >= _stream:",
            "            return None",
            f"        {p} = b'%bs%d:%b' % ({k}, _len(b), b)",
            "    elif t is _int:",
            f"        {p} = b'%bi%x;' % ({k}, {v})",
            f"    elif {v} is None:",
            f"        {p} = {k} + b'N'",
            "    elif t is _bool:",
            f"        {p} = {k} + (b'T' if {v} else b'F')",
            "    elif t is _float:",
            f"        {p} = b'%bf%b;' % ({k}, b'nan' if {v} != {v} else {v}.hex().encode())",
            "    else:",
            "        return None",
        ]
    joined = " + ".join(f"p{i}" for i in order)
    lines.append(f"    fp = _blake3(_open + {joined} + b'}}').digest(_size)")
    lines.append(f"    return {result}")
    return lines


def _usable(names: tuple[str, ...]) -> bool:
    return bool(names) and len(names) <= MAX_PARAMS and len(set(names)) == len(names)


def compile_binder(
    names: tuple[str, ...], excluded: frozenset[str], prefix: bytes
) -> BindAndPrint | None:
    """The one-pass binder for a function whose parameters are ``names`` (all positional-or-
    keyword, in order), leaving out ``excluded``; None when there is nothing to gain."""
    kept = [i for i, name in enumerate(names) if name not in excluded]
    if not _usable(names) or not kept:
        return None
    values = [f"v{i}" for i in range(len(names))]
    lines = ["def bind(args, kwargs):", "    if kwargs:"]
    lines.append(f"        if args or _len(kwargs) != {len(names)}:")
    lines.append("            return None")
    lines.append("        try:")
    for i in range(len(names)):
        lines.append(f"            v{i} = kwargs[_n{i}]")
    lines.append("        except KeyError:")
    lines.append("            return None")
    lines.append("        bound = _dict(kwargs)")
    for i, name in enumerate(names):
        if name in excluded:
            lines.append(f"        del bound[_n{i}]")
    lines.append(f"    elif _len(args) == {len(names)}:")
    lines.append(f"        {', '.join(values)}{',' if len(values) == 1 else ''} = args")
    pairs = ", ".join(f"_n{i}: v{i}" for i in kept)
    lines.append(f"        bound = {{{pairs}}}")
    lines.append("    else:")
    lines.append("        return None")
    lines += _encoding(names, kept, "bound, fp")
    env = _environment(names, prefix)
    exec("\n".join(lines), env)  # generated from the shape of the signature only (see above)
    bind: BindAndPrint = env["bind"]
    return bind


def compile_printer(names: tuple[str, ...], prefix: bytes) -> PrintBound | None:
    """The fingerprint of a bound mapping whose keys are exactly ``names`` (a function's kept
    parameters), as ``fingerprint(bound, prefix=prefix)`` gives it; None for another mapping or
    a value it does not take."""
    if not _usable(names):
        return None
    lines = ["def fingerprint_bound(bound):", f"    if _len(bound) != {len(names)}:",
             "        return None", "    try:"]
    for i in range(len(names)):
        lines.append(f"        v{i} = bound[_n{i}]")
    lines += ["    except (KeyError, TypeError):", "        return None"]
    lines += _encoding(names, list(range(len(names))), "fp")
    env = _environment(names, prefix)
    exec("\n".join(lines), env)  # generated from the shape of the signature only (see above)
    printer: PrintBound = env["fingerprint_bound"]
    return printer
