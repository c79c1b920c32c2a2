"""Where a run's state lives when it is not this process's alone: the store seam.

A run of its own keeps its state in its ``Run`` object and has no store (``run._store is None``:
it pays nothing for this module). A run with a ``store`` setting (``redis.py``) or a ``parent``
run (``parent.py``) hands every change of its state to a ``Store``: deciding a call, a detection
made mid-stream, completing a call, cost added outside a call, ending a turn, a reset, and
closing. The store judges with the run's own ``_judge`` and books with its own ``_count`` /
``_book``, so there is one decision and one bookkeeping path whatever holds the state.
"""

from __future__ import annotations

from typing import Any

from fuzeguard._private.protocols import RunInternals, Store
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.exceptions import ConfigError, StoreUnavailable

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


def open_store(run: RunInternals, url: str | None, parent: RunInternals | str | None) -> Store | None:
    """The store of a run opened with ``store=url`` and/or ``parent=``; None when the store
    cannot work here and the run is judged in this process (``store_problem`` says why)."""
    from fuzeguard._private.runs.runstate import RunState as RunClass

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
