"""smolagents: guarded tools and ``stop_on_kill``, a step callback that ends ``agent.run()``.

A ``ToolCallingAgent`` catches an exception raised in a tool, shows it to the model and goes on
until ``max_steps``; with a plain ``kill`` the run then ends as if nothing happened (``run()``
returns the model's answer to the max-steps prompt). ``stop_on_kill`` is called by the agent after
each step: once the current ``fuzeguard.run()`` is killed it raises ``LoopDetected`` (detection
and run stats), which ends ``agent.run()`` there, before the model is asked again::

    agent = ToolCallingAgent(tools=[guarded_tool(search, on_loop="kill")], model=model,
                             step_callbacks=[stop_on_kill])

A skip needs nothing more: the tool's output is the detection's message, which the model reads.

Install with ``pip install 'fuzeguard[smolagents]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from smolagents import Tool, tool

from fuzeguard._private.exceptions import LoopDetected
from fuzeguard._private.guard import guard
from fuzeguard._private.run import current_run

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.options import GuardOptions


def stop_on_kill(step: Any, agent: Any = None) -> None:
    """Step callback: raise ``LoopDetected`` once the current run is killed."""
    run = current_run()
    detection = run.killed
    if detection is not None:
        raise LoopDetected(detection, run.stats())


def guarded_tool(fn: Callable[..., Any], **options: Unpack[GuardOptions]) -> Tool:
    """``smolagents.tool(guard(fn, **options))``: a tool whose calls are guarded (the function
    needs smolagents' docstring with an ``Args:`` section, as for ``@tool``)."""
    return tool(guard(fn, **options))
