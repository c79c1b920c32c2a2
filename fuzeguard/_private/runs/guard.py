"""``guard()``: wrap a tool function so every call is recorded and checked before it runs.

One core serves four thin shells: plain functions, coroutine functions, generator functions and
async generator functions. ``Guard.decide`` decides about a call before it runs, ``finish`` ends
it (records it, or marks it interrupted); the generator shells and the integrations hold a call
that goes ahead in a ``Pending`` (``Guard.begin``).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, final, overload

from fuzeguard._private.configuration.config import Config, checked_discovered_config
from fuzeguard._private.configuration.names import register, warn_unmatched
from fuzeguard._private.configuration.validation import validate_code_options
from fuzeguard._private.judging.completion import complete
from fuzeguard._private.judging.plan import Plan, build_plan, check_layer_objects
from fuzeguard._private.judging.watch import StreamWatch
from fuzeguard._private.meaning.records import Call, Decision, Detection
from fuzeguard._private.meaning.secrets import exception_text
from fuzeguard._private.protocols import DetectHook
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs import state
from fuzeguard._private.runs.exceptions import ConfigError, FuzeguardError, StoreUnavailable
from fuzeguard._private.runs.forksafe import new_lock
from fuzeguard._private.runs.implicit import current_run
from fuzeguard._private.runs.loop_detected import LoopDetected
from fuzeguard._private.runs.registered import registered_by
from fuzeguard._private.runs.run import Run, _as_hooks, _current

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from fuzeguard._private.configuration.options import GuardOptions

F = TypeVar("F", bound=Callable[..., Any])

_cost_box: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "fuzeguard_cost", default=None
)
_MAX_PLANS = 16
# Costs are floats: past the largest float, an amount is infinite once added.
_MAX_COST = sys.float_info.max
# What ``Guard.decide`` gives for a call that goes ahead.
Started = tuple[Run, Plan, Call, Decision]


def add_cost(amount: float) -> None:
    """Add to the cost of the guarded call in progress (or, outside one, of the current run).

    Call it inside a tool, for example with the token usage of an LLM request it makes. An
    infinite amount is not counted: it is logged (``fuzeguard.cost_rejected``) and the call goes on.
    """
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount != amount:
        raise TypeError(f"add_cost() takes a number, got {amount!r}")
    if not -_MAX_COST <= amount <= _MAX_COST:
        emit("error", "fuzeguard.cost_rejected", amount=_shown(amount),
             message="add_cost() was given an infinite amount; it is not counted (a cost that "
             "cannot be added up would break the run's budget and its trace)")
        return
    if amount < 0:
        raise ValueError(f"add_cost() takes a finite cost of 0 or more, got {amount!r}: a cost "
                         "already spent cannot be taken back")
    box = _cost_box.get()
    if box is not None:
        box[0] += amount
        return
    current_run()._add_cost(amount)


class Guard:
    """The state a guarded function carries: its options and its resolved plans.

    Available as ``fn.guard`` on the wrapper, like ``fn.retry`` in tenacity.
    """

    __slots__ = ("_lock", "_plans", "fn", "hooks", "layers", "name", "options")

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None,
        options: dict[str, Any],
        layers: tuple[Any, ...] | None,
        hooks: tuple[DetectHook, ...],
    ) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.options = options
        self.layers = layers
        self.hooks = hooks
        self._plans: dict[int, tuple[Config, Plan]] = {}
        self._lock = new_lock()
        register(self.name)

    def plan(self, config: Config) -> Plan:
        """This guard's settings and layers under ``config`` (resolved once, then cached)."""
        entry = self._plans.get(id(config))
        if entry is not None and entry[0] is config:
            return entry[1]
        warn_unmatched(config)
        plan = build_plan(self.fn, self.name, config, self.options, self.layers, self.hooks)
        with self._lock:
            if len(self._plans) >= _MAX_PLANS:
                self._plans.pop(next(iter(self._plans)))
            self._plans[id(config)] = (config, plan)
        return plan

    def begin(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Pending | Skipped | None:
        """Decide about one call. None: run it unguarded (guarding off, or fail-open)."""
        started = self.decide(args, kwargs)
        if type(started) is tuple:
            return Pending(*started)
        return started  # type: ignore[return-value]

    async def abegin(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Pending | Skipped | None:
        """``begin`` for an async generator: the decision awaited when the run's decision waits
        for something (a store's round trips, a person's answer), so that none blocks the loop."""
        if state.mode_override != "off" and current_run()._awaits:
            started = await self.adecide(args, kwargs)
        else:
            started = self.decide(args, kwargs)
        if type(started) is tuple:
            return Pending(*started)
        return started  # type: ignore[return-value]

    def decide(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Started | Skipped | None:
        """``begin`` without the ``Pending``: the run, plan, call and decision of a call that goes
        ahead (the plain and coroutine shells keep them in locals), a ``Skipped``, or None."""
        if state.mode_override == "off":
            return None
        plan: Plan | None = None
        try:
            stack = _current.get()  # current_run(), inlined
            run = stack[-1] if stack else current_run()
            config = run.config
            entry = self._plans.get(id(config))  # the cache hit of self.plan(), inlined
            plan = entry[1] if entry is not None and entry[0] is config else self.plan(config)
            if plan.off:
                return None
            fast = plan.bind_and_print  # ``plan.bind``, its one-pass case inlined
            bound = fast(args, kwargs) if fast is not None else None
            arguments, args_fp = bound if bound is not None else plan.bind(args, kwargs)
            call, decision = run._decide(plan, args_fp, arguments)
        except (ConfigError, StoreUnavailable):
            raise
        except Exception as exc:
            self._failed(plan, exc)
            return None
        action = decision.action
        if action == "call" or action == "warn":
            return run, plan, call, decision
        return self._stopped(run, plan, decision)

    async def adecide(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Started | Skipped | None:
        """``decide`` for a coroutine tool whose run keeps its state in a store: the store's round
        trips are awaited, so that none blocks the event loop."""
        if state.mode_override == "off":
            return None
        plan: Plan | None = None
        try:
            run = current_run()
            plan = self.plan(run.config)
            if plan.off:
                return None
            arguments, args_fp = plan.bind(args, kwargs)
            call, decision = await run._adecide(plan, args_fp, arguments)
        except (ConfigError, StoreUnavailable):
            raise
        except Exception as exc:
            self._failed(plan, exc)
            return None
        if decision.action == "call" or decision.action == "warn":
            return run, plan, call, decision
        return self._stopped(run, plan, decision)

    def _failed(self, plan: Plan | None, exc: Exception) -> None:
        """fuzeguard itself failed while deciding a call: logged; the call runs unguarded, or
        is refused under ``fail_closed``."""
        emit("error", "fuzeguard.internal_error", fn=self.name, phase="check",
             error=exception_text(exc))
        if plan is not None and plan.settings.fail_closed:
            raise FuzeguardError(
                f"fuzeguard failed while checking a call to {self.name} and fail_closed is on, "
                "so the call was not made"
            ) from exc

    def _stopped(self, run: Run, plan: Plan, decision: Decision) -> Skipped:
        """A call the decision skips (its replacement) or kills (raises ``LoopDetected``)."""
        assert decision.detection is not None
        if decision.action == "skip":
            return Skipped(_replacement(plan, decision.detection, run))
        raise LoopDetected(decision.detection, run.stats(), run)


def _replacement(plan: Plan, detection: Detection, run: Run) -> Any:
    """What a skipped call returns. A ``skip_value`` function that raises is logged and the
    detection's message is returned instead: the agent gets an answer, never the hook's error."""
    value = plan.settings.skip_value
    if value is None:
        return detection.message
    if callable(value):
        try:
            return value(detection)
        except Exception as exc:
            emit("error", "fuzeguard.skip_value_failed", fn=detection.fn, run_id=run.id,
                 error=exception_text(exc),
                 message="the skip_value function raised; the call was answered with the "
                 "detection's message instead")
            return detection.message
    return value


@final
class Skipped:
    """A call the guard answered itself; ``value`` goes back to the caller."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Pending:
    """A call that goes ahead: collects its cost and records its outcome when it ends (for the
    generator shells and the integrations; the plain and coroutine shells keep the same state in
    locals and end through the same ``finish``)."""

    __slots__ = ("box", "call", "chunks", "decision", "plan", "run", "t0", "token")

    def __init__(self, run: Run, plan: Plan, call: Call, decision: Decision) -> None:
        self.run = run
        self.plan = plan
        self.call = call
        self.decision = decision
        self.t0 = time.monotonic()
        self.box: list[float] = [0.0]
        self.token: contextvars.Token[list[float] | None] | None = None
        # A generator's chunks so far (set by ``Stream``): the trace records them as its result.
        self.chunks: list[Any] | None = None

    def enter(self) -> None:
        """Collect ``add_cost()`` calls made inside the call (not used for generators)."""
        self.token = _cost_box.set(self.box)

    def _exit(self) -> None:
        if self.token is not None:
            _cost_box.reset(self.token)
            self.token = None

    def done(self, result: Any) -> None:
        self._exit()
        finish(self.run, self.plan, self.call, self.decision, self.t0, self.box[0], result, None,
               self.chunks)

    def fail(self, error: BaseException) -> None:
        self._exit()
        finish(self.run, self.plan, self.call, self.decision, self.t0, self.box[0], None, error,
               self.chunks)


def finish(
    run: Run,
    plan: Plan,
    call: Call,
    decision: Decision,
    t0: float,
    cost: float,
    result: Any,
    error: BaseException | None,
    chunks: list[Any] | None = None,
) -> None:
    """End a call that went ahead: record it (``completion.complete``, the path replay takes
    too), or, when it was interrupted (cancelled, closed early, killed from inside), leave no
    record but a trace line, so that replay counts the call as live did.

    ``cost`` is what ``add_cost()`` collected; the guard's ``cost=`` is added to it. A ``cost=``
    function that raises loses the cost, and anything else that fails loses the record, never
    the call. ``chunks`` are a generator's chunks (its result), None for a plain call."""
    if error is not None and (
        not isinstance(error, Exception) or isinstance(error, FuzeguardError)
    ):
        run._interrupted(plan, call, decision, t0 - run._start, chunks)
        return
    per_call = plan.settings.cost
    if per_call is not None:
        if callable(per_call):
            try:
                amount = per_call(result)
            except Exception as exc:
                emit("error", "fuzeguard.cost_failed", fn=call.fn, run_id=run.id,
                     error=exception_text(exc),
                     message="the cost= function raised; the call is recorded without its cost")
            else:
                if (
                    isinstance(amount, (int, float)) and not isinstance(amount, bool)
                    and -_MAX_COST <= amount <= _MAX_COST
                ):
                    cost += amount
                else:
                    emit("error", "fuzeguard.cost_failed", fn=call.fn, run_id=run.id,
                         error=f"returned {_shown(amount)}",
                         message="the cost= function returned something other than a finite "
                         "number; the call is recorded without its cost")
        else:
            cost += per_call
    if run._unbilled:
        cost += run._take_unbilled()  # model cost metered since the last call (metering.py)
    try:
        complete(run, plan, call, decision, t0 - run._start, time.monotonic() - t0, cost,
                 result, error, chunks is not None)
    except Exception as exc:
        _unrecorded(run, call, exc)


def _unrecorded(run: Run, call: Call, error: Exception) -> None:
    """Recording a call failed: logged, and the call leaves no record (it went ahead)."""
    emit("error", "fuzeguard.internal_error", fn=call.fn, phase="record",
         error=exception_text(error))
    run._discard(call)


def _shown(value: Any) -> str:
    """A cost value as logged: its type for anything but a number (a result may hold secrets)."""
    if isinstance(value, float) or (type(value) is int and value.bit_length() < 64):
        return repr(value)
    return f"a {type(value).__name__}"


def _kind(fn: Callable[..., Any]) -> str:
    """Which shell a callable needs; callable objects are judged by their ``__call__``."""
    for target in (fn, getattr(type(fn), "__call__", None)):  # noqa: B004 - its kind, not callability
        if target is None:
            continue
        if inspect.isasyncgenfunction(target):
            return "asyncgen"
        if inspect.isgeneratorfunction(target):
            return "gen"
        if inspect.iscoroutinefunction(target):
            return "async"
        if inspect.isfunction(target) or inspect.ismethod(target):
            break
    return "sync"


def _wrap(g: Guard) -> Callable[..., Any]:
    fn = g.fn
    begin = g.begin
    decide = g.decide
    cost_box = _cost_box
    wrapper: Callable[..., Any]
    kind = _kind(fn)
    if kind == "asyncgen":

        async def agen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            p = await g.abegin(args, kwargs)
            if p is None:
                async for chunk in fn(*args, **kwargs):
                    yield chunk
                return
            if isinstance(p, Skipped):
                yield p.value
                return
            stream = Stream(p)
            try:
                async for chunk in fn(*args, **kwargs):
                    if stream.chunk(chunk):
                        break
                    yield chunk
            except BaseException as exc:
                p.fail(exc)
                raise
            stream.done()

        wrapper = agen_wrapper
    elif kind == "gen":

        def gen_wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            p = begin(args, kwargs)
            if p is None:
                yield from fn(*args, **kwargs)
                return None
            if isinstance(p, Skipped):
                yield p.value
                return None
            stream = Stream(p)
            try:
                for chunk in fn(*args, **kwargs):
                    if stream.chunk(chunk):
                        break
                    yield chunk
            except BaseException as exc:
                p.fail(exc)
                raise
            stream.done()
            return None

        wrapper = gen_wrapper
    elif kind == "async":

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if state.mode_override != "off" and current_run()._awaits:
                started = await g.adecide(args, kwargs)  # round trips or a person awaited
            else:
                started = decide(args, kwargs)
            if started is None:
                return await fn(*args, **kwargs)
            if type(started) is Skipped:
                return started.value
            run, plan, call, decision = started
            box = [0.0]
            token = cost_box.set(box)
            t0 = time.monotonic()
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                cost_box.reset(token)
                finish(run, plan, call, decision, t0, box[0], None, exc)
                if run._store is not None:
                    await run._store.aflush(run)
                raise
            cost_box.reset(token)
            finish(run, plan, call, decision, t0, box[0], result, None)
            if run._store is not None:
                await run._store.aflush(run)
            return result

        wrapper = async_wrapper
    else:

        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            started = decide(args, kwargs)
            if started is None:
                return fn(*args, **kwargs)
            if type(started) is Skipped:
                return started.value
            run, plan, call, decision = started
            box = [0.0]
            token = cost_box.set(box)
            t0 = time.monotonic()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                cost_box.reset(token)
                finish(run, plan, call, decision, t0, box[0], None, exc)
                raise
            cost_box.reset(token)
            if plan.settings.cost is not None or run._unbilled:
                finish(run, plan, call, decision, t0, box[0], result, None)
                return result
            try:  # ``finish`` with nothing to add to the cost: straight to the record
                complete(run, plan, call, decision, t0 - run._start, time.monotonic() - t0,
                         box[0], result)
            except Exception as exc:
                _unrecorded(run, call, exc)
            return result

        wrapper = sync_wrapper
    functools.update_wrapper(wrapper, fn)
    for attr in ("__defaults__", "__kwdefaults__"):
        value = getattr(fn, attr, None)
        if value is not None:
            try:
                setattr(wrapper, attr, value)
            except (AttributeError, TypeError):
                pass
    setattr(wrapper, "guard", g)  # noqa: B010 - a function attribute, like tenacity's fn.retry
    return wrapper


class Stream:
    """Sees the chunks of a guarded generator as they pass; records the stream when it ends.

    The result of a stream is the list of its chunks. The layers that watch streams see each
    chunk (``watch.StreamWatch``, shared with replay); on a detection, ``kill`` raises
    ``LoopDetected`` from the iterator, ``skip`` ends the stream there, ``warn`` lets it go on.
    """

    __slots__ = ("chunks", "pending", "watch")

    def __init__(self, pending: Pending) -> None:
        self.pending = pending
        self.chunks: list[Any] = []
        pending.chunks = self.chunks
        plan = pending.plan
        self.watch = (
            StreamWatch(pending.run, plan, pending.call, pending.decision)
            if plan.watchers else None
        )

    def chunk(self, value: Any) -> bool:
        """Take one chunk; True means the stream is to end here (a ``skip``)."""
        self.chunks.append(value)
        watch = self.watch
        if watch is None:
            return False
        decision = watch.feed(value)
        if decision is None:
            return False
        p = self.pending
        p.decision = watch.decision
        if decision.action == "kill":
            assert decision.detection is not None
            raise LoopDetected(decision.detection, p.run.stats(), p.run)
        return decision.action == "skip"

    def done(self) -> None:
        self.pending.done(self.chunks)


_NO_FUNCTION: Any = object()
# Top-level packages whose tool objects wrap a function: @guard belongs under their decorator.
_FRAMEWORKS = {
    "langchain_core": "LangChain's @tool (or use fuzeguard.integrations.langchain)",
    "langchain": "LangChain's @tool (or use fuzeguard.integrations.langchain)",
    "agents": "the OpenAI Agents SDK's @function_tool (or use fuzeguard.integrations.openai_agents)",
    "pydantic_ai": "Pydantic AI's tool decorator (or use fuzeguard.integrations.pydantic_ai)",
    "smolagents": "smolagents' @tool (or use fuzeguard.integrations.smolagents)",
    "crewai": "CrewAI's @tool (or use fuzeguard.integrations.crewai)",
    "mcp": "the MCP server's @tool (or use fuzeguard.integrations.mcp)",
    "fastmcp": "FastMCP's @tool (or use fuzeguard.integrations.mcp)",
}


def _check_guardable(f: Any, where: str) -> None:
    """Refuse, with the fix, what guard() cannot wrap usefully."""
    if isinstance(getattr(f, "guard", None), Guard):
        raise TypeError(f"{where}: {getattr(f, '__name__', f)!r} is already guarded: each call "
                        "would count twice. Guard it once, with all its options")
    package = type(f).__module__.split(".")[0]
    if package in _FRAMEWORKS and "Tool" in type(f).__name__ and not inspect.isroutine(f):
        raise TypeError(f"{where}: got a {type(f).__module__}.{type(f).__name__}, a framework's "
                        f"tool object, not a function: put @guard under {_FRAMEWORKS[package]}, "
                        "next to the function")
    if f is None or not callable(f):
        raise TypeError(f"guard() takes a function, got {f!r}: use @guard or guard(fn, ...)")
    holder = registered_by(f)
    if holder is not None:
        raise TypeError(f"{where}: {f.__name__!r} was registered by a {holder} decorator "
                        "before @guard wrapped it, so the framework calls the unguarded function: "
                        f"put @guard under {_FRAMEWORKS[holder]}, next to the function")


@overload
def guard(fn: F, /, **options: Unpack[GuardOptions]) -> F: ...
@overload
def guard(fn: None = None, /, **options: Unpack[GuardOptions]) -> Callable[[F], F]: ...


def guard(fn: Any = _NO_FUNCTION, /, **options: Unpack[GuardOptions]) -> Any:
    """Guard a tool function against loops: ``@guard``, ``@guard(...)`` or ``guard(fn, ...)``.

    Options are keyword-only, and every fuze.toml key is one (code wins over the file)::

        @guard(on_loop="warn", max_iterations=50)
        def web_search(query: str) -> str: ...

        read = guard(read_file, onLoop="skip")

    Besides the settings keys: ``name=`` (the name used in [functions.NAME], logs and traces;
    default ``fn.__name__``), ``layers=`` (layer names and/or layer objects, replacing the default
    stack) and ``on_detect=`` (a callable or callables that receive each ``Detection``).
    ``onLoop=`` is an alias of ``on_loop=``.
    """
    name = options.pop("name", None)
    hooks = _as_hooks(options.pop("on_detect", None))
    if "onLoop" in options:
        if "on_loop" in options:
            raise TypeError("guard() got both on_loop= and its alias onLoop=; pass one of them")
        options["on_loop"] = options.pop("onLoop")
    layer_objects = options.pop("layers", None)
    where = f"guard({name or getattr(fn, '__name__', '...')})"
    checked = validate_code_options(options, where, run_scope=False)
    if layer_objects is not None:
        if isinstance(layer_objects, str) or not isinstance(layer_objects, Iterable):
            raise TypeError(f"{where}: layers= takes a list of layer names or layer objects")
        layer_objects = tuple(layer_objects)
        validate_code_options({"layers": layer_objects}, where, run_scope=False)
        check_layer_objects(where, layer_objects)

    def decorate(f: F) -> F:
        if isinstance(f, (staticmethod, classmethod)):
            return type(f)(decorate(f.__func__))  # type: ignore[return-value,arg-type,unused-ignore]
        _check_guardable(f, where)
        if state.mode_override != "off":
            # A broken fuze.toml fails here, at decoration, logged at error level: not inside
            # the first tool call, where a framework may catch it and show the model "An error
            # occurred while running the tool".
            checked_discovered_config()
        g = Guard(f, name=name, options=checked, layers=layer_objects, hooks=hooks)
        return _wrap(g)  # type: ignore[return-value]

    if fn is _NO_FUNCTION:
        return decorate
    return decorate(fn)
