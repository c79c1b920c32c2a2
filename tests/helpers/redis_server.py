"""A real redis-server for the tests: started on a free local port in a temporary directory.

``RedisServer`` can be stopped, started again on the same port, paused (SIGSTOP) and resumed, for
the tests of what a shared run does when its store fails. With ``persist=True`` it keeps its data
in an append-only file (synced on every write), so that a restart finds the data again. Waits are
bounded: a server that does not answer within ``START_TIMEOUT`` seconds fails the test that needs
it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

START_TIMEOUT = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    def __init__(self, directory: Path, persist: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: apt-get install redis-server")
        self.binary = binary
        self.directory = directory
        self.port = _free_port()
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.directory), "--save", "", "--protected-mode", "yes",
             "--appendonly", "yes" if self.persist else "no", "--appendfsync", "always",
             "--logfile", str(self.directory / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.01)
            finally:
                client.close()

    def stop(self) -> None:
        if self.process is not None:
            self.resume()
            self.process.terminate()
            self.process.wait(timeout=START_TIMEOUT)
            self.process = None

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)
