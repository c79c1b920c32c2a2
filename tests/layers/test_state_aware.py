"""Repeats judged by what changed in between: state-aware memory, failures judged by what failed,
near-identical failing attempts, tools that change nothing, and errors read wherever they are.

Each test plays a hand-made sequence of calls, as a stuck agent would make them, through real
guards in a real run, and checks the call at which the run is stopped (or that it is not), and
where a loop's first detection was only warned (graded evidence, docs/layers.md), where it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import fuzeguard
from fuzeguard import LoopDetected, guard
from fuzeguard._private.meaning.kinds import call_kind, infer_kind, writes
from fuzeguard._private.meaning.outcome import mask_text, read_failure
from fuzeguard.testing import capture_detections


class Files:
    """A tiny file system the tools act on: reads see what writes changed."""

    def __init__(self) -> None:
        self.files = {"a.py": "x = 1\n", "b.py": "y = 2\n"}

    def tools(self) -> dict[str, Callable[..., Any]]:
        def read_file(path: str) -> str:
            if path not in self.files:
                raise FileNotFoundError(f"No such file: {path}")
            return self.files[path]

        def search_code(query: str) -> str:
            hits = [p for p, text in self.files.items() if query in text]
            return "\n".join(hits) if hits else f"No matches for {query}"

        def write_file(path: str, text: str) -> str:
            self.files[path] = text
            return f"wrote {len(text)} bytes to {path}"

        def think(thought: str) -> str:
            return ""

        def edit(path: str, body: str) -> str:
            if "(" in body and ")" not in body:
                return (
                    "Your proposed edit has introduced new syntax error(s).\n\nERRORS:\n"
                    "- E999 SyntaxError: '(' was never closed\n\nThis is how your edit would "
                    f"have looked:\n[File: {path}]\n1:{body}\n"
                )
            self.files[path] = body
            return f"[File: {path}]\n1:{body}\nFile updated."

        return {f.__name__: guard(f) for f in (read_file, search_code, write_file, think, edit)}


def played(calls: list[tuple[str, dict[str, Any]]]) -> tuple[int | None, list[int]]:
    """Play ``calls`` in one run: the 1-based index of the call that was stopped (or None), and
    those of the calls dedup answered by a warning."""
    tools = Files().tools()
    stopped = None
    with capture_detections() as found, fuzeguard.run():
        for i, (name, kwargs) in enumerate(calls, start=1):
            try:
                tools[name](**kwargs)
            except LoopDetected:
                stopped = i
                break
            except FileNotFoundError:
                pass
    return stopped, [d.call_index for d in found if d.kind == "warning" and d.layer == "dedup"]


def stopped_at(calls: list[tuple[str, dict[str, Any]]]) -> int | None:
    """Play ``calls`` in one run; the 1-based index of the call that was stopped, or None."""
    return played(calls)[0]


def test_a_repeat_spread_between_calls_that_return_new_results_is_a_loop_at_its_third_time() -> None:
    """A lookup that fails, then other lookups that bring new code, then the first again, and
    again: nothing changed the world in between, so its third occurrence is a loop. Spread among
    other work, its first detection is warned; the fourth occurrence is stopped."""
    calls = [
        ("read_file", {"path": "missing.py"}),
        ("search_code", {"query": "x"}),
        ("read_file", {"path": "missing.py"}),
        ("read_file", {"path": "a.py"}),
        ("search_code", {"query": "y"}),
        ("read_file", {"path": "missing.py"}),
        ("search_code", {"query": "z"}),
        ("read_file", {"path": "missing.py"}),
    ]
    assert played(calls) == (8, [6])


def test_a_read_repeated_after_a_write_is_legitimate() -> None:
    """Re-reading a file after editing it is work: a write between two reads lets the read answer
    anew, however often the pair comes back."""
    calls = []
    for i in range(6):
        calls.append(("read_file", {"path": "a.py"}))
        calls.append(("write_file", {"path": "a.py", "text": f"x = {i}\n"}))
    assert stopped_at(calls) is None


def test_repeating_the_identical_write_changes_nothing_more() -> None:
    """The same write again is no change of state: the reads around it are still repeats, and
    the write itself, repeated with the same outcome, is a loop at its third time."""
    calls = [("write_file", {"path": "a.py", "text": "same\n"})] * 3
    assert stopped_at(calls) == 3


def test_a_think_tool_between_identical_failures_is_transparent() -> None:
    """A ``think`` call changes nothing: it does not excuse the identical failure after it. The
    third failure is a loop, warned (a streak shorter than five), as the fourth, and the
    alternation of read and think that goes on is stopped (by ``cycle``) at the 8th call."""
    calls = [
        ("read_file", {"path": "missing.py"}),
        ("think", {"thought": "maybe the file is there now"}),
        ("read_file", {"path": "missing.py"}),
        ("think", {"thought": "let me try once more"}),
        ("read_file", {"path": "missing.py"}),
        ("think", {"thought": "perhaps a third time"}),
        ("read_file", {"path": "missing.py"}),
        ("think", {"thought": "one last time"}),
        ("read_file", {"path": "missing.py"}),
    ]
    assert played(calls) == (8, [5, 7])


def test_tools_that_only_think_or_calculate_are_of_the_noop_kind() -> None:
    for name in ("think", "scratchpad", "calculate", "think_about_plan"):
        assert infer_kind(name) == "noop", name


def test_kinds_come_from_the_verb_wherever_it_stands_in_the_name() -> None:
    for name, kind in [
        ("book_flight", "write"), ("update_order", "write"), ("apply_patch", "write"),
        ("send_email", "write"), ("cancel_reservation", "write"), ("get_customer", "read"),
        ("search_code_in_repo", "search"), ("find_file", "search"), ("list_orders", "read"),
    ]:
        assert infer_kind(name) == kind, name


def test_a_shell_command_that_writes_is_a_write_and_one_that_reads_is_not() -> None:
    for command in [
        "cat > a.py <<'EOF'\nx = 1\nEOF", "sed -i 's/a/b/' f.py", "echo hi >> log.txt",
        "cd /repo && git apply fix.diff", "pip install -e .", "rm -rf build",
        "python -c \"open('f', 'w').write('x')\"",
    ]:
        assert writes(command), command
        assert call_kind("exec", {"command": command}) == "write", command
    for command in [
        "python repro.py 2>&1", "grep -rn 'a > b' .", "ls -la", "git diff",
        "python x.py > /dev/null", "cat a.py | head",
    ]:
        assert not writes(command), command


def test_near_identical_failing_edits_are_one_action_repeated() -> None:
    """An edit rejected for the same syntax error, with arguments 90% alike, is the same action
    failing again, though no two are identical: the third attempt is a loop (warned), the fourth
    is stopped."""
    body = "def handler(request, response, context, settings, logger(\n    return None\n"
    calls = [
        ("edit", {"path": "a.py", "body": body}),
        ("edit", {"path": "a.py", "body": body.replace("None", "True")}),
        ("edit", {"path": "a.py", "body": body.replace("None", "1")}),
        ("edit", {"path": "a.py", "body": body.replace("None", "2")}),
    ]
    assert played(calls) == (4, [3])


def test_different_edits_failing_the_same_way_are_exploration_for_a_while() -> None:
    """Edits that differ (not 90% alike) and fail the same way are tried a third time; a fourth,
    whatever its arguments, is one failure repeated, but only warned: a kill needs the pending
    call itself to be alike the failures."""
    bodies = ["a(\n", "class Z(object, metaclass=Meta(\n", "import os; os.path.join(x, y, z(\n",
              "w = [1, 2, 3, (4\n"]
    calls = [("edit", {"path": "a.py", "body": b}) for b in bodies]
    assert played(calls) == (None, [4])


def test_an_edit_that_succeeds_between_failing_ones_starts_the_attempts_afresh() -> None:
    body = "def handler(request, response, context, settings, logger(\n    return None\n"
    calls = [
        ("edit", {"path": "a.py", "body": body}),
        ("edit", {"path": "a.py", "body": body.replace("None", "True")}),
        ("edit", {"path": "a.py", "body": "def handler():\n    return None\n"}),
        ("edit", {"path": "a.py", "body": body.replace("None", "1")}),
    ]
    assert stopped_at(calls) is None


def test_an_error_in_the_middle_of_a_command_output_is_read_as_its_failure() -> None:
    """A SyntaxError followed by a footer, a build's ``[ERROR]`` line: found wherever they are in
    the output of a command, with the line numbers and counters that drift masked."""
    footer = "\n".join(f"note {i}: see the documentation" for i in range(6))
    output = f'  File "x.py", line 10\n    print(\n         ^\nSyntaxError: \'(\' was never closed\n{footer}'
    assert read_failure(output) is None  # a read shows content: only its ends are looked at
    assert read_failure(output, deep=True) == "SyntaxError: '(' was never closed"
    build = "[INFO] Compiling 3 files\n[ERROR] /src/Foo.java:[12,5] cannot find symbol\n" + footer
    assert read_failure(build, deep=True) == "[ERROR] /src/Foo.java:[12,5] cannot find symbol"
    assert mask_text("[ERROR] /src/Foo.java:[12,5] x") == mask_text("[ERROR] /src/Foo.java:[40,9] x")
    for a, b in [
        ("/bin/bash: line 47872: javac: command not found",
         "/bin/bash: line 48001: javac: command not found"),
        ("Cell In[1], line 10", "Cell In[7], line 12"),
        ("session sess-17, pid 4242", "session sess-90, pid 77"),
    ]:
        assert mask_text(a) == mask_text(b), (a, b)


def test_a_command_failing_with_the_same_error_in_the_middle_of_its_output_is_stopped() -> None:
    """The same command failing the same way, its error between a header and a footer that
    drift, is a loop at its third run (warned, as the fourth: a streak shorter than five) and
    stopped at its fifth."""
    runs = iter(range(100))

    @guard
    def bash(command: str) -> str:
        n = next(runs)
        return (f"Running (attempt {n}) at 12:00:{n:02d}\nTraceback (most recent call last):\n"
                '  File "x.py", line 3, in <module>\nKeyError: \'user\'\n'
                f"Finished in 0.{n}s, session sess-{n}")

    with capture_detections() as found, fuzeguard.run(), pytest.raises(LoopDetected) as info:
        for _ in range(5):
            bash("python x.py")
    assert [(d.call_index, d.action) for d in found] == [(3, "warn"), (4, "warn"), (5, "kill")]
    assert info.value.detection.call_index == 5
    assert info.value.detection.layer == "dedup"


def test_two_targets_failing_in_alternation_are_not_one_cycle() -> None:
    """Two lookups over two different targets, each failing in its own way, alternate: failures
    are compared by what failed, so the laps differ and no cycle is seen before dedup's own rule."""

    @guard
    def get_user(name: str) -> str:
        raise KeyError(f"no user {name}")

    @guard
    def get_team(name: str) -> str:
        raise KeyError(f"no team {name}")

    found = []
    with fuzeguard.run():
        for i in range(8):
            try:
                (get_user if i % 2 == 0 else get_team)(f"target{i}")
            except KeyError:
                pass
            except LoopDetected as exc:
                found.append(exc.detection.layer)
                break
    assert "cycle" not in found
