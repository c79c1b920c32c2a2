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
from smolagents.monitoring import TokenUsage
from structlog.testing import capture_logs

import fuzeguard
from fuzeguard import LoopDetected
from fuzeguard.integrations.smolagents import LoopGuard, guarded_tool, stop_on_kill
from tests.helpers.stuck_agents import (
    ACTIONS,
    LEGIT_ANSWER,
    VARIANTS,
    WRAP_UP,
    Behaviour,
    Tally,
    check,
    check_model_calls_traced,
    check_model_loops,
    killed_runs,
    lookup,
    model_loop_calls,
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


class ModelLoop(Model):
    """A model that loops without a tool ever doing anything new (``model_loop``; its answer
    through smolagents' ``final_answer`` tool); asked for a final answer (no tool offered), it
    answers ``WRAP_UP``; ``text`` answers with the same text every step (not a tool call)."""

    def __init__(self, kind: str) -> None:
        super().__init__(model_id="model-loop")
        self.kind = kind
        self.turns = 0

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        self.turns += 1
        last = messages[-1]
        content = last["content"] if isinstance(last, dict) else last.content
        if "[fuzeguard] Your tool calls were stopped" in str(content):  # asked for a final answer
            return ChatMessage(role=MessageRole.ASSISTANT, content=WRAP_UP)
        usage = TokenUsage(input_tokens=100, output_tokens=20)
        if self.kind == "text":
            return ChatMessage(role=MessageRole.ASSISTANT, content="Let me think about laptops.",
                               token_usage=usage)
        calls = model_loop_calls(self.kind, self.turns) or [("final_answer", {"answer": LEGIT_ANSWER})]
        asked = [ChatMessageToolCall(id=f"c{self.turns}-{k}", type="function",
                                     function=ChatMessageToolCallFunction(name=name, arguments=args))
                 for k, (name, args) in enumerate(calls)]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=asked, token_usage=usage)


def _model_loop(kind: str, *, code: bool = False, **options: Any,
                ) -> tuple[Any, int, Tally, list[dict[str, Any]]]:
    """The run's answer, the model calls, the tool runs and the logs."""
    from smolagents import CodeAgent
    from smolagents import tool as smol_tool

    tally = Tally()
    model = ModelLoop(kind)
    agent = (CodeAgent if code else ToolCallingAgent)(
        tools=[smol_tool(f) for f in [*tools(tally), lookup]], model=model, verbosity_level=0,
        max_steps=30)
    LoopGuard(**options).protect(agent)
    with capture_logs() as logs:
        answer = agent.run("find me a laptop")
    return answer, model.turns, tally, logs


@pytest.mark.parametrize(("kind", "code"), [("unknown", False), ("invalid", False), ("text", False),
                                           ("text", True)])
def test_a_model_that_keeps_asking_for_a_call_that_cannot_run_is_ended_with_an_answer(
    kind: str, code: bool,
) -> None:
    """smolagents answers an unknown tool (``AgentToolExecutionError``), arguments the tool does
    not take (``AgentToolCallError``, before the tool runs) and a text it cannot parse as a call
    (``AgentParsingError``; a ``CodeAgent``'s text without code too) with an error the model
    reads next step, until ``max_steps``: each such step is a rejected model call, and the run
    ends within 8 model calls with the model's own final answer."""
    answer, calls, tally, logs = _model_loop(kind, code=code)
    assert answer == WRAP_UP and calls <= 8 and tally.total == 0
    assert killed_runs(logs) == [("smolagents-run/model", "model.rejected")]


def test_a_batch_every_turn_a_legitimate_run_and_max_model_calls_meet_the_bar() -> None:
    """smolagents' ``max_steps`` asks for a final answer too; ``max_model_calls`` ends the run
    after the step that reaches it, before the next model call."""
    check_model_loops(_model_loop, "smolagents-run/model")
    with pytest.raises(ValueError, match="max_model_calls takes a whole number of 1 or more"):
        LoopGuard(max_model_calls=True)  # type: ignore[arg-type]


def test_model_calls_are_traced_with_their_tokens_and_fuze_replay_judges_them_alike(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced = check_model_calls_traced(tmp_path, monkeypatch, lambda: _model_loop("unknown")[0])
    assert [line.get("cost") for line in traced[:2]] == [120.0, 120.0]  # token_usage's total
