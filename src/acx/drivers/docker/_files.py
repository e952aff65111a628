"""Files in and out of a docker session: tar archives through the engine's archive API.

Uploads are tars built here; downloads are untrusted archives extracted by
:mod:`acx.drivers.docker._archive` (absolute, ``..``, escaping-link and device members refused,
byte and entry limits enforced while reading). A transfer runs in a worker thread that a deadline
or cancellation can walk away from (:class:`_Transfer`).
"""

from __future__ import annotations

import contextlib
import functools
import posixpath
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import trio

from acx.drivers.docker._archive import directory_tar, read_single_file, safe_extract, single_file_tar
from acx.drivers.docker._engine import _short
from acx.drivers.transfer import ArchiveLimitError, ExtractStats
from acx.errors import DriverError

if TYPE_CHECKING:
    from acx.drivers.docker._session import DockerSession

T = TypeVar("T")

# Go's os.FileMode bits as reported by the archive stat header.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


class _Transfer:
    """Shared between a transfer's worker thread and the trio task that may abandon it."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.responses: list[Any] = []

    def abort(self) -> None:
        self.cancel.set()
        for res in self.responses:
            with contextlib.suppress(Exception):
                res.close()


def _link_target(path: str, target: str) -> str:
    """Where a symlink at ``path`` pointing to ``target`` leads (container paths)."""
    if target.startswith("/"):
        return posixpath.normpath(target)
    return posixpath.normpath(posixpath.join(posixpath.dirname(path), target))


class DockerFiles:
    """Files in and out of a :class:`~acx.drivers.docker.DockerSession` (composed into it)."""

    def __init__(self, s: DockerSession) -> None:
        self.s = s

    def _abs(self, path: str) -> str:
        if path.startswith("/"):
            return posixpath.normpath(path)
        return posixpath.normpath(posixpath.join(self.s.workdir or "/", path))

    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        target = self._abs(path)
        archive = single_file_tar(target.lstrip("/"), data, mode)
        await self.s.driver._call(self._put, "/", archive)

    def _put(self, where: str, data: Any) -> None:
        from docker.errors import APIError

        try:
            ok = self.s.api.put_archive(self.s.container_id, where, data)
        except APIError as exc:
            raise DriverError(f"upload into {self.s.id} failed: {_short(exc)}", code="transfer_failed") from exc
        if not ok:
            raise DriverError(f"upload into {self.s.id} failed", code="transfer_failed")

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        target = self._abs(path)

        def work(transfer: _Transfer) -> bytes:
            # One GET per hop: the archive response carries the path's stat in a header, so
            # symlinks, directories and oversize files are handled before the body is read.
            current = target
            for _ in range(16):
                with self._open_archive(current, transfer) as (res, st):
                    mode = int(st.get("mode", 0))
                    if mode & _MODE_SYMLINK:
                        current = _link_target(current, str(st.get("linkTarget") or ""))
                        continue
                    if mode & _MODE_DIR:
                        raise IsADirectoryError(path)
                    size = int(st.get("size", 0))
                    if max_bytes is not None and size > max_bytes:
                        raise ArchiveLimitError(f"{path} has {size} bytes, more than the limit of {max_bytes}")
                    with self._spool(res, current, None, transfer) as spool:
                        return read_single_file(spool, max_bytes=max_bytes)[0]
            raise DriverError(f"too many levels of symbolic links at {path}", code="transfer_failed")

        return await self._abandonable(work)

    @contextlib.contextmanager
    def _open_archive(self, path: str, transfer: _Transfer | None) -> Iterator[tuple[Any, dict[str, Any]]]:
        """GET the archive of ``path`` (streamed) with its stat; always released afterwards."""
        from docker.errors import APIError, NotFound
        from docker.utils import decode_json_header

        res = self.s.api._get(
            self.s.api._url("/containers/{0}/archive", self.s.container_id), params={"path": path}, stream=True
        )
        try:
            if transfer is not None:
                transfer.responses.append(res)
            try:
                self.s.api._raise_for_status(res)
            except NotFound:
                raise FileNotFoundError(path) from None
            except APIError as exc:
                raise DriverError(f"download of {path} failed: {_short(exc)}", code="transfer_failed") from exc
            header = res.headers.get("X-Docker-Container-Path-Stat")
            yield res, (decode_json_header(header) if header else {})
        finally:
            # An unread archive stream would hold up the container's removal.
            res.close()

    async def _abandonable(self, fn: Callable[[_Transfer], T]) -> T:
        """Run a transfer in a worker thread that a deadline or cancellation can walk away from.

        On cancellation the transfer's HTTP response is closed from here (unblocking the thread
        and aborting the engine's side — an unread archive stream would otherwise hold up the
        container's removal), and the thread stops at its next check.
        """
        transfer = _Transfer()
        try:
            return await self.s.driver._stream(functools.partial(fn, transfer))
        except BaseException:
            transfer.abort()
            raise

    def _fetch(self, path: str, max_raw: int | None, transfer: _Transfer | None = None) -> IO[bytes]:
        """The container's tar of ``path`` in a spooled temp file (bounded by ``max_raw`` bytes)."""
        with self._open_archive(path, transfer) as (res, _st):
            return self._spool(res, path, max_raw, transfer)

    def _spool(self, res: Any, path: str, max_raw: int | None, transfer: _Transfer | None) -> IO[bytes]:
        spool = tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024)  # noqa: SIM115 - returned open
        try:
            total = 0
            for chunk in res.iter_content(chunk_size=1024 * 1024, decode_unicode=False):
                if transfer is not None and transfer.cancel.is_set():
                    raise DriverError(f"download of {path} abandoned", code="transfer_cancelled")
                total += len(chunk)
                if max_raw is not None and total > max_raw:
                    raise ArchiveLimitError(f"archive of {path} exceeds {max_raw} bytes")
                spool.write(chunk)
        except BaseException:
            spool.close()
            if transfer is not None and transfer.cancel.is_set():
                raise DriverError(f"download of {path} abandoned", code="transfer_cancelled") from None
            raise
        spool.seek(0)
        return spool

    def _stat(self, path: str) -> dict[str, Any] | None:
        from docker.utils import decode_json_header

        res = self.s.api.head(self.s.api._url("/containers/{0}/archive", self.s.container_id), params={"path": path})
        if res.status_code == 404:
            return None
        self.s.api._raise_for_status(res)
        header = res.headers.get("X-Docker-Container-Path-Stat")
        return decode_json_header(header) if header else None

    async def _resolve(self, path: str) -> tuple[str, dict[str, Any]] | None:
        """``path`` with symlinks followed (docker's archive API does not follow the last one),
        and its stat; None when it does not exist."""
        for _ in range(16):
            st = await self.s.driver._call(self._stat, path)
            if st is None:
                return None
            if not (int(st.get("mode", 0)) & _MODE_SYMLINK):
                return path, st
            path = _link_target(path, str(st.get("linkTarget") or ""))
        raise DriverError(f"too many levels of symbolic links at {path}", code="transfer_failed")

    async def _mode(self, path: str) -> int | None:
        resolved = await self._resolve(self._abs(path))
        return None if resolved is None else int(resolved[1].get("mode", 0))

    async def is_file(self, path: str) -> bool:
        mode = await self._mode(path)
        return mode is not None and not (mode & _MODE_TYPE)

    async def is_dir(self, path: str) -> bool:
        mode = await self._mode(path)
        return mode is not None and bool(mode & _MODE_DIR)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        target = self._abs(remote_dir)
        arc_root = target.lstrip("/") or "."
        archive = await trio.to_thread.run_sync(directory_tar, Path(local_dir), arc_root)
        try:
            await self.s.driver._call(self._put, "/", archive)
        finally:
            archive.close()

    async def download_dir(
        self,
        remote_dir: str,
        local_dir: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> None:
        await self.download_tree(remote_dir, local_dir, exclude=exclude, max_bytes=max_bytes, max_entries=max_entries)

    async def download_tree(
        self,
        remote: str,
        local: str,
        *,
        exclude: tuple[str, ...] | list[str] = (),
        max_bytes: int | None = None,
        max_entries: int | None = None,
    ) -> ExtractStats:
        """Copy a remote file or directory to ``local`` with safe extraction and limits."""
        # A symlinked source is followed (like the file helpers); links *inside* it are checked.
        resolved = await self._resolve(self._abs(remote))
        if resolved is None:
            raise FileNotFoundError(remote)
        path, st = resolved
        is_dir = bool(int(st.get("mode", 0)) & _MODE_DIR)
        max_raw = None
        if max_bytes is not None:
            # Tar framing adds headers and padding per entry on top of the content bytes.
            max_raw = max_bytes + 4096 * (max_entries or 100_000) + 1024 * 1024
        dest = Path(local)
        if not is_dir:
            dest.parent.mkdir(parents=True, exist_ok=True)

        def work(transfer: _Transfer) -> ExtractStats:
            with self._fetch(path, max_raw, transfer) as spool:
                return safe_extract(
                    spool,
                    dest if is_dir else dest.parent,
                    strip_top=True,
                    exclude=exclude,
                    max_bytes=max_bytes,
                    max_entries=max_entries,
                    single_name=None if is_dir else dest.name,
                    cancel=transfer.cancel,
                )

        return await self._abandonable(work)
