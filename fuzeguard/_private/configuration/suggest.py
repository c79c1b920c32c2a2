"""Suggestions for a mistyped name: the closest known one, if any is close enough."""

from __future__ import annotations

from collections.abc import Iterable


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a mistyped name, if any is close enough."""
    # Deferred for start-up time: only a mistyped name needs it.
    from rapidfuzz import fuzz, process

    found = process.extractOne(word, list(candidates), scorer=fuzz.WRatio, score_cutoff=72)
    return None if found is None else str(found[0])


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    best = suggest(word, candidates)
    return f"; did you mean `{best}`?" if best else ""
