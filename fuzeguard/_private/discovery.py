"""Finding the config file: ``FUZE_CONFIG``, the nearest fuze.toml or pyproject.toml with a
``[tool.fuzeguard]`` table, and the ``fuze.<env>.toml`` overlay of an environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from fuzeguard._private.config_file import read_toml
from fuzeguard._private.exceptions import ConfigError
from fuzeguard._private.suggest import did_you_mean


def _walk_up(start: Path) -> Iterable[Path]:
    yield start
    yield from start.parents


def discover(
    cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path | None, str | None]:
    """Find the config file: ``FUZE_CONFIG``, the nearest fuze.toml, or the nearest pyproject.toml
    with a ``[tool.fuzeguard]`` table. Returns (path, prefix) with prefix ``"tool.fuzeguard"`` for a
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
    start = (cwd or Path.cwd()).resolve()
    for folder in _walk_up(start):
        candidate = folder / "fuze.toml"
        if candidate.is_file():
            return candidate, None
    for folder in _walk_up(start):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            data, _ = read_toml(candidate)
            if isinstance(data.get("tool"), Mapping) and "fuzeguard" in data["tool"]:
                return candidate, "tool.fuzeguard"
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
