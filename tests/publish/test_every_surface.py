"""Every surface fuzeguard writes, against secrets and hostile traces at once.

Third review: the secret canaries of the trace tests and the hostile corpus of replay each held on
the surface they were written for, while ``fuze report`` printed terminal escapes (e03) and Redis
held a failed call's password in clear (e07). Here one shared run with secrets in its arguments,
headers and error messages, and one trace whose names carry control characters, are put through
every surface: the live stop report (text and HTML), the trace, the logs, Redis, ``fuze report``
(text and HTML), ``fuze replay`` (text and JSON) and ``--compare`` (text and JSON). What reaches a
terminal shows control characters as escapes; what is JSON stays JSON, line by line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from redis_server import RedisServer

import fuzeguard
from fuzeguard import Config, guard
from fuzeguard._private.cli import main

PASSWORD = "canary-Pa55word-7d1e"
API_KEY = "sk-live-canary0123456789abcdef"
BEARER = "canary-bearer-55aa9f"
CANARIES = (PASSWORD, API_KEY, BEARER)

# Control characters a trace may carry in names and texts: a terminal title, a screen clear,
# colour, a bell, C1 controls and the bidirectional overrides that reorder what is shown.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[32mALL CLEAR\x1b[0m\u202e\x9b31m\u2066"
RAW = ("\x1b", "\x07", "\u202e", "\x9b", "\u2066")


@guard(name="login", on_loop="warn", max_iterations=10**9)
def login(user: str, password: str, api_key: str, headers: dict[str, str]) -> str:
    raise PermissionError(f"access denied for {user} with password {password}")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    captured = capsys.readouterr()
    return captured.out + captured.err


def _redis_dump(server: RedisServer) -> str:
    client = server.client()
    parts: list[bytes] = []
    for key in client.scan_iter("*"):
        kind = client.type(key)
        if kind == b"list":
            parts += client.lrange(key, 0, -1)
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                parts += [field, value]
        elif kind == b"string":
            parts.append(client.get(key) or b"")
    return b"\n".join(parts).decode("utf-8", "replace")


def test_no_secret_reaches_any_surface(
    redis_server: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "secret.jsonl"
    headers = {"Authorization": f"Bearer {BEARER}"}
    with structlog.testing.capture_logs() as logs, fuzeguard.run(
        "secrets", store=redis_server.url, config=Config(), trace=str(trace), store_timeout=5.0,
        log_values=True,
    ) as run:
        for _ in range(4):
            with pytest.raises(PermissionError):
                login("bob", PASSWORD, API_KEY, headers)
        live = run.report()
        surfaces = {"live report text": live.text(), "live report html": live.html()}
    assert run.detections  # the failing attempts were caught
    surfaces["logs"] = json.dumps(logs, default=repr)
    surfaces["trace"] = trace.read_text(encoding="utf-8")
    surfaces["redis"] = _redis_dump(redis_server)
    surfaces["fuze report"] = _cli(capsys, "report", str(trace), "--html",
                                   str(tmp_path / "r.html"))
    surfaces["fuze report html"] = (tmp_path / "r.html").read_text(encoding="utf-8")
    surfaces["fuze replay"] = _cli(capsys, "replay", str(trace))
    surfaces["fuze replay json"] = _cli(capsys, "replay", str(trace), "--format", "json")
    empty = tmp_path / "a.toml"
    empty.write_text("", encoding="utf-8")
    surfaces["--compare"] = _cli(capsys, "replay", str(trace), "--compare", str(empty), str(empty))
    surfaces["--compare json"] = _cli(capsys, "replay", str(trace), "--compare", str(empty),
                                      str(empty), "--format", "json")
    assert "bob" in surfaces["trace"] and "bob" in surfaces["redis"]  # the calls are there
    leaks = {name: [c for c in CANARIES if c in text] for name, text in surfaces.items()}
    assert leaks == {name: [] for name in surfaces}


def _hostile_trace(path: Path) -> Path:
    name = "lookup" + HOSTILE
    lines: list[dict[str, Any]] = [
        {"fn": name, "args": {"q" + HOSTILE: "x"}, "result": "same" + HOSTILE,
         "run": "run" + HOSTILE, "ts": 0.1 * i} for i in range(6)
    ]
    lines.append({"fn": "fetch" + HOSTILE, "args": {"u": 1}, "error": "Boom" + HOSTILE,
                  "run": "run" + HOSTILE, "ts": 0.7})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_no_control_character_of_a_hostile_trace_reaches_any_surface(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    trace = str(_hostile_trace(tmp_path / "hostile.jsonl"))
    empty = tmp_path / "a.toml"
    empty.write_text("", encoding="utf-8")
    surfaces = {
        "fuze report": _cli(capsys, "report", trace, "--html", str(tmp_path / "r.html")),
        "fuze replay": _cli(capsys, "replay", trace),
        "fuze replay json": _cli(capsys, "replay", trace, "--format", "json"),
        "--compare": _cli(capsys, "replay", trace, "--compare", str(empty), str(empty)),
        "--compare json": _cli(capsys, "replay", trace, "--compare", str(empty), str(empty),
                               "--format", "json"),
    }
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "stopped at call 5" in surfaces["fuze report"]  # the trace was judged, not refused
    raw = {name: [c for c in RAW if c in text] for name, text in surfaces.items()}
    assert raw == {name: [] for name in surfaces}
    for name in ("fuze replay json", "--compare json"):
        for line in surfaces[name].splitlines():
            if line.startswith("{"):
                json.loads(line)  # still JSON, each line
    # The HTML page escapes markup (no element comes from the trace); control characters in its
    # text are not rewritten there (a browser does not act on them).
    assert "<script" not in html.lower() and "ALL CLEAR" in html
