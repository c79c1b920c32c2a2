"""What a shared run does while its Redis cannot be reached, and when it can again.

A failed round trip opens an ``Outage``: the call is judged on this process's copy, which goes
on from where it is, and what this process does meanwhile is kept as sums (``events.Tally``) to
write back. Redis is tried again after ``RETRY_FIRST`` seconds, doubling up to ``RETRY_AFTER``;
the first round trip that works decides what was in doubt and writes the sums back (``MERGE``:
written twice, they count once). With ``fail_closed`` the calls are refused meanwhile. A run
closed during an outage is handed to ``backlog.py``, which writes it back once Redis answers.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from fuzeguard._private.configuration.validation import masked_url
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.exceptions import StoreUnavailable
from fuzeguard._private.store.drive import Steps
from fuzeguard._private.store.replica import Changed, Outage, Replica
from fuzeguard._private.store.scripts import APPEND

if TYPE_CHECKING:
    from fuzeguard._private.protocols import RunInternals

MAX_QUEUED = 32  # completions that wait for the next commit before they are sent on their own
RETRY_FIRST = 0.05  # seconds before the first new attempt to reach a store that failed...
RETRY_AFTER = 1.0  # ... doubling up to this


class Outages(Replica):
    """A shared run's copy that goes on when Redis cannot be reached (see the module docstring)."""

    def __init__(self, run: RunInternals, url: str, parent: RunInternals | str | None) -> None:
        super().__init__(run, url, parent)
        self.retry_at = 0.0
        self.backoff = RETRY_FIRST
        self.errors = 0
        self.outages = 0
        self.local_calls = 0
        self.fail_closed = False

    def _reachable(self, run: RunInternals) -> Steps[bool]:
        """False while Redis is out and not yet due for another try (run lock held)."""
        if self.outage is None:
            if self.seq < 0:
                try:
                    yield from self._load(run)
                except Exception as exc:
                    self._down(run, exc)
                    return False
            return True
        if time.monotonic() < self.retry_at:
            return False
        try:
            try:
                yield from self._recover(run)
            except Exception as exc:
                if not _dropped(exc):
                    raise
                yield from self._recover(run)  # the outage left the connection dead: a new one
        except Exception as exc:
            self.errors += 1
            self.backoff = min(self.backoff * 2, RETRY_AFTER)
            self.retry_at = time.monotonic() + self.backoff
            if not _is_redis_error(exc):
                emit("error", "fuzeguard.internal_error", phase="store", error=repr(exc))
            return False
        return True

    def _down(self, run: RunInternals, exc: BaseException) -> None:
        self.errors += 1
        if self.outage is None:
            self.outages += 1
            self.backoff = RETRY_FIRST
            self.outage = Outage(f"{self.worker}:{self._next()}", run._capacity)
            emit(
                "warning", "fuzeguard.store_unavailable", run_id=run.id, run_name=run.name,
                store=masked_url(self.url), error=_masked_error(exc, self.url),
                message="the run's store cannot be reached: calls are judged in this process "
                "until it is back" + (" (fail_closed: calls are refused)" if self.fail_closed
                                      else ""),
            )
        self.retry_at = time.monotonic() + self.backoff

    def _recover(self, run: RunInternals) -> Steps[None]:
        outage = self.outage
        assert outage is not None
        # Decides what was in doubt and brings the copy up to the log; a copy rebuilt from a
        # snapshot lacks what this process did meanwhile (its kill too): it books the write-back.
        rebuilt = yield from self._load(run)
        tally = outage.tally
        if not tally.empty():
            yield from self._merge(run, tally, outage.id, tally.kill, mine=rebuilt)
        self.outage = None
        emit("info", "fuzeguard.store_recovered", run_id=run.id, run_name=run.name,
             store=masked_url(self.url), calls=tally.calls)

    def _refuse(self, run: RunInternals) -> None:
        raise StoreUnavailable(
            f"the store of run {run.name} cannot be reached and fail_closed is on, so the call "
            "was not made"
        )

    def _keep(self, run: RunInternals, event: dict[str, Any], cost: float, send: bool) -> None:
        """An event of this process booked in the copy: kept to be written (run lock held)."""
        self.own.fold(event)
        if self.outage is not None:
            self.outage.tally.fold(event)
            return
        self.queue.append(event)
        self.queue_cost += cost
        if send or len(self.queue) >= MAX_QUEUED:
            if asyncio._get_running_loop() is not None:
                self.urgent = True  # not here, on the event loop: the guard awaits ``aflush``
            else:
                self._drive(self._flush(run))

    def _flush(self, run: RunInternals) -> Steps[None]:
        """Write what waits to be written (run lock held)."""
        self.urgent = False
        if not self.queue and self.outage is None:
            return
        if not (yield from self._reachable(run)) or not self.queue:
            return
        try:
            yield from self._commit(run, [], APPEND)
        except Exception as exc:
            self._down(run, exc)


def _is_redis_error(exc: BaseException) -> bool:
    import redis

    return isinstance(exc, (redis.RedisError, OSError, Changed))


def _dropped(exc: BaseException) -> bool:
    """The connection was dropped: a new one may well work at once."""
    import redis

    return isinstance(exc, redis.ConnectionError)


def _masked_error(exc: BaseException, url: str) -> str:
    """``repr(exc)`` with the store's password masked, should the error repeat the URL."""
    text = repr(exc)
    return text.replace(url, masked_url(url)) if url in text else text
