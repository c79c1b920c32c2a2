"""Types that modules name in their hints without importing the module that implements them.

As structlog's ``typing`` module: a module that only needs the shape of a callback imports it from
here, so that a type hint never ties two modules into an import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from fuzeguard._private.meaning.records import Detection

# An ``on_detect`` hook: called with each detection of a run (``guard(on_detect=...)``,
# ``fuzeguard.run(on_detect=...)``); what it returns is ignored.
DetectHook = Callable[[Detection], object]


class Publisher(Protocol):
    """What a subscriber needs of a run to listen to it (``Run.subscribe``): the events it
    publishes reach ``subscriber``, a callable taking one event; the call returned unsubscribes."""

    def subscribe(self, subscriber: Callable[[Any], object], *events: type[Any]) -> Callable[[], None]: ...


class StateHolder(Protocol):
    """What a run's state needs of the store that holds it when the run is shared (``store.Store``
    is one; ``Run`` names that whole protocol): whether the store's ``decide`` puts an ``ask``
    decision to the run's callback itself (else the answer is ``"kill"``)."""

    asks: ClassVar[bool]
