"""Tar helpers of the docker driver (no docker, no trio: plain stdlib, unit-testable).

``docker cp`` semantics ride on tar archives in both directions. Archives coming *out* of a
container are untrusted (the agent controls their content), so extraction refuses absolute or
``..`` members, links that escape the destination, and device/fifo members, and enforces entry and
byte limits while it reads — a refused archive is a :class:`UnsafeArchiveError`, a breached limit
an :class:`ArchiveLimitError` (both in the neutral :mod:`acx.drivers.transfer`); both are collection
errors for the artifact collector (A4).
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from acx.drivers.transfer import ArchiveLimitError, ExtractStats, UnsafeArchiveError, is_excluded, symlink_escapes
from acx.errors import DriverError

__all__ = [
    "directory_tar",
    "read_single_file",
    "safe_extract",
    "single_file_tar",
]


def single_file_tar(relpath: str, data: bytes, mode: int = 0o644) -> bytes:
    """A tar holding one regular file at ``relpath`` (relative to the extraction root)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(relpath)
        info.size = len(data)
        info.mode = mode & 0o7777
        info.mtime = int(time.time())  # a file written now, not in 1970 (TarInfo's default)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def directory_tar(local_dir: Path, arc_root: str) -> IO[bytes]:
    """A spooled tar of ``local_dir``'s contents (hidden files included) rooted at ``arc_root``.

    The root entry itself is included so an empty directory is still created remotely.
    """
    out = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)  # noqa: SIM115 - returned open
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(local_dir), arcname=arc_root, recursive=True, filter=_as_root)
    out.seek(0)
    return out


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Uploaded files belong to root in the sandbox, whoever runs acx on the host."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _member_relpath(name: str, strip_top: bool) -> str | None:
    """Normalised relative path of a member; None for the stripped top entry itself."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"archive member {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"archive member {name!r} contains '..'")
    if strip_top:
        parts = parts[1:]
    return "/".join(parts) if parts else None


def _check_link(member: tarfile.TarInfo, rel: str, strip_top: bool, dest: Path) -> str:
    """The link target relative to the root; refuses targets that may lead outside it."""
    target = member.linkname
    if not target or "\0" in target:
        raise UnsafeArchiveError(f"link {rel!r} has an empty or invalid target")
    if member.issym():
        # Where the link really is: its name may pass through a symlink extracted earlier.
        real_root = os.path.realpath(dest)
        real_parent = os.path.realpath(dest / posixpath.dirname(rel))
        depth = 0 if real_parent == real_root else len(os.path.relpath(real_parent, real_root).split(os.sep))
        problem = symlink_escapes(depth, target)
        if problem is not None:
            raise UnsafeArchiveError(f"symlink {rel!r} {problem}")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    else:  # hard link: the target is another member's name
        stripped = _member_relpath(target, strip_top)
        resolved = stripped if stripped is not None else "."
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise UnsafeArchiveError(f"link {rel!r} → {target!r} escapes the artifact directory")
    return resolved


def safe_extract(
    fileobj: IO[bytes],
    dest: Path,
    *,
    strip_top: bool,
    exclude: Sequence[str] = (),
    max_bytes: int | None = None,
    max_entries: int | None = None,
    single_name: str | None = None,
    cancel: threading.Event | None = None,
) -> ExtractStats:
    """Extract an untrusted tar stream into ``dest`` (created).

    ``strip_top`` drops the first path component (``docker cp`` names members after the source's
    basename). ``single_name`` renames a lone regular-file member (a file artifact) to that name.
    ``cancel`` stops the extraction between members once set.
    """
    dest.mkdir(parents=True, exist_ok=True)
    stats = ExtractStats()
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        for member in tar:
            if cancel is not None and cancel.is_set():
                # The caller walked away (deadline/cancel): stop writing at once.
                raise DriverError("extraction abandoned", code="transfer_cancelled")
            rel = _member_relpath(member.name, strip_top)
            if rel is None:
                if member.isfile() and single_name is not None:
                    if is_excluded(member.name, exclude):
                        stats.excluded.append(member.name)
                        continue
                    rel = single_name
                elif member.isdir():
                    continue
                else:
                    raise UnsafeArchiveError(f"unexpected archive member {member.name!r}")
            if is_excluded(rel, exclude):
                stats.excluded.append(rel)
                continue
            _extract_member(tar, member, rel, dest, stats, strip_top)
            _check_limits(stats, max_bytes, max_entries)
    return stats


def _check_limits(stats: ExtractStats, max_bytes: int | None, max_entries: int | None) -> None:
    if max_bytes is not None and stats.bytes > max_bytes:
        raise ArchiveLimitError(f"artifacts exceed the size limit of {max_bytes} bytes")
    if max_entries is not None and stats.entries > max_entries:
        raise ArchiveLimitError(f"artifacts exceed the limit of {max_entries} entries")


def _extract_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, rel: str, dest: Path, stats: ExtractStats, strip_top: bool
) -> None:
    target = dest / rel
    _ensure_inside(dest, target.parent)
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, (member.mode & 0o777) | 0o700)
        stats.dirs += 1
    elif member.isfile():
        target.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(member)
        assert src is not None
        if target.is_symlink():
            target.unlink()
        with open(target, "wb") as out:
            _copy(src, out)
        os.chmod(target, (member.mode & 0o777) | 0o600)
        stats.files += 1
        stats.bytes += member.size
    elif member.issym():
        target.parent.mkdir(parents=True, exist_ok=True)
        _check_link(member, rel, strip_top, dest)
        if target.is_symlink() or target.exists():
            target.unlink()
        os.symlink(member.linkname, target)
        stats.links += 1
    elif member.islnk():
        resolved = _check_link(member, rel, strip_top, dest)
        source = dest / resolved
        _ensure_inside(dest, source)
        if not source.is_file():
            raise UnsafeArchiveError(f"hard link {rel!r} points to a missing or non-regular member")
        target.parent.mkdir(parents=True, exist_ok=True)
        # A copy, never a hard link: artifacts must not share inodes (A6).
        with open(source, "rb") as src_f, open(target, "wb") as out:
            _copy(src_f, out)
        stats.files += 1
        stats.bytes += source.stat().st_size
    else:
        kind = "device" if (member.ischr() or member.isblk()) else "fifo" if member.isfifo() else "special"
        raise UnsafeArchiveError(f"archive member {rel!r} is a {kind} file; special files are refused")


def _ensure_inside(root: Path, path: Path) -> None:
    """Refuse writes through a previously extracted symlink that leads outside ``root``."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root + os.sep):
        raise UnsafeArchiveError(f"archive member path {str(path)!r} resolves outside the destination")


def _copy(src: IO[bytes], out: IO[bytes]) -> None:
    while chunk := src.read(1024 * 1024):
        out.write(chunk)


def read_single_file(fileobj: IO[bytes], *, max_bytes: int | None = None) -> tuple[bytes, int]:
    """The content of the first regular file in a tar stream, and its mode.

    Raises IsADirectoryError for a directory archive.
    """
    with tarfile.open(fileobj=fileobj, mode="r|*") as tar:
        for member in tar:
            if member.isdir():
                raise IsADirectoryError(member.name)
            if not member.isfile():
                raise UnsafeArchiveError(f"{member.name!r} is not a regular file")
            src = tar.extractfile(member)
            assert src is not None
            if max_bytes is not None and member.size > max_bytes:
                raise ArchiveLimitError(f"{member.name!r} has {member.size} bytes, more than the limit of {max_bytes}")
            return src.read(member.size), stat.S_IMODE(member.mode)
    raise FileNotFoundError("empty archive")
