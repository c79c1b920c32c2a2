"""Types that modules name in their hints without importing the module that implements them.

As structlog's ``typing`` module: a module that only needs the shape of a callback imports it from
here, so that a type hint never ties two modules into an import circle.
"""

from __future__ import annotations

from collections.abc import Callable

from fuzeguard._private.meaning.records import Detection

# An ``on_detect`` hook: called with each detection of a run (``guard(on_detect=...)``,
# ``fuzeguard.run(on_detect=...)``); what it returns is ignored.
DetectHook = Callable[[Detection], object]
