"""A run's subscribers and the delivery of its events to them (``Run.subscribe``).

Events are delivered in the thread or task whose call caused them, in order, never while the run's
lock is held: an event made under the lock waits in the state's outbox (``RunState._outbox``) and
goes out before the next one delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.publish.events import EVENT_TYPES, Event, Subscriber
from fuzeguard._private.publish.hooks import callable_name
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.runstate import RunState


class Delivering(RunState):
    """A run's state with the subscribers of its events (``Run`` is its public face)."""

    # Subscribers by event type (``subscribe``).
    _subs: dict[type[Any], tuple[Subscriber, ...]]

    def subscribe(self, subscriber: Subscriber, *events: type[Any]) -> Callable[[], None]:
        """Deliver this run's events of the given types (all types if none are given) to
        ``subscriber``, a callable taking one event (``fuzeguard.events``); returns a function
        that unsubscribes it.

        Events are delivered in the thread or task whose call caused them, in order, never while
        the run's lock is held. A subscriber that raises is logged and the call goes on.
        """
        kinds = events or EVENT_TYPES
        for kind in kinds:
            if kind not in EVENT_TYPES:
                raise TypeError(
                    f"run.subscribe(): {kind!r} is not an event type; use the classes in "
                    "fuzeguard.events"
                )
        with self._lock:
            subs = dict(self._subs)
            for kind in kinds:
                subs[kind] = (*subs.get(kind, ()), subscriber)
            self._subs = subs  # replaced whole: deliveries in flight keep the tuples they read

        def unsubscribe() -> None:
            with self._lock:
                subs = dict(self._subs)
                for kind in kinds:
                    kept = tuple(s for s in subs.get(kind, ()) if s is not subscriber)
                    if kept:
                        subs[kind] = kept
                    else:
                        subs.pop(kind, None)
                self._subs = subs

        return unsubscribe

    def _deliver(self, event: Event) -> None:
        """Hand ``event`` to its subscribers, after any event queued while the lock was held."""
        if self._outbox:
            self._drain()
        self._hand(event)

    def _drain(self) -> None:
        with self._lock:
            queued, self._outbox = self._outbox, []
        for event in queued:
            self._hand(event)

    def _hand(self, event: Event) -> None:
        for subscriber in self._subs.get(type(event), ()):
            try:
                subscriber(event)
            except Exception as exc:
                _subscriber_failed(self, subscriber, event, exc)


def _subscriber_failed(run: RunState, subscriber: Subscriber, event: Event, exc: Exception) -> None:
    emit("error", "fuzeguard.subscriber_failed", run_id=run.id, run_name=run.name,
         event_type=type(event).__name__, subscriber=callable_name(subscriber),
         error=exception_text(exc),
         message="a subscriber of the run's events raised; the call goes on")

