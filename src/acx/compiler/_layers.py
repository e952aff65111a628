"""Config discovery (contract R4): which run config files apply, in which order.

Order, lowest precedence first: the user config (``$XDG_CONFIG_HOME/acx/config.yaml``, else
``~/.config/acx/config.yaml``), the nearest project ``config.yaml`` (searching upward from the
working directory, stopping at the project root: the first directory holding ``.git`` or
``pyproject.toml``), then each ``--config`` path in argument order. Missing implicit files are
skipped; a missing explicit file is an error. A file reached twice (same resolved path) is loaded
once, at its first position.

The process environment and working directory are inputs (``environ``, ``cwd``), never read here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from acx.errors import AcxConfigError
from acx.inputs import file_kind

__all__ = ["ConfigLayer", "discover_config_layers", "project_config_path", "user_config_path"]

PROJECT_CONFIG_NAME = "config.yaml"
_PROJECT_ROOT_MARKERS = (".git", "pyproject.toml")


@dataclass(frozen=True)
class ConfigLayer:
    #: ``user config``, ``project config`` or ``--config``
    layer: str
    #: path as shown to the user (explicit paths as given)
    path: str
    resolved: str


def user_config_path(environ: Mapping[str, str]) -> str | None:
    base = environ.get("XDG_CONFIG_HOME")
    if not base:
        home = environ.get("HOME")
        if not home:
            return None
        base = os.path.join(home, ".config")
    return os.path.join(base, "acx", "config.yaml")


def project_config_path(cwd: str) -> str | None:
    """The nearest ``config.yaml`` from ``cwd`` upward, not above the project root."""
    current = os.path.abspath(cwd)
    while True:
        candidate = os.path.join(current, PROJECT_CONFIG_NAME)
        if os.path.isfile(candidate):
            return candidate
        if any(os.path.exists(os.path.join(current, m)) for m in _PROJECT_ROOT_MARKERS):
            return None
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def discover_config_layers(
    explicit: Sequence[str], *, cwd: str, environ: Mapping[str, str], exclude: Sequence[str] = ()
) -> list[ConfigLayer]:
    """The config files to load, lowest precedence first. ``exclude``: paths the implicit layers
    skip (the spec file itself, when it happens to be the project ``config.yaml``); an explicit
    ``--config`` naming one is still loaded (and rejected there if it is not a run config)."""
    seen = {os.path.realpath(p) for p in exclude}
    out: list[ConfigLayer] = []

    excluded = set(seen)

    def add(layer: str, path: str) -> None:
        resolved = os.path.realpath(path if os.path.isabs(path) else os.path.join(cwd, path))
        if resolved in seen and (layer != "--config" or resolved not in excluded):
            return
        seen.add(resolved)
        out.append(ConfigLayer(layer, path, resolved))

    user = user_config_path(environ)
    if user and os.path.isfile(user):
        add("user config", user)
    project = project_config_path(cwd)
    if project:
        add("project config", project)
    for path in explicit:
        full = path if os.path.isabs(path) else os.path.join(cwd, path)
        if os.path.exists(full) and not os.path.isfile(full):
            # A directory, FIFO, socket or device is there: say what it is, not "not found".
            kind = file_kind(os.stat(full).st_mode)
            raise AcxConfigError(
                f"config file {path} is {kind}, not a regular file",
                code="E0218",
                path="--config",
                help="name a regular file; acx never reads directories, FIFOs, sockets or devices as input",
            )
        if not os.path.isfile(full):
            raise AcxConfigError(
                f"config file not found: {path}",
                code="E0209",
                path="--config",
                help="check the path given to --config (relative paths start at the working directory)",
            )
        add("--config", path)
    return out
