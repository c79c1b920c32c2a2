"""Process-wide switches used by ``fuzeguard.testing``: a mode override and detection captures."""

from __future__ import annotations

from typing import Literal

from fuzeguard._private.forksafe import new_lock
from fuzeguard._private.records import Detection

Mode = Literal["off", "observe"]

mode_override: Mode | None = None
captures: list[list[Detection]] = []
lock = new_lock()
