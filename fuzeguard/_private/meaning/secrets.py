"""Keeping secrets out of everything fuzeguard writes: traces, log events and fingerprints.

Three defences, applied wherever a value leaves the process:

- **names**: a mapping key (at any depth, any case) whose words include a secret name has its
  value replaced by ``"[redacted]"``. A name matches a key when the name's words appear together
  in the key's words: ``api_key`` matches ``api_key``, ``X-Api-Key``, ``apiKey`` and
  ``openai_api_key``; ``token`` matches ``access_token`` and ``token`` but not ``max_tokens``.
  Glued words match too: a name of several words written as one (``privatekey``, ``mfacode``),
  and one word ending in ``token``, ``secret``, ``password``, ``passwd`` or ``passphrase``
  (``apitoken``, ``dbpassword``). ``SECRET_NAMES`` is always applied; the ``redact`` setting adds
  names to it. Values passed through ``*args`` have no name to judge them by: they are written
  as ``"[redacted]"`` whole (``hide_unnamed``).
- **shapes**: in any text (arguments, results, error messages, JSON held in a string), values that
  look like secrets are replaced: ``Bearer``/``Basic`` credentials, ``password`` in a URL, the
  value of a secret-named query parameter, ``name=value`` / ``"name": "value"`` pairs with a
  secret name, private key blocks, and the well-known key formats (``sk-...``, ``ghp_...``,
  ``xox?-...``, ``AKIA...``, ``glpat-...``, ``hf_...``, ``npm_...``, JWTs and others).
- **values**: the values of a call's redacted arguments are also removed wherever else they
  appear in what is written about that call (an error message that quotes the password).

Fingerprints written to traces and logs are keyed with a random secret of the run
(``Run.public_fp``), so a dictionary attack on a low-entropy redacted value cannot be checked
against them; within one run they stay equal exactly when the live ones are, which is all that
replay compares.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[redacted]"

# Matched as word runs of the key (see the module docstring). Kept short and specific: every
# entry here hides data from traces, so a name that is often not a secret does not belong.
SECRET_NAMES: tuple[str, ...] = (
    "password", "passwd", "passphrase", "passcode", "pwd", "pw", "pin", "secret", "token",
    "api_key", "apikey", "access_key", "secret_key", "private_key", "signing_key",
    "encryption_key", "ssh_key", "client_key", "authorization", "auth", "bearer", "jwt",
    "cookie", "set_cookie", "credential", "credentials", "session_id", "sessionid",
    "client_secret", "otp", "totp", "mfa_code", "ssn", "card_number", "cvv",
)
# One word that ends in one of these is a secret name glued to what it is for (``apitoken``,
# ``accesstoken``, ``dbpassword``, ``clientsecret``).
_GLUED_ENDINGS = ("token", "secret", "password", "passwd", "passphrase")

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _words(name: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in _WORD.findall(name))


class Redactor:
    """Decides which mapping keys are secret and finds the values under them; built once per
    set of names (``redactor()``)."""

    __slots__ = ("_cache", "_glued", "_names", "names")

    def __init__(self, extra: Iterable[str] = ()) -> None:
        names = dict.fromkeys(SECRET_NAMES)
        for name in extra:
            names[str(name)] = None
        self.names: tuple[str, ...] = tuple(names)
        self._names = tuple({w for w in (_words(n) for n in self.names) if w})
        self._glued = frozenset("".join(w) for w in self._names if len(w) > 1)
        self._cache: dict[str, bool] = {}

    def is_secret(self, key: str) -> bool:
        """True if the key's words contain one of the names' words, in order, or one of its
        words is a name glued together (see the module docstring)."""
        hit = self._cache.get(key)
        if hit is None:
            words = _words(key)
            glued = self._glued
            hit = any(_contains(words, name) for name in self._names) or any(
                w in glued or w.endswith(_GLUED_ENDINGS) for w in words
            )
            if len(self._cache) < 4096 and len(key) <= 128:
                self._cache[key] = hit
        return hit

    def secret_values(self, value: Any, depth: int = 0, unnamed: str | None = None) -> list[str]:
        """The strings held under secret keys anywhere in ``value`` (for scrubbing them from text
        written about the same call), longest first. ``unnamed`` is the key of a call's
        ``*args`` in its bound arguments: what it holds counts as secret (``hide_unnamed``)."""
        found: list[str] = []
        if type(value) is dict:  # bound arguments: mostly plain values under names
            for k, v in value.items():
                if type(k) is str and (k == unnamed or self.is_secret(k)):
                    _secret_strings(v, found, depth)
                elif type(v) not in _PLAIN:
                    self._collect(v, found, depth + 1, {id(value)})
        else:
            self._collect(value, found, depth, set())
        found.sort(key=len, reverse=True)
        return found

    def _collect(self, value: Any, found: list[str], depth: int, seen: set[int]) -> None:
        if depth > 32 or id(value) in seen or type(value) in _PLAIN:
            return
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            seen.add(id(value))
            value = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
        elif hasattr(type(value), "model_fields") and hasattr(value, "model_dump"):
            seen.add(id(value))
            try:
                value = value.model_dump()
            except Exception:
                return
        if isinstance(value, Mapping):
            seen.add(id(value))
            for k, v in list(value.items()):
                if isinstance(k, str) and self.is_secret(k):
                    _secret_strings(v, found, depth)
                else:
                    self._collect(v, found, depth + 1, seen)
        elif isinstance(value, (list, tuple)):
            seen.add(id(value))
            for v in value:
                self._collect(v, found, depth + 1, seen)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def hide_unnamed(arguments: Mapping[str, Any], unnamed: str | None) -> Mapping[str, Any]:
    """``arguments`` as written: the values passed through ``*args`` (bound under ``unnamed``)
    replaced by ``"[redacted]"``, since no parameter name says whether they are secret."""
    if unnamed is None or unnamed not in arguments:
        return arguments
    return {**arguments, unnamed: REDACTED}


def _secret_strings(value: Any, found: list[str], depth: int) -> None:
    if isinstance(value, str):
        if len(value) >= 3:
            found.append(value)
    elif isinstance(value, (bytes, bytearray)):
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return
        if len(text) >= 3:
            found.append(text)
    elif isinstance(value, (list, tuple)) and depth < 32:
        for v in value:
            _secret_strings(v, found, depth + 1)
    elif isinstance(value, Mapping) and depth < 32:
        for v in list(value.values()):
            _secret_strings(v, found, depth + 1)


def _contains(words: tuple[str, ...], name: tuple[str, ...]) -> bool:
    n = len(name)
    if n == 1:
        return name[0] in words
    return any(words[i:i + n] == name for i in range(len(words) - n + 1))


_DEFAULT = Redactor()


def redactor(extra: Iterable[str] = ()) -> Redactor:
    """The redactor for the built-in names plus ``extra`` (the ``redact`` setting), built once
    per distinct setting."""
    key = tuple(extra)
    found = _REDACTORS.get(key)
    if found is None:
        added = [e for e in key if e not in _DEFAULT.names]
        found = Redactor(added) if added else _DEFAULT
        if len(_REDACTORS) > 256:
            _REDACTORS.clear()
        _REDACTORS[key] = found
    return found


_REDACTORS: dict[tuple[str, ...], Redactor] = {}

# --------------------------------------------------------------------------- shapes

# A secret-named key inside text: the whole word, or its last parts (``AWS_SECRET_ACCESS_KEY``,
# ``db-password``); never a mere substring (``max_tokens``, ``author``). Repetitions are bounded so
# that every pattern stays linear in the length of the text.
_NAME = (
    r"(?:[A-Za-z0-9]{1,40}[_\-.]){0,6}(?:[A-Za-z]{0,20}(?:password|passwd|passphrase|secret|token)"
    r"|passcode|jwt|(?:api|access|secret|private|signing|encryption|ssh|client)[_\-]?key"
    r"|authorization|cookie|credentials?|session[_\-]?id)"
)
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # -----BEGIN ... PRIVATE KEY----- blocks, whole.
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
                re.S), REDACTED),
    # Authorization schemes: "Bearer abc.def", "Basic dXNlcjpw", "token ghp_..."
    (re.compile(r"\b(Bearer|Basic|Digest|Token)(\s+)[A-Za-z0-9\-._~+/=]{6,}", re.I),
     r"\1\2" + REDACTED),
    # user:password@ in URLs
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/:@]*:)[^\s/@]+@"), r"\1" + REDACTED + "@"),
    # "name": "value" (JSON) with a secret name
    (re.compile(r'("' + _NAME + r'"\s*:\s*")((?:[^"\\]|\\.)*)"', re.I), r"\1" + REDACTED + '"'),
    # the same inside JSON text that is itself quoted (a truncated trace value's head)
    (re.compile(r'(\\"' + _NAME + r'\\"\s*:\s*\\")(?:[^"\\]|\\[^"]){0,4000}?(\\")', re.I),
     r"\1" + REDACTED + r"\2"),
    # name=value, name: value (query strings, env files, headers, logs), optionally quoted
    # (a credential scheme already handled above keeps its name: "Authorization: Bearer [redacted]")
    (re.compile(r"(\b" + _NAME + r"\b['\"]?\s*(?:=|:)\s*)(?!(?:Bearer|Basic|Digest|Token)\s)"
                r"(['\"]?)[^\s'\"&;,}\])]+\2", re.I),
     r"\1\2" + REDACTED + r"\2"),
    # "password 'hunter2'": a secret name followed by a quoted value
    (re.compile(r"(\b" + _NAME + r"\b\s+)(['\"])[^'\"\s]{1,200}\2", re.I),
     r"\1\2" + REDACTED + r"\2"),
    # Well-known key formats.
    (re.compile(r"\b(?:sk|pk|rk)[-_](?:live|test|proj|ant)?[-_]?[A-Za-z0-9_\-]{10,}"), REDACTED),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{16,}"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), REDACTED),  # GitLab
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), REDACTED),
    (re.compile(r"\bpypi-AgE[A-Za-z0-9_\-]{50,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), REDACTED),  # Hugging Face
    (re.compile(r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"), REDACTED),  # SendGrid
    (re.compile(r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"), REDACTED),  # Shopify
    (re.compile(r"\bdo[por]_v1_[a-f0-9]{64}"), REDACTED),  # DigitalOcean
)
# A cheap pre-check: lower-cased text holding none of these cannot match a shape above. Plain
# substring tests: much faster than a case-insensitive regex of alternatives.
_HINTS = (
    "pass", "secret", "token", "key", "authorization", "cookie", "credential", "session", "bearer",
    "basic", "digest", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_", "ghp_", "gho_", "ghu_", "ghs_",
    "ghr_", "github_pat", "xox", "akia", "asia", "aiza", "eyj", "private", "://", "jwt",
    "glpat-", "npm_", "pypi-", "hf_", "sg.", "shp", "_v1_",
)


def _may_hold_secret(text: str) -> bool:
    lowered = text.lower()
    for hint in _HINTS:  # noqa: SIM110 - a plain loop is faster than any() over a generator
        if hint in lowered:
            return True
    return False


# Texts longer than this are scrubbed piecewise: regexes stay linear, memory bounded.
_CHUNK = 1 << 16


def scrub(text: str, values: Iterable[str] = ()) -> str:
    """``text`` with secret-shaped values, and each of ``values``, replaced by ``[redacted]``."""
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    if not _may_hold_secret(text):
        return text
    if len(text) > _CHUNK:
        return "".join(_scrub_shapes(text[i:i + _CHUNK]) for i in range(0, len(text), _CHUNK))
    return _scrub_shapes(text)


def scrub_leaves(value: Any, values: Iterable[str] = (), depth: int = 0) -> Any:
    """``value`` with ``scrub`` applied to every string in it (in tuples, lists, sets and
    mappings too): the same object when nothing in it changed."""
    if type(value) is str:
        return scrub(value, values)
    if depth == 0 and type(value) in _SEQUENCES:
        # What a layer keeps of a call (word pairs in sets and tuples): its strings tested all at
        # once, joined; when none could change, it is returned without a walk that scrubs each.
        texts: list[str] = []
        if _gather(value, texts, 0):
            joined = "\x00".join(texts)
            values = tuple(values)
            if not any(v in joined for v in values) and not _may_hold_secret(joined):
                return value
    if depth > 32 or not isinstance(value, (tuple, list, frozenset, set, Mapping)):
        return value
    if isinstance(value, Mapping):
        pairs = [(scrub_leaves(k, values, depth + 1), scrub_leaves(v, values, depth + 1))
                 for k, v in value.items()]
        if all(k is a and v is b for (k, v), (a, b) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    scrubbed = [scrub_leaves(v, values, depth + 1) for v in value]
    if all(a is b for a, b in zip(scrubbed, value, strict=True)):
        return value
    return type(value)(scrubbed)


_SEQUENCES = (tuple, list, frozenset, set)


def _gather(value: Any, texts: list[str], depth: int) -> bool:
    """Add the strings in ``value`` (tuples, lists and sets of them, nested) to ``texts``; False
    when it holds a mapping or a subclass of these, or is nested deeper than ``scrub_leaves``
    walks: those are left to its walk. Values of other types are left as they are by it too."""
    for item in value:
        t = type(item)
        if t is str:
            texts.append(item)
        elif t in _SEQUENCES:
            if depth >= 32 or not _gather(item, texts, depth + 1):
                return False
        elif isinstance(item, (tuple, list, frozenset, set, Mapping)):
            return False
    return True


def _scrub_shapes(text: str) -> str:
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    return text


def looks_secret(text: str) -> bool:
    """True if ``scrub`` would change ``text`` (a quick test for the common, clean case)."""
    return _may_hold_secret(text) and _scrub_shapes(text) != text


def exception_text(exc: BaseException) -> str:
    """An exception as logged: ``"ClassName: message"``, secret-shaped values scrubbed."""
    try:
        return scrub(f"{type(exc).__name__}: {exc}")
    except Exception:  # a __str__ that raises
        return type(exc).__name__
