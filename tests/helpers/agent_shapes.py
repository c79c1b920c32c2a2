"""Runs of coding agents, in the two shapes real ones take, for detection-quality tests.

* A one-tool agent: ``bash`` carries the whole run (exploring, reading, writing files with ``cat >``
  and ``sed -i``, running a reproduction script that fails before the fix, tests, linters that exit
  non-zero, ``git status`` between steps). Outputs are text, with the volatile parts real ones have:
  durations, temporary paths, a shell's ``line N:`` prefix.
* A commands-as-tools agent: ``open``, ``goto``, ``search_dir``, ``find_file``, ``edit``, ``python``,
  ``submit``, with observations as text.

Each generator is seeded, so a test can play many different runs of one shape.
"""

from __future__ import annotations

import random

from scripted import Step

MODULES = ["parser", "config", "cli", "models", "utils", "io", "render", "cache", "auth", "http"]


def _listing(rng: random.Random, path: str, start: int, n: int) -> str:
    words = ["value", "result", "item", "node", "key", "self", "data", "name", "index", "count"]
    lines = []
    for i in range(start, start + n):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(2, 6)))
        lines.append(f"{i}:    {body}")
    return f"[File: {path} ({start + n + 40} lines total)]\n" + "\n".join(lines)


def _pytest(rng: random.Random, failed: int, passed: int) -> str:
    took = f"{rng.uniform(0.2, 3.0):.2f}s"
    if failed:
        names = "\n".join(f"FAILED tests/test_{rng.choice(MODULES)}.py::test_case_{k}"
                          for k in range(failed))
        return f"{'F' * failed}{'.' * passed}\n{names}\n{failed} failed, {passed} passed in {took}"
    return f"{'.' * passed}\n{passed} passed in {took}"


def _traceback(message: str, line: int) -> str:
    return ("Traceback (most recent call last):\n"
            f'  File "/tmp/tmp{line:04x}ab/reproduce.py", line {line}, in <module>\n'
            "    main()\n"
            f"ValueError: {message}")


def bash_success(seed: int, calls: int = 150) -> list[Step]:
    """A successful one-tool run: exploration with empty greps, a failing reproduction, edits by
    ``sed``, fix → re-run rounds (some with the same failure), tests, lint, ``git status``."""
    rng = random.Random(seed)
    steps: list[Step] = []
    # A working agent does not run the same read-only command a third time with nothing changed
    # since (that is a loop by the corpus rules): such a draw is left out of the run.
    since_write: dict[str, int] = {}

    def bash(command: str, output: str) -> None:
        if command.startswith(("sed -i", "cat >", "rm ")):
            since_write.clear()
        elif since_write.get(command, 0) >= 2:
            return
        else:
            since_write[command] = since_write.get(command, 0) + 1
        steps.append(Step("bash", {"command": command}, output))

    bash("ls", "README.md\nsetup.py\nsrc\ntests")
    bash("git status", "On branch main\nnothing to commit, working tree clean")
    bug = rng.choice(MODULES)
    round_ = 0
    failures_left = rng.randint(2, 5)
    while len(steps) < calls - 6:
        choice = rng.random()
        module = rng.choice(MODULES)
        if choice < 0.18:
            term = f"{rng.choice(['parse', 'load', 'render', 'encode'])}_{rng.randint(0, 999)}"
            found = rng.random() < 0.5
            out = (f"src/pkg/{module}.py:{rng.randint(1, 400)}:def {term}(self):" if found else "")
            bash(f"grep -rn '{term}' src/", out)
        elif choice < 0.32:
            start = rng.randint(1, 300)
            bash(f"sed -n '{start},{start + 40}p' src/pkg/{module}.py",
                 _listing(rng, f"src/pkg/{module}.py", start, 40))
        elif choice < 0.40:
            bash(f"find . -name '*{module}*'", f"./src/pkg/{module}.py\n./tests/test_{module}.py")
        elif choice < 0.48:
            bash("git status", f"On branch main\nChanges not staged for commit:\n\tmodified:   "
                               f"src/pkg/{bug}.py")
        elif choice < 0.70:
            # A fix attempt: an edit by sed, then the reproduction again.
            round_ += 1
            bash(f"sed -i 's/old_{round_}/new_{round_}/' src/pkg/{bug}.py", "")
            if failures_left > 0:
                failures_left -= 1
                # Often the same failure as last time: the fix did not land yet.
                message = "could not convert string to float: 'abc'" if rng.random() < 0.6 \
                    else f"invalid literal for int() with base 10: '{rng.randint(0, 99)}'"
                bash("python reproduce.py", _traceback(message, rng.randint(5, 30)))
            else:
                bash("python reproduce.py", "All checks passed.")
        elif choice < 0.80:
            failed = max(0, 3 - round_ // 2)
            bash(f"python -m pytest tests/test_{bug}.py -q",
                 _pytest(rng, failed, 20 + rng.randint(0, 3)))
        elif choice < 0.86:
            bash(f"flake8 src/pkg/{bug}.py",
                 f"src/pkg/{bug}.py:{rng.randint(1, 300)}:1: E302 expected 2 blank lines, found 1")
        elif choice < 0.92:
            bash(f"cat > tests/test_{bug}_extra_{len(steps)}.py << 'EOF'\ndef test_x():\n    "
                 f"assert True\nEOF", "")
        else:
            bash(f"python -c 'import pkg.{module}; print(pkg.{module}.__name__)'", f"pkg.{module}")
    bash(f"sed -i 's/old_final/new_final/' src/pkg/{bug}.py", "")  # the fix that lands
    bash("python reproduce.py", "All checks passed.")
    bash(f"python -m pytest tests/test_{bug}.py -q", _pytest(rng, 0, 24))
    bash("git diff", f"diff --git a/src/pkg/{bug}.py b/src/pkg/{bug}.py\n-    old\n+    new")
    bash("rm reproduce.py", "")
    bash("git status", f"On branch main\n\tmodified:   src/pkg/{bug}.py")
    bash("submit", "")
    return steps


def commands_success(seed: int) -> list[Step]:
    """A successful commands-as-tools run: searches that find nothing, then something, opening and
    scrolling files, edits, a reproduction that fails until the fix, submit."""
    rng = random.Random(seed)
    steps: list[Step] = []
    bug = rng.choice(MODULES)
    for k in range(rng.randint(1, 4)):
        term = f"{rng.choice(['ParseError', 'load_config', 'Renderer'])}{k}"
        steps.append(Step("search_dir", {"search_term": term},
                          f'No matches found for "{term}" in /repo'))
    steps.append(Step("search_dir", {"search_term": "def parse"},
                      f'Found 3 matches for "def parse" in /repo:\n/repo/src/pkg/{bug}.py (3 matches)'))
    steps.append(Step("find_file", {"file_name": f"{bug}.py"},
                      f'Found 1 matches for "{bug}.py" in /repo:\n/repo/src/pkg/{bug}.py'))
    steps.append(Step("open", {"path": f"src/pkg/{bug}.py"},
                      _listing(rng, f"/repo/src/pkg/{bug}.py", 1, 100)))
    for line in range(100, 100 + 100 * rng.randint(2, 4), 100):
        steps.append(Step("goto", {"line_number": line},
                          _listing(rng, f"/repo/src/pkg/{bug}.py", line, 100)))
    steps.append(Step("create", {"filename": "reproduce.py"}, "[File: /repo/reproduce.py (1 lines total)]"))
    steps.append(Step("edit", {"start": 1, "end": 1, "text": "from pkg import main\nmain()"},
                      "[File: /repo/reproduce.py (2 lines total)]\n1:from pkg import main\n2:main()"))
    for attempt in range(rng.randint(2, 4)):
        steps.append(Step("python", {"script": "reproduce.py"},
                          _traceback("could not convert string to float: 'abc'", 2)))
        steps.append(Step("edit", {"start": 40 + attempt, "end": 41 + attempt,
                                   "text": f"    value = float(text.strip()) # try {attempt}"},
                          _listing(rng, f"/repo/src/pkg/{bug}.py", 30 + attempt, 20)))
    steps.append(Step("python", {"script": "reproduce.py"}, "Script completed successfully, no errors."))
    steps.append(Step("submit", {}, "diff --git a/src b/src"))
    return steps


def javac_not_found(seed: int) -> list[Step]:
    """Stuck: the same command fails again and again; only the shell's line counter moves."""
    rng = random.Random(seed)
    steps = [Step("bash", {"command": "ls src/main/java"}, "App.java\nUtil.java")]
    for i in range(12):
        steps.append(Step("bash", {"command": "javac src/main/java/App.java"},
                          f"bash: line {rng.randint(1, 40) + i}: javac: command not found"))
    return steps


def same_edit_reapplied(seed: int) -> list[Step]:
    """Stuck: the same edit re-applied again and again, each time acknowledged anew."""
    rng = random.Random(seed)
    steps = [Step("open", {"path": "src/app.py"}, _listing(rng, "/repo/src/app.py", 1, 50))]
    for i in range(8):
        steps.append(Step("edit", {"start": 12, "end": 14, "text": "    return parse(value)"},
                          f"File updated (revision {i + 3}). Please review the changes."))
    return steps


def open_grep_two_step(seed: int) -> list[Step]:
    """Stuck: an open / search_file two-step repeated with the same arguments and answers."""
    rng = random.Random(seed)
    listing = _listing(rng, "/repo/src/app.py", 1, 100)
    steps = [Step("search_dir", {"search_term": "main"}, 'Found 2 matches for "main" in /repo')]
    for _ in range(8):
        steps.append(Step("open", {"path": "src/app.py"}, listing))
        steps.append(Step("search_file", {"search_term": "parse_args"},
                          'No matches found for "parse_args" in /repo/src/app.py'))
    return steps


def build_rerun(seed: int) -> list[Step]:
    """Stuck: a build re-run while it fails with the same error (new timestamps each time)."""
    rng = random.Random(seed)
    steps = [Step("bash", {"command": "ls"}, "pom.xml\nsrc")]
    for i in range(10):
        stamp = f"2026-11-24T03:{10 + i:02d}:{rng.randint(10, 59)}Z"
        steps.append(Step("bash", {"command": "mvn -q compile"},
                          f"[ERROR] {stamp} Failed to execute goal on project app: Compilation "
                          f"failure\n[ERROR] App.java:[12,8] cannot find symbol\n"
                          f"[INFO] Total time:  {rng.uniform(1, 9):.3f} s"))
    return steps


def empty_searches(seed: int) -> list[Step]:
    """Stuck: a search answering "No matches found" to query after query."""
    rng = random.Random(seed)
    terms = [f"{rng.choice(['cfg', 'conf', 'settings'])}_{i}" for i in range(30)]
    return [Step("search_dir", {"search_term": term}, f'No matches found for "{term}" in /repo')
            for term in terms]


# Stuck shapes, and the call at which the third identical repeat happens in each (None where the
# repeats are not identical calls).
STUCK = {
    "javac-not-found": (javac_not_found, 4),
    "same-edit-reapplied": (same_edit_reapplied, 4),
    "open-grep-two-step": (open_grep_two_step, 6),
    "build-rerun": (build_rerun, 4),
}
