"""smolagents ``ToolCallingAgent`` with guarded tools and ``stop_on_kill``: a scripted model that
loops forever, under each action (real smolagents package, no network)."""

from __future__ import annotations

from typing import Any

import pytest
from smolagents import ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.smolagents import LoopGuard, guarded_tool, stop_on_kill
from tests.helpers.stuck_agents import (
    ACTIONS,
    VARIANTS,
    WRAP_UP,
    Behaviour,
    Tally,
    check,
    run_stuck,
    script,
    short,
    tools,
)


class StuckModel(Model):
    """Calls a tool every step, following ``script``; keeps what the tools answered."""

    def __init__(self, variant: str) -> None:
        super().__init__(model_id="stuck")
        self.variant = variant
        self.turns = 0
        self.shown: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        last = messages[-1]
        content = last["content"] if isinstance(last, dict) else last.content
        text = " ".join(c.get("text", "") for c in content) if isinstance(content, list) else str(content)
        if "Observation:" in text or "Error" in text:
            self.shown.append(text)
        if tools_to_call_from is None:  # the max-steps prompt asks for a plain final answer
            return ChatMessage(role=MessageRole.ASSISTANT, content="I could not finish.")
        name, args = script(self.variant, self.turns)
        self.turns += 1
        call = ChatMessageToolCall(id=f"c{self.turns}", type="function",
                                   function=ChatMessageToolCallFunction(name=name, arguments=args))
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def _agent(action: str, variant: str, tally: Tally, *, callback: bool = True) -> tuple[Any, StuckModel]:
    model = StuckModel(variant)
    agent_tools = [guarded_tool(f, on_loop=ACTIONS[action], on_detect=tally.on_detect)
                   for f in tools(tally)]
    agent = ToolCallingAgent(tools=agent_tools, model=model, verbosity_level=0,
                             step_callbacks=[stop_on_kill] if callback else [])
    return agent, model


def _run(agent: Any) -> tuple[str, Any]:
    """``agent.run`` with its default ``max_steps`` (20); how it ended."""
    try:
        with capture_logs(), fuzeguard.run("task"):
            answer = agent.run("find me a laptop")
    except LoopDetected as exc:
        return "LoopDetected raised by stop_on_kill", exc
    return f"returned {answer!r} after max_steps {agent.max_steps}", answer


def _model_shown(model: StuckModel) -> str | None:
    for text in model.shown:
        for marker in ("You called", "You are going", "You have", "The last", "LoopDetected"):
            at = text.find(marker)
            if at >= 0:
                return short(text[at:])
    return None


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_stuck_agent_behaves_as_recorded(action: str, variant: str) -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, action, variant)
    check("smolagents", action, variant, Behaviour(
        tool_runs=tally.total,
        after_first_detection=tally.after_detection,
        model_turns=model.turns,
        ended=ended,
        model_shown=_model_shown(model),
    ))


def test_stop_on_kill_ends_the_run_with_loop_detected_before_the_model_is_asked_again() -> None:
    tally, model, _, exc = run_stuck(_agent, _run, "kill", "same")
    assert isinstance(exc, LoopDetected) and exc.detection.layer == "dedup"
    assert tally.total == 4 and model.turns == 5


def test_without_the_callback_a_kill_does_not_end_the_run() -> None:
    """What the callback is for: smolagents shows the error and goes on to max_steps."""
    tally = Tally()
    agent, model = _agent("kill", "same", tally, callback=False)
    _, answer = _run(agent)
    assert answer == "I could not finish." and model.turns == agent.max_steps
    assert tally.total == 4


def test_a_skip_shows_the_model_the_message_and_escalates_to_a_kill() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "skip", "alternate")
    assert ended == "LoopDetected raised by stop_on_kill" and tally.total == 7
    assert "You are going round in a cycle" in model.shown[7]


def test_the_ladder_ends_an_alternation_at_its_tenth_call() -> None:
    tally, model, ended, _ = run_stuck(_agent, _run, "ladder", "alternate")
    assert ended == "LoopDetected raised by stop_on_kill"
    assert model.turns == 10 and tally.total == 8


class RequestModel(Model):
    """A server's model: a request for "loop" searches for ever; any other request searches once,
    then answers with what it found (smolagents' final_answer tool)."""

    def __init__(self, code: bool = False) -> None:
        super().__init__(model_id="request")
        self.code = code
        self.shown: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        texts = []
        for message in messages:
            content = message["content"] if isinstance(message, dict) else message.content
            texts.append(" ".join(c.get("text", "") for c in content) if isinstance(content, list)
                         else str(content))
        self.shown.append(texts[-1])
        if "[fuzeguard] Your tool calls were stopped" in texts[-1]:  # asked for a final answer
            return ChatMessage(role=MessageRole.ASSISTANT, content=WRAP_UP)
        asked = "loop" if any("TASK: loop" in t for t in texts) else next(
            t.split("TASK: ")[1].split()[0] for t in texts if "TASK: " in t)
        found = "Observation:" in texts[-1] or "3 results" in texts[-1]
        name, args = ("final_answer", {"answer": f"answer to {asked}"}) if found and asked != "loop" \
            else ("search", {"query": "laptops"})
        if self.code:
            code = f"final_answer({args['answer']!r})" if name == "final_answer" \
                else "print(search(query='laptops'))"
            return ChatMessage(role=MessageRole.ASSISTANT, content=f"Thought: go\n<code>\n{code}\n</code>")
        call = ChatMessageToolCall(id=f"c{len(messages)}", type="function",
                                   function=ChatMessageToolCallFunction(name=name, arguments=args))
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def _guarded_agent(tally: Tally, guard: LoopGuard, *, code: bool = False, **kwargs: Any) -> Any:
    from smolagents import CodeAgent
    from smolagents import tool as smol_tool

    kind = CodeAgent if code else ToolCallingAgent
    agent = kind(tools=[smol_tool(f) for f in tools(tally)], model=RequestModel(code),
                 verbosity_level=0, **kwargs)
    return guard.protect(agent)


@pytest.mark.parametrize("code", [False, True], ids=["ToolCallingAgent", "CodeAgent"])
def test_a_server_that_only_adds_the_guard_keeps_concurrent_requests_apart(code: bool) -> None:
    """6 legitimate requests and 1 looping one at once in threads, one agent per request, no
    fuzeguard.run(); a CodeAgent runs its tools in a worker thread of its own."""
    from concurrent.futures import ThreadPoolExecutor

    tally = Tally()
    guard = LoopGuard()

    def request(text: str) -> str:
        return str(_guarded_agent(tally, guard, code=code).run(f"TASK: {text}"))

    with capture_logs(), ThreadPoolExecutor(7) as pool:
        *answers, looped = pool.map(request, [*(f"r{i}" for i in range(6)), "loop"])
        assert answers == [f"answer to r{i}" for i in range(6)]
        assert looped == WRAP_UP  # the looping request, ended with the model's final answer
        assert tally.total - 6 <= 5
        assert request("later") == "answer to later"


def test_a_kill_ends_the_run_with_the_final_answer_or_raises_with_exit_behavior_error() -> None:
    tally = Tally()
    with capture_logs():
        # The model's own final answer, asked through smolagents' provide_final_answer with the
        # detection's message as the reason; or the canned one without wrap_up.
        assert _guarded_agent(tally, LoopGuard()).run("TASK: loop") == WRAP_UP
        answer = _guarded_agent(tally, LoopGuard(wrap_up=False)).run("TASK: loop")
        assert answer.startswith("Stopped: the agent was looping (dedup at tool call 5")
        with pytest.raises(LoopDetected) as raised:
            _guarded_agent(tally, LoopGuard(exit_behavior="error")).run("TASK: loop")
    assert raised.value.stats.calls == 4 and raised.value.stats.killed


def test_a_streamed_run_ends_with_a_final_answer_step() -> None:
    from smolagents.memory import FinalAnswerStep

    tally = Tally()
    with capture_logs():
        steps = list(_guarded_agent(tally, LoopGuard()).run("TASK: loop", stream=True))
    assert isinstance(steps[-1], FinalAnswerStep)
    assert steps[-1].output.startswith("Stopped: the agent was looping")
    assert tally.total == 4


def test_a_skip_only_agent_that_keeps_searching_is_ended_by_escalation() -> None:
    tally = Tally()
    with capture_logs():
        answer = _guarded_agent(tally, LoopGuard(on_loop="skip")).run("TASK: loop")
    assert answer == WRAP_UP and tally.total <= 10  # ended by the kill the skips escalated to


def test_a_warning_reaches_the_model_as_a_note_on_the_observation() -> None:
    tally = Tally()
    agent = _guarded_agent(tally, LoopGuard(on_loop="warn"), max_steps=5)
    with capture_logs():
        agent.run("TASK: loop")
    noted = [t for t in agent.model.shown if "[fuzeguard warning] You called `search`" in t]
    assert noted and "3 results for laptops" in noted[0]


def test_tool_subclasses_and_managed_agents_are_guarded_and_the_originals_untouched() -> None:
    from smolagents import Tool

    ran: list[str] = []

    class Search(Tool):
        name = "search"
        description = "Search the web."
        inputs = {"query": {"type": "string", "description": "what"}}  # noqa: RUF012
        output_type = "string"

        def forward(self, query: str) -> str:
            ran.append(query)
            return "3 results for laptops"

    original = Search()
    worker = ToolCallingAgent(tools=[original], model=RequestModel(), verbosity_level=0,
                              name="worker", description="Searches.")
    manager = ToolCallingAgent(tools=[], model=RequestModel(), verbosity_level=0,
                               managed_agents=[worker])
    LoopGuard().protect(manager)
    assert worker.tools["search"] is not original
    assert original("x") == "3 results for laptops"  # the original is not guarded
    with capture_logs():
        answer = worker.run("TASK: loop")
    assert answer == WRAP_UP and len(ran) == 1 + 4  # the worker's loop, ended
