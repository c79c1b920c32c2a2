"""Whether a config file may be obeyed: who owns it and who else can change it.

A file is trusted when it and the folder it sits in belong to the user running the process or to
root, and neither can be written by every user. A world-writable folder (``/tmp``, ``/dev/shm``, a
shared work directory) is not trusted even with its sticky bit: another local user could have
left the file there. Group write is allowed, as git and most umasks allow it. The same checks as
OpenSSH makes of its config and git of a repository's owner (``safe.directory``).

On systems without POSIX owners (Windows) every file is trusted.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def _distrust(path: Path, what: str) -> str | None:
    """Why ``path`` (a file or a folder, named ``what`` in the reason) cannot be trusted."""
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{what} cannot be examined ({exc.strerror or exc})"
    if st.st_uid not in (os.getuid(), 0):
        return f"{what} belongs to another user (uid {st.st_uid})"
    if st.st_mode & stat.S_IWOTH:
        return f"{what} can be written by every user"
    return None


def folder_distrust(folder: Path) -> str | None:
    """Why files in ``folder`` cannot be trusted, or None when they can."""
    return _distrust(folder, f"its folder {folder}")


def file_distrust(path: Path) -> str | None:
    """Why the file at ``path`` cannot be trusted (the file or its folder), or None when it can."""
    return _distrust(path, "it") or folder_distrust(path.resolve().parent)
