"""``docs/workers.md``: its worked example, two worker processes sharing a run through a real
redis-server, prints what the page says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

from redis_server import RedisServer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workers.md"
_BLOCK = re.compile(r"```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)
_LOG_LINE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \[")  # structlog's console format


def _example() -> tuple[str, str]:
    blocks = [(m["lang"], m["body"]) for m in _BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]
    for (lang, body), (next_lang, output) in pairwise(blocks):
        if lang == "python" and "multiprocessing" in body and next_lang == "text":
            return body, output
    raise AssertionError("docs/workers.md has no worked example followed by its output")


def test_the_two_worker_example_prints_what_the_page_shows(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    code, shown = _example()
    script = tmp_path / "two_workers.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "REDIS_URL": redis_server.url}, cwd=tmp_path, check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stdout.splitlines() if not _LOG_LINE.match(line)]
    assert printed == shown.splitlines()


def test_the_example_s_run_leaves_redis_when_the_dispatcher_ends_it(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    code, _ = _example()
    script = tmp_path / "two_workers.py"
    script.write_text(code, encoding="utf-8")
    subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, check=True,
                   env={**os.environ, "REDIS_URL": redis_server.url}, cwd=tmp_path)
    # Only the mark that tells a process still holding a copy that the run was ended, until the ttl.
    assert redis_server.client().keys("fuzeguard:*") == [b"fuzeguard:{ticket-4711}:x"]
