"""The Redis store's work, written once for both clients, and the one dispatch of its two drivers.

The work is a generator (``Steps``) that yields each round trip it needs, ``(script, keys,
args)``, and is sent the reply (or thrown the error); ``(ASK, run, [call, decision])`` asks the
run's ``ask`` callback instead, and is sent its answer. ``Exchange`` walks it one request at a
time for either driver: the blocking one (``RedisStore._drive``) and the asyncio one
(``RedisStore._adrive``) differ only in how they answer a request.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeAlias, TypeVar

T = TypeVar("T")
Request: TypeAlias = tuple[Any, Any, list[Any]]
Steps: TypeAlias = Generator[Request, Any, T]
ASK = "ask"


class Exchange(Generic[T]):
    """``steps`` driven to their end: iterated, it gives each request in turn, which the driver
    answers by setting ``reply`` or ``error`` before asking for the next; ``result`` holds what
    the steps returned. ``lock`` is held while the steps run (between two requests)."""

    def __init__(self, steps: Steps[T], lock: AbstractContextManager[Any] | None = None) -> None:
        self.steps = steps
        self.lock = nullcontext() if lock is None else lock
        self.reply: Any = None
        self.error: BaseException | None = None
        self.result: T

    def __iter__(self) -> Iterator[Request]:
        return self

    def __next__(self) -> Request:
        reply, error = self.reply, self.error
        self.reply = self.error = None
        with self.lock:
            try:
                return self.steps.send(reply) if error is None else self.steps.throw(error)
            except StopIteration as stop:
                self.result = stop.value
                raise StopIteration from None
