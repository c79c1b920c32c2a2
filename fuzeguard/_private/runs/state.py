"""Process-wide switches used by ``fuzeguard.testing``: a mode override and detection captures."""

from __future__ import annotations

from typing import Literal

from fuzeguard._private.meaning.records import Detection
from fuzeguard._private.runs.forksafe import new_lock

Mode = Literal["off", "observe"]

mode_override: Mode | None = None
captures: list[list[Detection]] = []
lock = new_lock()
