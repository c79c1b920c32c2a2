"""What every integration shares: guarding a tool call known by name and argument mapping."""

from __future__ import annotations

import fuzeguard
from fuzeguard.integrations._shared import calls as _calls
from fuzeguard.integrations._shared.calls import ToolCalls


def test_a_call_by_name_is_fingerprinted_like_a_guarded_function_with_those_arguments() -> None:
    calls = ToolCalls(on_loop="skip")
    ran = []
    with fuzeguard.run():
        outcomes = [calls.call("search", {"query": "x"}, lambda: ran.append(1) or "r")[0]
                    for _ in range(6)]
    assert [o.runs for o in outcomes] == [True, True, True, True, False, False]
    assert len(ran) == 4


def test_the_argument_order_of_a_mapping_does_not_matter() -> None:
    calls = ToolCalls(on_loop="skip")
    with fuzeguard.run():
        for i in range(5):
            args = {"a": 1, "b": 2} if i % 2 else {"b": 2, "a": 1}
            outcome, _ = calls.call("lookup", args, lambda: "same")
    assert outcome.skipped is not None


def test_guards_per_tool_name_are_bounded() -> None:
    calls = ToolCalls()
    with fuzeguard.run(max_calls=10_000):
        for i in range(_calls.MAX_TOOLS + 50):
            calls.call(f"made_up_{i}", {}, lambda: None)
    assert len(calls._guards) == _calls.MAX_TOOLS
