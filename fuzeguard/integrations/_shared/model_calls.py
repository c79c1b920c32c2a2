"""Model calls as part of an invocation: a model that loops without running a tool.

A model can loop where no tool call is ever judged: it keeps asking for a tool that does not exist
or with arguments the framework rejects, or keeps answering with text the framework does not
take as final. Where the framework hands the integration each model response, ``ModelCalls``
records it, in a run of its own beside the invocation's run (``"NAME/model"``, traced like any
run, so ``fuze replay`` judges it; its calls do not count toward the invocation's ``max_calls``):

- a call is recorded as ``model`` with what the model asked for: its tool calls (names and
  arguments, in order) or, when it asked for none, a digest of its text; its result says whether
  the framework rejected it; the tokens it used, when known, are its cost;
- a call the framework **rejected** (``model.rejected``: it asked for a tool the agent does not
  have, or, told by ``rejection`` once the framework found them invalid, arguments the tool does
  not take, or, told by ``failed_output``, a final answer that failed the output's validation,
  recorded by how it failed) and a **text** answer the framework did not take as final
  (``model.text``) are judged by ``dedup`` and ``cycle``: the same rejected call, or the same
  text, again with nothing else in between, ends the agent like a kill;
- a call whose tool calls the framework accepted is only counted: the tool calls themselves are
  judged in the invocation's run, where a poller's kind and a tool's own settings are known;
- ``max_model_calls`` (off by default) ends the agent instead of the model call after the N-th
  (``over_limit``, asked before the call is made).

``record`` returns the detection that ends the agent (the integration then ends it as it ends a
kill: the model's final answer, ``_wrap_up``, or the canned one), else None.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref
from collections.abc import Sequence
from typing import Any

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.guard import add_cost
from fuzeguard._private.runs.run import Run
from fuzeguard.integrations._shared.calls import ToolCalls
from fuzeguard.integrations._shared.runs import within

MODEL = "model"


def asked(calls: Sequence[tuple[str, Any]], text: str | None) -> dict[str, Any]:
    """The arguments a model call is recorded with: its tool calls, or a digest of its text."""
    if calls:
        return {"calls": [f"{name}({json.dumps(args, sort_keys=True, default=str)})"
                          for name, args in calls]}
    digest = hashlib.sha256((text or "").strip().encode("utf-8", "replace")).hexdigest()[:16]
    return {"text": digest}


class ModelCalls:
    """The model calls of an integration's invocations (see the module docstring)."""

    def __init__(self, max_model_calls: int | None = None) -> None:
        if max_model_calls is not None and (
            isinstance(max_model_calls, bool) or not isinstance(max_model_calls, int)
            or max_model_calls < 1
        ):
            raise ValueError(f"max_model_calls takes a whole number of 1 or more (or None: no "
                             f"limit), got {max_model_calls!r}")
        self.max_model_calls = max_model_calls
        self._counted = ToolCalls(on_loop="kill", layers=[])
        # A rejected call was answered by the framework's own error each time, and a text not
        # taken as final by the framework's parsing: the model was told every time, so a repeat
        # persists after it was told (no early warning first).
        self._judged = ToolCalls(on_loop="kill", layers=["dedup", "cycle"], early_warnings=0)
        self._runs: weakref.WeakKeyDictionary[Run, Run] = weakref.WeakKeyDictionary()
        self._made: weakref.WeakKeyDictionary[Run, int] = weakref.WeakKeyDictionary()  # calls
        self._closers: weakref.WeakKeyDictionary[Run, Any] = weakref.WeakKeyDictionary()  # finalize
        self._lock = new_lock()

    def run_of(self, run: Run) -> Run:
        """The run the model calls of the invocation judged in ``run`` are recorded in."""
        found = self._runs.get(run)
        if found is None:
            with self._lock:
                found = self._runs.get(run)
                if found is None:
                    found = self._runs[run] = Run(f"{run.name}/{MODEL}", store=None)
                    # Closed with the invocation's run if no integration hook closes it first.
                    self._closers[run] = weakref.finalize(run, found.close)
        return found

    def record(self, run: Run, calls: Sequence[tuple[str, Any]], text: str | None, *,
               rejected: bool, final: bool, tokens: float | None = None) -> Detection | None:
        """Record one model call of the invocation judged in ``run``: its tool calls (name,
        arguments), else its ``text``; ``rejected`` when the framework refused what it asked for,
        ``final`` when the framework takes its text as the final answer. The detection that ends
        the agent, or None."""
        mine = self.run_of(run)
        self._made[mine] = self._made.get(mine, 0) + 1
        name = f"{MODEL}.rejected" if rejected else MODEL if calls or final else f"{MODEL}.text"
        return self._judge(mine, name, calls, text, rejected, tokens)

    def over_limit(self, run: Run) -> Detection | None:
        """Before a model call of the invocation judged in ``run``: the detection that ends the
        agent instead when ``max_model_calls`` calls were made already (the call is not made),
        else None."""
        limit = self.max_model_calls
        if limit is None:
            return None
        mine = self.run_of(run)
        made = self._made.get(mine, 0)
        return _over_limit(mine, limit, made) if made >= limit else None

    def rejection(self, run: Run, calls: Sequence[tuple[str, Any]]) -> Detection | None:
        """The framework rejected ``calls`` of a model call already recorded (it found their
        arguments invalid once the call was made): judged as a rejected call, not counted again
        toward ``max_model_calls``. The detection that ends the agent, or None."""
        return self._judge(self.run_of(run), f"{MODEL}.rejected", calls, None, True, None)

    def failed_output(self, run: Run, failure: Any) -> Detection | None:
        """The framework sent the model's final answer (a model call already recorded) back for
        a retry because it failed the output's validation; ``failure`` is how it failed (the
        errors, without the values the model wrote): judged as a rejected call, so the same
        failure again and again ends the agent, whatever the text. The detection, or None."""
        return self._judge(self.run_of(run), f"{MODEL}.rejected", (), None, True, None,
                           arguments={"output": failure})

    def _judge(self, mine: Run, name: str, calls: Sequence[tuple[str, Any]], text: str | None,
               rejected: bool, tokens: float | None,
               arguments: dict[str, Any] | None = None) -> Detection | None:
        judge = self._counted if name == MODEL else self._judged
        with within(mine):
            outcome = judge.begin(name, arguments if arguments is not None else asked(calls, text))
            if outcome.killed is not None:
                return _told(outcome.killed, calls, output=arguments is not None)
            if outcome.pending is not None:
                outcome.pending.enter()
                if tokens:
                    add_cost(tokens)
            outcome.done({"rejected": rejected})
        return None

    def close(self, run: Run) -> None:
        """The invocation judged in ``run`` is over: close its model calls' run."""
        with self._lock:
            self._runs.pop(run, None)
            closer = self._closers.pop(run, None)
        if closer is not None:
            closer()  # closes the model calls' run, once


def _told(detection: Detection, calls: Sequence[tuple[str, Any]], *, output: bool = False) -> Detection:
    """The detection, its message said of model calls (the model reads it as the reason)."""
    if detection.kind == "limit":
        return detection
    if output:
        what = ("wrote a final answer that fails the output's validation the same way again and "
                "again")
    elif detection.fn == f"{MODEL}.text":
        what = "answered with the same text again and again, and it does not end the task"
    else:
        names = ", ".join(sorted({f"`{name}`" for name, _ in calls})) or "a tool"
        what = (f"asked again and again for tool calls that cannot run ({names}: an unknown "
                "tool, or arguments the tool does not take)")
    return dataclasses.replace(detection, message=f"You {what}.")


def _over_limit(run: Run, limit: int, made: int) -> Detection:
    """The detection of a model call past ``max_model_calls`` (logged as a limit reached)."""
    detection = Detection(
        layer="limits", fn=MODEL, count=made + 1, threshold=limit, kind="limit",
        pattern="max_model_calls", run_id=run.id, call_index=made + 1, action="kill",
        message=f"This task has used all {limit} model calls it may make (max_model_calls = "
        f"{limit}). Give your final answer with what you have.",
    )
    emit("warning", "fuzeguard.limit_reached", layer=detection.layer, fn=MODEL, run_id=run.id,
         run_name=run.name, call_index=detection.call_index, kind="limit", action="kill",
         count=detection.count, threshold=limit, message=detection.message)
    return detection
