"""Transfer types every driver shares: the errors, statistics and path rules of file transfers.

A driver that moves files out of a sandbox (``download_tree``, ``read_bytes``) reports a refused
archive as :class:`UnsafeArchiveError` and a breached byte or entry limit as
:class:`ArchiveLimitError`; the artifact collector (contract A4) turns both into collection errors,
whatever the driver. :func:`is_excluded` and :func:`symlink_escapes` are the rules the collector
and the drivers apply alike, so a driver whose transfer is a plain copy is held to the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from acx.errors import DriverError

__all__ = [
    "ArchiveLimitError",
    "ExtractStats",
    "UnsafeArchiveError",
    "is_excluded",
    "symlink_escapes",
]


class UnsafeArchiveError(DriverError):
    """An archive member would escape the destination or is a special file."""

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message, code="unsafe_archive", **fields)


class ArchiveLimitError(DriverError):
    """An archive exceeds the byte or entry limit."""

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message, code="artifact_limit_exceeded", **fields)


@dataclass
class ExtractStats:
    """What a limited download wrote (``Session.download_tree``)."""

    files: int = 0
    dirs: int = 0
    links: int = 0
    bytes: int = 0
    excluded: list[str] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return self.files + self.dirs + self.links


def is_excluded(relpath: str, patterns: Sequence[str]) -> bool:
    """GNU tar ``--exclude`` semantics (unanchored; wildcards match ``/``; a dir excludes its tree)."""
    if not patterns:
        return False
    parts = [p for p in relpath.split("/") if p not in ("", ".")]
    for i in range(len(parts)):
        for j in range(i + 1, len(parts) + 1):
            sub = "/".join(parts[i:j])
            if any(fnmatchcase(sub, pat.rstrip("/")) for pat in patterns):
                return True
    return False


def symlink_escapes(depth: int, target: str) -> str | None:
    """Why a symlink at ``depth`` directories below the root (its real location) with ``target``
    may lead outside the root, or None. Text is not enough: ``x/..`` is not the link's own
    directory when ``x`` is itself a symlink. So a target may only go up first (``../../``, at most
    ``depth`` times) and then down by names; every link it passes through obeys the same rule, so
    none leads out."""
    if target.startswith("/"):
        return f"points to the absolute path {target!r}"
    ups, named = 0, False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            named = True
        elif named:
            return f"goes up ('..') after a name in {target!r} (a symlink there could lead anywhere)"
        else:
            ups += 1
    if ups > depth:
        return f"{target!r} leads above the artifact directory"
    return None
