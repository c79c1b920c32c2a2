"""A replayed run: a ``Run`` whose time is the trace's (``ReplayClock``), with no store and no
standard subscribers, and what it published while it replayed a line."""

from __future__ import annotations

from collections.abc import Callable

from fuzeguard._private.configuration.config import Config
from fuzeguard._private.configuration.validation import validate_code_options
from fuzeguard._private.meaning.records import Decision, Detection
from fuzeguard._private.publish.events import Detected, RunKilled
from fuzeguard._private.runs.run import Run


class ReplayClock:
    """The replay clock: the run's time is whatever the last line's ``ts`` said."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ReplayRun(Run):
    """A run whose time is the trace's, without the standard subscribers: a replay never logs
    detections as live ones, calls hooks, touches spans or writes a trace."""

    _standard = False

    def __init__(self, name: str | None, config: Config, clock: Callable[[], float]) -> None:
        self._clock = clock
        super().__init__(name, config=_storeless(config))


# A replay never touches the shared run it replays (FUZE_STORE or the config may name one): its
# runs take their config with ``store`` unset, made once per config (each trace is a run).
_STORELESS: dict[int, tuple[Config, Config]] = {}
_STORELESS_REMEMBERED = 16


def _storeless(config: Config) -> Config:
    entry = _STORELESS.get(id(config))
    if entry is not None and entry[0] is config:
        return entry[1]
    made = config.with_values(validate_code_options({"store": None}, "replay", run_scope=True))
    if len(_STORELESS) >= _STORELESS_REMEMBERED:
        _STORELESS.clear()
    _STORELESS[id(config)] = (config, made)
    return made


class Published:
    """What a replayed run published while it replayed a line: its decisions with detections, and
    the detection that killed it."""

    __slots__ = ("found", "killed")

    def __init__(self) -> None:
        self.found: list[Decision] = []
        self.killed: Detection | None = None

    def detected(self, event: Detected) -> None:
        self.found.append(event.decision)

    def run_killed(self, event: RunKilled) -> None:
        self.killed = event.detection
