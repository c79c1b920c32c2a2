"""Secrets stay secret by default (SPEC §7, §8): nothing fuzeguard writes — traces, log events,
fingerprints — gives a redacted value away, and replay still reaches the live verdicts."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

import fuzeguard
from fuzeguard import Config, LoopDetected, guard
from fuzeguard._private.meaning.fingerprint import encode, fingerprint
from fuzeguard._private.meaning.secrets import redactor, scrub, scrub_leaves
from fuzeguard._private.reports.replay import Replayer


def _text(path: Path) -> str:
    return path.read_text()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@guard(name="login")
def login(username: str, password: str) -> str:
    raise PermissionError(f"bad password {password!r} for {username}")


@guard(name="call_api")
def call_api(api_key: str, q: str) -> str:
    return json.dumps({"answer": 42, "api_key": api_key})


def test_secret_arguments_are_redacted_in_traces_by_default(tmp_path: Path) -> None:
    """r17: with default settings, passwords and API keys reached traces in clear."""
    trace = tmp_path / "t.jsonl"
    with structlog.testing.capture_logs(), fuzeguard.run(trace=str(trace)):
        call_api("sk-live-ABC", "q")
        with pytest.raises(PermissionError):
            login("alice", "hunter2")
    text = _text(trace)
    assert "sk-live-ABC" not in text and "hunter2" not in text
    first, second = _lines(trace)
    assert first["args"] == {"api_key": "[redacted]", "q": "q"}
    assert second["args"] == {"username": "alice", "password": "[redacted]"}


def test_an_error_message_quoting_a_redacted_argument_is_scrubbed(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)), pytest.raises(PermissionError):
        login("alice", "hunter2")
    (line,) = _lines(trace)
    assert line["error"] == "PermissionError: bad password '[redacted]' for alice"


def test_a_json_text_result_echoing_a_secret_is_scrubbed(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        call_api("sk-live-ABC", "q")
    (line,) = _lines(trace)
    assert json.loads(line["result"]) == {"answer": 42, "api_key": "[redacted]"}


def test_secret_names_match_at_any_depth_in_any_case_by_words(tmp_path: Path) -> None:
    @guard(name="fetch")
    def fetch(url: str, headers: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        return {"session": {"AccessToken": "at-123456", "user": "bob"}, "max_tokens": 100}

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        fetch(
            "https://api.example.com/v1?token=tok-SECRET&page=2",
            {"Authorization": "Bearer AUTHSECRET", "X-Api-Key": "XKEY-123", "Accept": "json"},
            {"nested": [{"db_password": "pw-999", "Client-Secret": "cs-1"}], "retries": 3},
        )
    text = _text(trace)
    for secret in ("tok-SECRET", "AUTHSECRET", "XKEY-123", "pw-999", "cs-1", "at-123456"):
        assert secret not in text
    (line,) = _lines(trace)
    assert line["args"]["url"] == "https://api.example.com/v1?token=[redacted]&page=2"
    assert line["args"]["headers"]["Accept"] == "json"
    assert line["args"]["options"]["retries"] == 3
    assert line["result"]["max_tokens"] == 100 and line["result"]["session"]["user"] == "bob"


def test_the_redact_setting_adds_names_to_the_built_in_ones(tmp_path: Path) -> None:
    @guard(name="pay", redact=["account_number"])
    def pay(account_number: str, password: str) -> str:
        return "ok"

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        pay("DE89-3704", "hunter2")
    (line,) = _lines(trace)
    assert line["args"] == {"account_number": "[redacted]", "password": "[redacted]"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer eyJhbGciOi.abc", "Authorization: Bearer [redacted]"),
        ("curl -H 'Bearer abcdef123456'", "curl -H 'Bearer [redacted]'"),
        ("postgres://admin:s3cr3t@db:5432/app", "postgres://admin:[redacted]@db:5432/app"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "AWS_SECRET_ACCESS_KEY=[redacted]"),
        ('{"refresh_token": "r-1234"}', '{"refresh_token": "[redacted]"}'),
        ("key sk-proj-abcdefghijklmnop used", "key [redacted] used"),
        ("max_tokens: 100, author: Ann", "max_tokens: 100, author: Ann"),
    ],
)
def test_secret_shaped_text_is_scrubbed(text: str, expected: str) -> None:
    assert scrub(text) == expected


def test_scrubbing_stays_linear_on_hostile_text() -> None:
    """Bounded repetitions: no pattern backtracks quadratically on long runs of separators."""
    import time

    start = time.thread_time()  # CPU time: a busy machine does not add to it
    for text in ("a-" * 100_000, "token " * 50_000, "a_" * 100_000 + "="):
        scrub(text)
    assert time.thread_time() - start < 5  # quadratic patterns take minutes here


def test_max_tokens_and_author_are_not_secret_names() -> None:
    red = redactor()
    assert not red.is_secret("max_tokens") and not red.is_secret("author")
    assert red.is_secret("apiKey") and red.is_secret("X-Api-Key") and red.is_secret("PASSWORD")


def test_written_fingerprints_do_not_reveal_a_redacted_password(tmp_path: Path) -> None:
    """r17: ``args_fp`` was the unsalted fingerprint of the unredacted arguments; a dictionary
    attack recovered the redacted password from the trace."""
    trace = tmp_path / "t.jsonl"
    with structlog.testing.capture_logs() as logs, fuzeguard.run(trace=str(trace)):
        with pytest.raises(LoopDetected):
            for _ in range(5):
                with pytest.raises(PermissionError):
                    login("alice", "hunter2")
    prefix = encode("login") + b"\x00"
    guesses = {
        fingerprint({"username": "alice", "password": guess}, prefix=prefix).hex()
        for guess in ("123456", "password", "letmein", "hunter2", "qwerty")
    }
    written = {line["args_fp"] for line in _lines(trace)}
    logged = {e["args_fp"] for e in logs if "args_fp" in e}
    assert written and logged
    assert not (written | logged) & guesses


def test_a_trace_with_redacted_arguments_replays_to_the_live_verdicts(tmp_path: Path) -> None:
    """Two calls that differ only in a redacted password stay two different calls in replay."""
    trace = tmp_path / "t.jsonl"
    live: list[tuple[int, str, str]] = []

    def keep(detection: fuzeguard.Detection) -> None:
        live.append((detection.call_index, detection.layer, detection.action))

    with structlog.testing.capture_logs(), fuzeguard.run(trace=str(trace), on_detect=keep):
        for password in ("a1", "b2", "c3"):
            with pytest.raises(PermissionError):
                login("alice", password)
        with pytest.raises(LoopDetected):
            for _ in range(5):  # warned at the 3rd and 4th identical failures, killed at the 5th
                with pytest.raises(PermissionError):
                    login("alice", "same")
    summary = Replayer(Config()).replay_file(str(trace))
    replayed = [(d.detection.call_index, d.detection.layer, d.detection.action)
                for d in summary.detections]
    assert replayed == live and [action for _, _, action in live] == ["warn", "warn", "kill"]


def test_detection_messages_never_quote_a_tools_output() -> None:
    """r18: the semantic layer quoted 60 characters of the result into logs and exceptions."""

    @guard(layers=["semantic"], on_loop="warn", name="read_secret")
    def read_secret(path: str) -> str:
        return "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG.\n" * 12

    with structlog.testing.capture_logs() as logs, fuzeguard.run():
        read_secret("/etc/app.env")
        read_secret("/etc/app.env")
    (event,) = [e for e in logs if e["event"] == "fuzeguard.loop_detected"]
    assert "wJalr" not in event["message"].lower() and "aws_secret" not in event["message"].lower()
    assert "a passage of 43 characters" in event["message"]


def test_a_failing_hooks_repr_never_reaches_the_logs() -> None:
    """r13 (b2): the hook's repr (a functools.partial holding a token) was logged."""

    def forward(detection: fuzeguard.Detection, token: str = "") -> None:
        raise RuntimeError(f"backend refused token={token}")

    tool = guard(lambda x: "same", name="t", on_loop="warn",
                 on_detect=functools.partial(forward, token="sk-live-SECRET123456"))
    with structlog.testing.capture_logs() as logs, fuzeguard.run():
        for _ in range(3):
            tool(1)
    (failed,) = [e for e in logs if e["event"] == "fuzeguard.hook_failed"]
    assert failed["hook"].endswith("forward")
    assert "SECRET123456" not in json.dumps(logs, default=str)


def test_logged_values_are_redacted_too() -> None:
    tool = guard(lambda password, q: "same", name="t", log_values=True, on_loop="warn")
    with structlog.testing.capture_logs() as logs, fuzeguard.run():
        for _ in range(3):
            tool("hunter2", "visible query")
    (event,) = [e for e in logs if e["event"] == "fuzeguard.loop_detected"]
    assert "visible query" in event["args"] and "hunter2" not in event["args"]


def test_a_secret_field_of_a_dataclass_argument_is_scrubbed_from_the_error(tmp_path: Path) -> None:
    from dataclasses import dataclass

    @dataclass
    class Credentials:
        user: str
        password: str

    @guard(name="connect")
    def connect(creds: Credentials) -> None:
        raise ConnectionError(f"login {creds.user}/{creds.password} refused")

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)), pytest.raises(ConnectionError):
        connect(Credentials("bob", "s3cr3t-pw"))
    (line,) = _lines(trace)
    assert "s3cr3t-pw" not in _text(trace)
    assert line["args"]["creds"]["fields"] == {"user": "bob", "password": "[redacted]"}
    assert line["error"] == "ConnectionError: login bob/[redacted] refused"


def test_a_truncated_value_is_scrubbed_in_its_head_and_stays_fast(tmp_path: Path) -> None:
    """Scrubbing runs on what is written (at most the cap), not on the whole value: a 2 MB
    result costs no more than its 1 KB head; JSON text quoted inside the head is scrubbed too."""
    inner = json.dumps({"api_key": "k-123456", "note": "x" * 100})

    @guard(name="dump", layers=[], trace_max_result_bytes=1000)
    def dump(n: int) -> dict[str, Any]:
        return {"config": inner, "rows": ["row " * 250] * 2000}

    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        dump(1)
    (line,) = _lines(trace)
    assert line["result"]["$fuze"] == "truncated" and line["result"]["bytes"] > 2_000_000
    assert "k-123456" not in _text(trace)
    assert '\\"api_key\\": \\"[redacted]\\"' in line["result"]["head"]


SHORT_AND_GLUED = ["pw", "passcode", "pin", "apitoken", "accesstoken", "authtoken", "privatekey",
                   "secretkey", "jwt", "bearer", "totp", "mfa_code", "signing_key",
                   "encryption_key", "ssh_key", "client_key", "mfaCode", "dbPassword",
                   "clientsecret"]


@pytest.mark.parametrize("name", SHORT_AND_GLUED)
def test_short_and_glued_secret_names_are_redacted(tmp_path: Path, name: str) -> None:
    """Second review d21: pw, pin, apitoken, privatekey, jwt... were written in clear."""
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        guard(lambda **kw: "ok", name="f")(**{name: "Zq9vX2mK7pL4"})
    assert "Zq9vX2mK7pL4" not in _text(trace)
    assert _lines(trace)[0]["args"] == {name: "[redacted]"}


@pytest.mark.parametrize(
    "name", ["max_tokens", "tokens_used", "author", "spinner", "pinned", "keyword", "primary_key",
             "sort_key", "typing_speed"],
)
def test_word_rules_leave_ordinary_names_alone(name: str) -> None:
    assert not redactor().is_secret(name)


def test_values_passed_through_star_args_are_redacted_everywhere_they_are_written(
    tmp_path: Path,
) -> None:
    """Second review d21: values passed through *args have no name and were written in clear."""

    @guard(name="connect", log_values=True, layers=["dedup"], on_loop="warn")
    def connect(host: str, *args: str) -> str:
        raise ConnectionError(f"refused with {args[0]}")

    trace = tmp_path / "t.jsonl"
    with structlog.testing.capture_logs() as logs, fuzeguard.run(trace=str(trace)):
        for _ in range(3):
            with pytest.raises(ConnectionError):
                connect("db.internal", "Zq9vX2mK7pL4")
    assert "Zq9vX2mK7pL4" not in _text(trace) + repr(logs)
    first = _lines(trace)[0]
    assert first["args"] == {"host": "db.internal", "args": "[redacted]"}
    assert first["error"] == "ConnectionError: refused with [redacted]"
    assert [e["args"] for e in logs if e["event"] == "fuzeguard.loop_detected"] == [
        "{'host': 'db.internal', 'args': '[redacted]'}"
    ]


def test_positional_arguments_are_redacted_by_their_parameter_names(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        guard(lambda user, pin: "ok", name="unlock")("bob", "4711")
    assert _lines(trace)[0]["args"] == {"user": "bob", "pin": "[redacted]"}


@pytest.mark.parametrize(
    "token",
    ["glpat-abcdefghijklmnopqrst12", "npm_" + "a1" * 18, "hf_" + "A" * 34,
     "SG.abcdefghijklmnopqr.stuvwxyzABCDEFGHIJ", "shpat_" + "0f" * 16, "dop_v1_" + "ab" * 32],
)
def test_well_known_key_formats_are_scrubbed_wherever_they_appear(
    tmp_path: Path, token: str
) -> None:
    trace = tmp_path / "t.jsonl"
    with fuzeguard.run(trace=str(trace)):
        guard(lambda note: {token: f"use {token}"}, name="f")(f"key is {token}.")
    assert token not in _text(trace)
    line = _lines(trace)[0]
    assert line["args"] == {"note": "key is [redacted]."}
    assert line["result"] == {"[redacted]": "use [redacted]"}


@pytest.mark.parametrize("secret_at", [None, "pair", "nested", "set", "mapping"])
def test_scrubbing_what_a_layer_keeps_checks_every_string_however_it_is_held(
    secret_at: str | None,
) -> None:
    """What a shared run writes of a call's features (word pairs in sets, in tuples) is scrubbed
    leaf by leaf: a value with nothing to scrub comes back as the same object, and one secret
    anywhere in it, a named value or a secret-shaped one, is scrubbed wherever it sits."""
    pairs = [("river", "stone"), ("cloud", "maple"), (3, None)]
    token = "ghp_" + "a" * 36
    if secret_at == "pair":
        pairs.append(("hunter2x", "stone"))
    elif secret_at == "nested":
        pairs.append(("river", ("deep", (token,))))  # type: ignore[arg-type]
    elif secret_at == "set":
        pairs.append(frozenset({"plain", "hunter2x"}))  # type: ignore[arg-type]
    listed: list[Any] = ["x", "y"]
    if secret_at == "mapping":
        listed.append({"k": token})
    value = (frozenset(pairs), listed)
    scrubbed = scrub_leaves(value, ("hunter2x",))
    if secret_at is None:
        assert scrubbed is value
        return
    text = repr(scrubbed)
    assert "hunter2x" not in text and token not in text
    assert "[redacted]" in text
    assert scrub_leaves(scrubbed, ("hunter2x",)) == scrubbed  # nothing left to scrub
