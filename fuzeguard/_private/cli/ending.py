"""``fuze end``: delete a shared run from its store."""

from __future__ import annotations

import sys
from typing import TextIO

from fuzeguard._private.cli.common import (
    EXIT_DETECTED,
    EXIT_OK,
    EXIT_USAGE,
)
from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.settings import store_url
from fuzeguard._private.configuration.validation import masked_url
from fuzeguard._private.runs.exceptions import ConfigError


def end(
    name: str, *, store: str | None, namespace: str | None, out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """``fuze end``: delete the shared run ``name`` from its store; returns the status."""
    # Deferred for start-up time: the store is loaded by ``fuze end`` only.
    from fuzeguard._private.store import store_problem

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        config = Config.load(None)
        values = config.settings_for(None)
        url = store or store_url(config)
        if url is None:
            raise ConfigError("no store to end the run in: give --store redis://... or set "
                              "store in fuze.toml or FUZE_STORE")
        problem = store_problem(config, url)
        if problem is not None:
            raise ConfigError(problem)
        if namespace is not None:
            check_value = Config.from_dict({"defaults": {"store_namespace": namespace}})
            namespace = check_value.settings_for(None)["store_namespace"]
        else:
            namespace = values["store_namespace"]
    except ConfigError as exc:
        print(f"fuze end: {exc}", file=err)
        return EXIT_USAGE
    from fuzeguard._private.store.scripts import end_run  # as store_problem above

    where = masked_url(url) + (f" (namespace {namespace})" if namespace else "")
    try:
        ended = end_run(url, namespace, name, values["store_ttl"], max(values["store_timeout"], 5.0))
    except Exception as exc:
        print(f"fuze end: the store {where} cannot be reached: {type(exc).__name__}", file=err)
        return EXIT_DETECTED
    if ended:
        print(f"ended the shared run {name} on {where}", file=out)
    else:
        print(f"no shared run {name} on {where}: nothing to end", file=out)
    return EXIT_OK
