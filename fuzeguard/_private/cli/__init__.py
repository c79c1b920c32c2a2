"""The ``fuze`` command: ``fuze demo``, ``fuze check``, ``fuze replay``, ``fuze report`` and
``fuze end``.

Exit status: 0 when the command ran (whatever it found), 1 when ``--fail-on-detect`` was given and
a replayed trace had detections or ``fuze end`` could not reach the store, 2 for usage and
configuration errors (and for ``fuze replay`` of input that is not a trace: a file none of whose
lines is a call, a directory without traces).
"""

from fuzeguard._private.cli.checking import check
from fuzeguard._private.cli.common import EXIT_DETECTED, EXIT_OK, EXIT_USAGE
from fuzeguard._private.cli.comparing import compare
from fuzeguard._private.cli.ending import end
from fuzeguard._private.cli.entry import main
from fuzeguard._private.cli.replaying import replay
from fuzeguard._private.cli.reporting import report

__all__ = ["EXIT_DETECTED", "EXIT_OK", "EXIT_USAGE", "check", "compare", "end", "main", "replay", "report"]
