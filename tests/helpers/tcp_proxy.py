"""A TCP proxy on 127.0.0.1 in front of the tests' redis-server, for the faults a network makes.

``down()`` closes every connection and refuses new ones until ``up()``; ``delay`` seconds are added
before each reply is passed back (a slow link); ``cut_on(marker)`` passes the next request that
holds ``marker`` to Redis and closes the connection before its reply comes back (a cut half-way
through a write: Redis did it, the client cannot know). Every wait is bounded.
"""

from __future__ import annotations

import socket
import threading
import time


class Proxy:
    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.delay = 0.0
        self.cuts = 0  # connections cut by ``cut_on``
        self._up = True
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._cut: set[socket.socket] = set()  # client sockets whose replies are swallowed
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        self._up = False
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            _close(s)

    def up(self) -> None:
        self._up = True

    def cut_on(self, marker: bytes) -> None:
        self._marker = marker

    def close(self) -> None:
        self.down()
        _close(self._server)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._up:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if replies and self.delay:
                    time.sleep(self.delay)
                if replies and sink in self._cut:
                    break
                marker = self._marker
                if not replies and marker is not None and marker in data:
                    self._marker = None
                    self._cut.add(source)
                    self.cuts += 1
                    sink.sendall(data)
                    time.sleep(0.05)  # Redis does it; its reply never reaches the client
                    break
                sink.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(sink)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
