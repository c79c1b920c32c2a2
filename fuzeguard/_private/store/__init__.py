"""Where a run's state lives when it is not this process's alone: the store seam.

A run of its own keeps its state in its ``Run`` object and has no store (``run._store is None``:
it pays nothing for this module). A run with a ``store`` setting (``redis.py``) or a ``parent``
run (``parent.py``) hands every change of its state to a ``Store``: deciding a call, a detection
made mid-stream, completing a call, cost added outside a call, ending a turn, a reset, and
closing. The store judges with the run's own ``_judge`` and books with its own ``_count`` /
``_book``, so there is one decision and one bookkeeping path whatever holds the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.exceptions import ConfigError, StoreUnavailable

if TYPE_CHECKING:
    from fuzeguard._private.judging.plan import Plan
    from fuzeguard._private.meaning.records import Call, CallRecord, Decision, Detection
    from fuzeguard._private.runs.run import Run


__all__ = ["Store", "StoreUnavailable", "open_store", "store_problem"]

NO_PACKAGE = "store: the redis package is not installed"


def store_problem(config: Any, url: str, from_code: bool = True) -> str | None:
    """Why a store cannot work as configured, with the fix; None when it can. ``from_code``:
    the store was given in code; one from the config file or ``FUZE_STORE`` shares every named
    run, so it needs a namespace."""
    from fuzeguard._private.configuration.validation import check_store_url, masked_url

    try:
        check_store_url(url)
    except ValueError as exc:
        return f"store: {exc}"
    values = config.settings_for(None)
    if not from_code and values["store_namespace"] is None:
        return (
            f"store = {masked_url(url)} (from the config file or FUZE_STORE) shares every named "
            "run of every process that uses it: name what shares them with store_namespace = "
            '"my-service" in [defaults] (or store_namespace= in code), so that the runs of '
            "other services on the same Redis stay apart"
        )
    try:
        import redis  # noqa: F401
    except ImportError:
        return f"{NO_PACKAGE}: pip install 'fuzeguard[redis]' (store = {masked_url(url)})"
    return None


class Store(Protocol):
    """Holds a run's state for it (see the module docstring). ``asks``: its ``decide`` puts
    an ``ask`` decision to the run's callback itself (else the answer is ``"kill"``)."""

    asks: ClassVar[bool]

    def open(self, run: Run) -> None: ...
    async def aopen(self, run: Run) -> None: ...
    def decide(
        self, run: Run, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None
    ) -> tuple[Call, Decision]: ...
    async def adecide(
        self, run: Run, plan: Plan, args_fp: bytes, arguments: Any, kind: str | None
    ) -> tuple[Call, Decision]: ...
    async def aflush(self, run: Run, everything: bool = False) -> None:
        """Write, awaited, what a completion made on an event loop left to send at once
        (``everything``: all that waits, as closing does)."""
    def flag(self, run: Run, plan: Plan, call: Call, detection: Detection) -> Decision: ...
    def complete(self, run: Run, record: CallRecord, plan: Plan, call: Call) -> None: ...
    def discard(self, run: Run, index: int) -> None: ...
    def add_cost(self, run: Run, amount: float) -> None: ...
    def end_turn(self, run: Run) -> None: ...
    def reset(self, run: Run) -> None: ...
    def refresh(self, run: Run) -> None: ...
    def stats(self) -> dict[str, int]: ...
    def close(self, run: Run) -> None: ...
    def end(self, run: Run) -> None: ...
    def annotate(self, run: Run, line: dict[str, Any]) -> None:
        """Add what a trace line of this run needs to be merged with other processes' lines."""



def open_store(run: Run, url: str | None, parent: Run | str | None) -> Store | None:
    """The store of a run opened with ``store=url`` and/or ``parent=``; None when the store
    cannot work here and the run is judged in this process (``store_problem`` says why)."""
    from fuzeguard._private.runs.run import Run as RunClass

    if url is not None:
        problem = store_problem(run.config, url, run.config.origin_of("store") == "code")
        if problem is not None:
            values = run.config.settings_for(None)
            if values["fail_closed"] or not problem.startswith(NO_PACKAGE):
                raise ConfigError(problem)
            emit("error", "fuzeguard.store_misconfigured", run_id=run.id, run_name=run.name,
                 message=f"{problem}; until then this run is judged in this process only")
            url = None
            if not isinstance(parent, RunClass):
                return None

    if url is None and isinstance(parent, RunClass):
        url = getattr(parent._store, "url", None)  # a subagent's run lives where its parent does
    if url is None:
        if not isinstance(parent, RunClass):
            raise TypeError(
                f"fuzeguard.run(parent=...) takes the parent Run, got {parent!r}; a parent named by "
                "its name needs a shared store: fuzeguard.run(..., store=\"redis://...\")"
            )
        from fuzeguard._private.store.parent import ParentStore

        return ParentStore(parent)
    from fuzeguard._private.store.redis import RedisStore

    return RedisStore(run, url, parent)
