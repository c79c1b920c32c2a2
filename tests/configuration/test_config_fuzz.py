"""Any fuze.toml, however broken, is a valid Config or a ConfigError naming the file, and a valid
one guards calls without internal errors (SPEC §6, from a fuzzing review of the loader)."""

from __future__ import annotations

import io
import math
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import Config, ConfigError, LoopDetected
from fuzeguard._private import cli
from fuzeguard._private.configuration.schema import schema

KEYS = [*schema(), "kill_on_loop", "unknown_key", "Window_Size"]
SECTIONS = ["defaults", "loop_detection", "functions", "tool", "Defaults", ""]


def toml_str(s: str) -> str:
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c
                         for c in escaped) + '"'


def toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_str(k)


def toml_val(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_val(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_key(k)} = {toml_val(x)}" for k, x in v.items()) + "}"


scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, 2, 3, 2**31 - 1, 2**31, 2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["kill", "warn", "skip", "observe", "30m", "1h30m", "1" * 300, "dedup",
                     "semantic", ".rel:x", "nope:x", "", "traces/", "5"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)
tables = st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), values, max_size=4)


@st.composite
def documents(draw: Any) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        section = draw(st.sampled_from(SECTIONS))
        if section == "functions":
            fn = draw(st.one_of(st.sampled_from(["tool", "t"]), st.text(min_size=1, max_size=6)))
            lines.append(f"[functions.{toml_key(fn)}]")
        elif section:
            lines.append(f"[{toml_key(section)}]")
        lines += [f"{toml_key(k)} = {toml_val(v)}" for k, v in draw(tables).items()]
    text = "\n".join(lines) + "\n"
    junk = draw(st.sampled_from(["", "a = [[[[[", "= 1", "[defaults\n", "x = 1\nx = 2",
                                 "layers = " + "[" * 3000 + "]" * 3000]))
    return text + junk


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(documents())
def test_any_document_is_a_config_or_a_config_error_and_a_valid_one_guards_cleanly(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuze.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            config = Config.load(path, env="")
        except ConfigError as exc:
            assert str(exc).startswith(str(path))
            err = io.StringIO()
            assert cli.check(str(path), env="", out=io.StringIO(), err=err) == 2
            assert err.getvalue().startswith("fuze check: ")
            return
        assert cli.check(str(path), env="", out=io.StringIO(), err=io.StringIO()) == 0

    @fuzeguard.guard(name="tool")
    def tool(x: int) -> int:
        return x

    with capture_logs() as logs:
        try:
            with fuzeguard.run(config=config):
                for i in range(3):
                    tool(i)
        except LoopDetected:
            pass
    assert [e for e in logs if e["event"] == "fuzeguard.internal_error"] == []
