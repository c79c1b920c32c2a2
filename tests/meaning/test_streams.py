"""Guarded generators: chunks are watched as they stream, and a stream that chants is ended."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator

import pytest

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard.testing import capture_detections

INTRO = "Let me look at the failing test and explain what goes wrong in the parser module. "
CHANT = "I will now check the file again to be sure. "


def chanting_forever() -> Iterator[str]:
    """A model stuck repeating one sentence: the stream never ends by itself."""
    yield INTRO
    while True:
        yield CHANT


def test_kill_ends_an_endless_chanting_stream_from_the_iterator() -> None:
    """Issue 3: kill raises from the iterator; the stream is never buffered to its end."""
    stream_llm = guard(chanting_forever, layers=["semantic"], name="stream_llm")
    seen = 0
    with fuzeguard.run() as run, pytest.raises(LoopDetected) as info:
        for _ in stream_llm():
            seen += 1
    assert info.value.detection.layer == "semantic"
    assert info.value.detection.pattern == ("chant", "stream_llm")
    assert seen < 20
    assert run.killed is not None


def test_a_killed_stream_ends_the_run() -> None:
    stream_llm = guard(chanting_forever, layers=["semantic"], name="stream_llm")
    other = guard(lambda: "fine", name="other")
    with fuzeguard.run():
        with pytest.raises(LoopDetected):
            list(stream_llm())
        with pytest.raises(LoopDetected):
            other()


def test_warn_lets_a_chanting_stream_continue_and_reports_it_once() -> None:
    def chant_then_stop() -> Iterator[str]:
        yield INTRO
        yield from itertools.repeat(CHANT, 40)

    stream_llm = guard(chant_then_stop, layers=["semantic"], on_loop="warn")
    with capture_detections() as found, fuzeguard.run():
        chunks = list(stream_llm())
    assert len(chunks) == 41
    assert [(d.layer, d.action) for d in found] == [("semantic", "warn")]


def test_skip_ends_the_stream_quietly() -> None:
    stream_llm = guard(chanting_forever, layers=["semantic"], on_loop="skip")
    with fuzeguard.run():
        chunks = list(stream_llm())
    assert 0 < len(chunks) < 20


def test_async_generators_share_the_same_check() -> None:
    async def chanting_async() -> AsyncIterator[str]:
        yield INTRO
        while True:
            yield CHANT

    stream_llm = guard(chanting_async, layers=["semantic"])

    async def consume() -> int:
        seen = 0
        async with fuzeguard.run():
            with pytest.raises(LoopDetected):
                async for _ in stream_llm():
                    seen += 1
        return seen

    assert asyncio.run(consume()) < 20


def test_a_stream_of_distinct_sentences_passes_untouched() -> None:
    def story() -> Iterator[str]:
        for i in range(200):
            yield f"Sentence number {i} talks about a different part of the system, part {i}. "

    stream_llm = guard(story, layers=["semantic"])
    with capture_detections() as found, fuzeguard.run():
        chunks = list(stream_llm())
    assert len(chunks) == 200
    assert found == []


def test_a_paginated_fetch_of_non_text_chunks_is_not_watched_for_chanting() -> None:
    def pages() -> Iterator[dict[str, int]]:
        for i in range(50):
            yield {"page": i}

    fetch = guard(pages, layers=["semantic"])
    with capture_detections() as found, fuzeguard.run():
        assert len(list(fetch())) == 50
    assert found == []


def test_default_layers_do_not_watch_streams() -> None:
    """The semantic layer is opt-in: with the defaults a stream is only recorded."""
    stream_llm = guard(chanting_forever, name="stream_llm")
    with capture_detections() as found, fuzeguard.run():
        chunks = list(itertools.islice(stream_llm(), 100))
    assert len(chunks) == 100
    assert found == []
