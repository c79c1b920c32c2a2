"""The connections of this process to the Redis servers of its shared runs, and its name there.

One blocking client per server and timeout for the whole process, one asyncio client per event
loop (an asyncio client belongs to the loop it was made on), and this process's worker id (host,
pid and a random tag) with the numbers of its events. A forked child makes its own: it must not
share its parent's sockets, nor its name.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from typing import Any

from fuzeguard._private.runs.forksafe import new_lock

_numbers = itertools.count(1)  # this process's events, so that Redis can tell which it holds
_clients: dict[tuple[str, float], Any] = {}
_clients_lock = new_lock()
_aclients: dict[int, tuple[asyncio.AbstractEventLoop, dict[Any, Any]]] = {}
_WORKER = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def worker_id() -> str:
    """This process, as traces name it: host, pid and a random tag (pids are reused)."""
    return _WORKER


def next_number() -> int:
    """The number of this process's next event."""
    return next(_numbers)


def _refresh_worker() -> None:
    global _WORKER
    _WORKER = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
    with _clients_lock:
        _clients.clear()  # a forked child must not share its parent's sockets
    _aclients.clear()


os.register_at_fork(after_in_child=_refresh_worker)


def client(url: str, timeout: float) -> Any:
    """The blocking client of ``url`` for this process."""
    key = (url, timeout)
    found = _clients.get(key)
    if found is None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        with _clients_lock:
            found = _clients.get(key)
            if found is None:
                found = redis.Redis.from_url(
                    url, socket_timeout=timeout, socket_connect_timeout=timeout,
                    retry=Retry(NoBackoff(), 0), health_check_interval=0,
                )
                _clients[key] = found
    return found


def per_loop(table: dict[int, tuple[asyncio.AbstractEventLoop, Any]], make: Any) -> Any:
    """``table``'s entry for the running event loop, made by ``make()`` the first time; the
    entries of loops that were closed meanwhile are dropped."""
    loop = asyncio.get_running_loop()
    entry = table.get(id(loop))
    if entry is None or entry[0] is not loop:
        for key, (other, _value) in list(table.items()):
            if other.is_closed():
                del table[key]
        entry = table[id(loop)] = (loop, make())
    return entry[1]


def asyncio_script(url: str, timeout: float, source: str) -> Any:
    """Script ``source`` on the asyncio client of ``url`` for the running event loop."""
    scripts: dict[Any, Any] = per_loop(_aclients, dict)
    script = scripts.get((url, timeout, source))
    if script is None:
        client = scripts.get((url, timeout))
        if client is None:
            import redis.asyncio
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            client = scripts[(url, timeout)] = redis.asyncio.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0), health_check_interval=0,
            )
        script = scripts[(url, timeout, source)] = client.register_script(source)
    return script

