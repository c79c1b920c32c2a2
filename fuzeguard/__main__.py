"""``python -m fuzeguard``: the demo when run without arguments, otherwise the ``fuze`` command."""

from __future__ import annotations

import sys

from fuzeguard._private.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["demo"]))
