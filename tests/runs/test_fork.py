"""A process forked while another thread is inside a guarded call can guard its own calls.

From the second reliability review: a child forked while a thread held a run's lock (a
``multiprocessing`` pool started from a tool) inherited it held and hung in its first guarded
call (294 of 300 children).
"""

from __future__ import annotations

import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard._private.runs import forksafe
from fuzeguard._private.runs.implicit import implicit_run


@pytest.fixture(autouse=True)
def _fork_with_threads() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads
        yield


def in_child(work: Callable[[], None], seconds: int = 5) -> int:
    """Run ``work`` in a forked child; its exit status (SIGALRM when it hung)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(seconds)
        code = 1
        try:
            work()
            code = 0
        except BaseException as exc:
            os.write(2, f"in the child: {exc!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_child_forked_while_every_lock_of_fuzeguard_is_held_guards_its_calls(
    tmp_path: Path,
) -> None:
    """Every lock fuzeguard made is held at the fork, as threads in the middle of calls hold
    them: the run's, its trace's, the implicit run's, the guards', the hooks'."""
    seen: list[int] = []
    tool = guard(lambda x: "same", name="tool", on_loop="warn",
                 on_detect=lambda d: seen.append(d.call_index))
    with structlog.testing.capture_logs():
        tool("outside any run")  # the implicit run
    with structlog.testing.capture_logs(), fuzeguard.run("r", trace=str(tmp_path / "t.jsonl")) as run:
        tool(0)
        tool(0)

        def child() -> None:
            for _ in range(3):
                tool(0)  # detections: their hook runs
            with fuzeguard.run("child", trace=str(tmp_path / "child.jsonl")):
                tool(2)
            run.bind(tool)(3)
            outside = threading.Thread(target=tool, args=("outside any run",))
            outside.start()
            outside.join()
            assert seen == [3, 4, 5] and run.stats().calls == 6
            assert implicit_run().stats().calls == 2

        held = [ref() for ref in forksafe._locks]
        locks = [lock for lock in held if lock is not None]
        assert any(lock is run._lock for lock in locks)
        for lock in locks:
            lock.acquire()
        try:
            status = in_child(child)
        finally:
            for lock in locks:
                lock.release()
    assert status == 0
    assert len((tmp_path / "child.jsonl").read_text().splitlines()) == 1


def test_children_forked_while_threads_call_guarded_tools_never_hang() -> None:
    """The review's reproduction, shortened: forks while two threads call guarded tools."""
    step = guard(lambda i: i, name="step", layers=["limits"])
    stop = threading.Event()
    with fuzeguard.run("r", max_iterations=10**9) as run:

        def hammer() -> None:
            i = 0
            while not stop.is_set():
                run.bind(step)(("thread", i))
                i += 1

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            statuses = [in_child(lambda k=k: step(("child", k)), seconds=2) for k in range(20)]
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert statuses == [0] * 20


def test_a_killed_run_stays_killed_in_a_forked_child() -> None:
    tool = guard(lambda x: "same", name="t")
    with structlog.testing.capture_logs(), fuzeguard.run() as run:
        with pytest.raises(LoopDetected):
            for _ in range(6):
                tool(1)

        def child() -> None:
            try:
                tool(2)
            except LoopDetected:
                return
            raise AssertionError("the child ran a call of a killed run")

        assert in_child(child) == 0
        assert run.killed is not None


def test_every_lock_the_package_makes_is_fork_safe() -> None:
    """The integrations' and the store's locks included: a plain ``threading.Lock()`` anywhere
    but in ``forksafe.py`` would be inherited held by a child forked at the wrong moment."""
    package = Path(fuzeguard.__file__).parent
    plain = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py")) if path.name != "forksafe.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "threading.Lock()" in line or "threading.RLock()" in line
    ]
    assert plain == []


def test_children_forked_inside_a_shared_run_see_each_other_s_calls(
    redis_server: Any,
) -> None:
    """Third review e11: forked children kept the store's worker id, took each other's events
    for their own and skipped them: six children each made the same failing lookup and all six
    ran (separate processes: stopped at the fifth)."""
    import json

    @guard(name="lookup")
    def lookup(x: str) -> str:
        raise KeyError(f"{x} not found")

    read, write = os.pipe()

    def one_call() -> None:
        try:
            lookup("same")
            outcome = "ran"
        except KeyError:
            outcome = "ran"
        except LoopDetected:
            outcome = "refused"
        os.write(write, (json.dumps(outcome) + "\n").encode())

    with structlog.testing.capture_logs(), \
            fuzeguard.run("forked", store=redis_server.url, config=fuzeguard.Config()) as run:
        codes = [in_child(one_call, seconds=20) for _ in range(7)]
        run.stats()
        parent_sees = run.stats().calls
    os.close(write)
    with os.fdopen(read) as lines:
        outcomes = [json.loads(line) for line in lines]
    assert codes == [0] * 7
    assert outcomes == ["ran"] * 4 + ["refused"] * 3  # the 3rd and 4th warned
    assert parent_sees == 4  # the parent applies its children's events too
