"""Helpers for testing code that uses guards.

``capture_detections()`` collects every detection made inside its block (like
``structlog.testing.capture_logs``); ``disabled()`` and ``observe()`` switch guarding off, or to
log-only mode, for a block; ``set_mode()`` does the same for the rest of a test session and returns
a context manager that restores the previous mode. The switches are process-wide (all threads).

    from fuzeguard.testing import capture_detections

    def test_agent_does_not_repeat_searches():
        with capture_detections() as found:
            run_my_agent()
        assert found == []
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs import state
from fuzeguard._private.runs.implicit import _reset_implicit_run
from fuzeguard._private.runs.state import Mode

__all__ = ["capture_detections", "disabled", "observe", "reset_implicit_run", "set_mode"]


@contextmanager
def capture_detections() -> Iterator[list[Detection]]:
    """Collect the detections made (in any run, any thread) while the block runs."""
    found: list[Detection] = []
    with state.lock:
        state.captures.append(found)
    try:
        yield found
    finally:
        with state.lock:
            state.captures.remove(found)


class _Restore:
    """Returned by ``set_mode``: use it as a context manager to restore the previous mode."""

    def __init__(self, previous: Mode | None) -> None:
        self.previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        state.mode_override = self.previous


def set_mode(mode: Mode | None) -> _Restore:
    """Force every guard into ``"off"`` (no checks, no records) or ``"observe"`` (detections are
    logged and captured, nothing is killed or skipped); ``None`` goes back to the configuration."""
    if mode not in (None, "off", "observe"):
        raise ValueError(f'set_mode() takes "off", "observe" or None, got {mode!r}')
    previous = state.mode_override
    state.mode_override = mode
    return _Restore(previous)


@contextmanager
def disabled() -> Iterator[None]:
    """Run the block with guarding switched off."""
    with set_mode("off"):
        yield


@contextmanager
def observe() -> Iterator[None]:
    """Run the block in observe mode: detections are logged and captured but never act."""
    with set_mode("observe"):
        yield


def reset_implicit_run() -> None:
    """Forget the implicit process-wide run, so the next call outside any run starts a fresh one,
    and the runs a call outside any run would be warned about (created and not entered, or open
    in another thread)."""
    _reset_implicit_run()
