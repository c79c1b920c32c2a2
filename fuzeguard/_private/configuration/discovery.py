"""Finding the config file: ``FUZE_CONFIG``, the nearest fuze.toml or pyproject.toml with a
``[tool.fuzeguard]`` table, and the ``fuze.<env>.toml`` overlay of an environment.

Discovery looks in the working directory and its parents up to the project's root: the first
folder that holds a repository (``.git``) or the user's home, whichever comes first. It never
looks in or above a folder other users can write (``/tmp``) or that another user owns, and it
passes over a file that another user owns or every user can write (``trust.py``): each ignored
file is named in a ``fuzeguard.config_ignored`` warning with the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from fuzeguard._private.configuration.config_file import read_toml
from fuzeguard._private.configuration.suggest import did_you_mean
from fuzeguard._private.configuration.trust import file_distrust, folder_distrust
from fuzeguard._private.publish.log import emit
from fuzeguard._private.runs.exceptions import ConfigError


def _project_folders(start: Path, home: Path | None) -> Iterator[Path]:
    """``start`` and its parents up to the project's root (see the module docstring), stopping
    before a folder whose files cannot be trusted."""
    for folder in (start, *start.parents):
        why = folder_distrust(folder)
        if why is not None:
            for name in ("fuze.toml", "pyproject.toml"):
                if (folder / name).is_file():
                    _ignored(folder / name, why)
            return
        yield folder
        if folder == home or (folder / ".git").exists():
            return


_warned: set[tuple[str, str]] = set()


def _ignored(path: Path, why: str) -> None:
    """Warn, once per file and reason, that a config file was passed over."""
    if (str(path), why) in _warned:
        return
    _warned.add((str(path), why))
    emit("warning", "fuzeguard.config_ignored", path=str(path), reason=why,
         message=f"the config file {path} was ignored because {why}: another user could have "
         "put it there or changed it. Move the settings to a file you own that only you can "
         "write, or name it with FUZE_CONFIG")


def _home() -> Path | None:
    try:
        return Path.home().resolve()
    except (RuntimeError, OSError):  # no HOME and no password entry
        return None


def discover(
    cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path | None, str | None]:
    """Find the config file: ``FUZE_CONFIG``, the nearest fuze.toml, or the nearest pyproject.toml
    with a ``[tool.fuzeguard]`` table, up to the project's root and in trusted places only (see
    the module docstring). Returns (path, prefix) with prefix ``"tool.fuzeguard"`` for a
    pyproject file, or (None, None) for built-in defaults."""
    env = os.environ if environ is None else environ
    explicit = env.get("FUZE_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(
                "FUZE_CONFIG points to a file that does not exist; fix the path or unset it",
                file=explicit,
            )
        return path, ("tool.fuzeguard" if path.name == "pyproject.toml" else None)
    folders = list(_project_folders((cwd or Path.cwd()).resolve(), _home()))
    for name, prefix in (("fuze.toml", None), ("pyproject.toml", "tool.fuzeguard")):
        for folder in folders:
            candidate = folder / name
            if not candidate.is_file():
                continue
            why = file_distrust(candidate)
            if why is not None:
                _ignored(candidate, why)
                continue
            if prefix is None:
                return candidate, None
            data, _ = read_toml(candidate)
            if isinstance(data.get("tool"), Mapping) and "fuzeguard" in data["tool"]:
                return candidate, prefix
            return None, None
    return None, None


_ENV_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def overlay_path(folder: Path, env: str, base: Path | None, where: str) -> Path:
    """The overlay file ``fuze.<env>.toml`` in ``folder``, the base file's folder.

    Raises ConfigError for a name that could reach outside that folder (a path separator, ``..``)
    and for a name with no file, listing the environments that do have one.
    """
    if not _ENV_NAME.fullmatch(env) or ".." in env:
        raise ConfigError(
            f"{where} is not an environment name: use letters, digits, '_', '-' and '.', such as "
            "production or staging-eu (the overlay is fuze.NAME.toml beside the base file; a "
            "path cannot be given here)"
        )
    overlay = folder / f"fuze.{env}.toml"
    if not overlay.is_file():
        found = sorted(
            p.name[len("fuze.") : -len(".toml")] for p in folder.glob("fuze.?*.toml") if p.is_file()
        )
        beside = f"beside {base}" if base is not None else f"in {folder} (no base config file)"
        known = f"; environments with a file: {', '.join(found)}" if found else ""
        raise ConfigError(
            f"{where} names no file: there is no {overlay.name} {beside}{known}"
            + did_you_mean(env, found).replace("`", "'")
            + "; create the file or fix the name"
        )
    return overlay
