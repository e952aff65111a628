"""A toy sandbox driver written from the skeleton in docs/plugins.md, as a newcomer would.

Each session is a host temp directory; commands are host processes in their own session, marked
by an environment variable so that ``kill_stray_processes`` finds what they left running. It is
deliberately not a sandbox (absolute paths are host paths): it exists to prove the skeleton,
the base-class contracts and the conformance suite are enough to write a driver
(tests/drivers/test_toy_driver.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import msgspec
import trio

from acx.drivers import Driver, DriverCapabilities, EnvironmentConfig, ExecResult, OpenRequest, Session
from acx.errors import DriverError

_MARK = "ACX_TOY_SESSION"


class ToyConfig(EnvironmentConfig, frozen=True):
    """Host processes in a throwaway temp directory (a toy driver)."""

    root: Annotated[str | None, msgspec.Meta(description="where session directories are made")] = None


class ToySession(Session):
    def _path(self, path: str) -> Path:
        return Path(self.workdir or "/", path)

    async def _exec(self, argv, *, cwd, env, timeout, stdin, max_output_bytes) -> ExecResult:  # type: ignore[no-untyped-def]
        where = self._path(cwd or ".")
        if not where.is_dir():
            raise DriverError(f"cwd {cwd!r} does not exist in session {self.id}")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env, _MARK: self.id}
        try:
            proc = await trio.lowlevel.open_process(
                argv, cwd=where, env=env, start_new_session=True,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        except (FileNotFoundError, PermissionError) as exc:
            return ExecResult(returncode=127, stderr=str(exc))
        out, err = bytearray(), bytearray()
        cut = False

        async def pump(stream: trio.abc.ReceiveStream, buf: bytearray) -> None:
            nonlocal cut
            while chunk := await stream.receive_some(65536):
                room = max_output_bytes - len(buf)
                cut = cut or len(chunk) > room
                buf += chunk[: max(room, 0)]

        try:
            with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
                async with trio.open_nursery() as nursery:
                    assert proc.stdout is not None and proc.stderr is not None
                    nursery.start_soon(pump, proc.stdout, out)
                    nursery.start_soon(pump, proc.stderr, err)
                    if proc.stdin is not None:
                        await proc.stdin.send_all(stdin or b"")
                        await proc.stdin.aclose()
                    await proc.wait()
        finally:  # timeout or cancellation: the whole process group goes
            if proc.returncode is None or scope.cancelled_caught:
                _killpg(proc.pid)
                with trio.CancelScope(shield=True):
                    await proc.wait()
        return ExecResult(
            returncode=proc.returncode if not scope.cancelled_caught else -9,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=scope.cancelled_caught,
            output_truncated=cut,
        )

    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        p = self._path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        p = self._path(path)
        if max_bytes is not None and p.stat().st_size > max_bytes:
            raise DriverError(f"{path} is larger than {max_bytes} bytes")
        return p.read_bytes()

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        if not Path(local_dir).is_dir():
            raise FileNotFoundError(local_dir)
        shutil.copytree(local_dir, self._path(remote_dir), symlinks=True, dirs_exist_ok=True)

    async def download_dir(self, remote_dir: str, local_dir: str) -> None:
        if not self._path(remote_dir).is_dir():
            raise FileNotFoundError(remote_dir)
        shutil.copytree(self._path(remote_dir), local_dir, symlinks=True, dirs_exist_ok=True)

    async def is_file(self, path: str) -> bool:
        return self._path(path).is_file()

    async def is_dir(self, path: str) -> bool:
        return self._path(path).is_dir()

    async def kill_stray_processes(self) -> None:
        for pid in _marked(self.id):
            _killpg(pid)

    async def _close(self) -> None:
        await self.kill_stray_processes()
        shutil.rmtree(self.workdir or "", ignore_errors=True)


class ToyDriver(Driver):
    """Host processes in a throwaway temp directory (a toy driver)."""

    id = "toy"
    config_class = ToyConfig

    def capabilities(self) -> DriverCapabilities:
        return DriverCapabilities(network_modes=("public",), task_env=True, startup_env=True)

    async def open(self, request: OpenRequest) -> Session:
        assert isinstance(self.config, ToyConfig)
        workdir = tempfile.mkdtemp(prefix="acx-toy-", dir=self.config.root)
        return ToySession(session_id=request.session_id, workdir=workdir, public_env=request.startup_env)


def _killpg(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _marked(session_id: str) -> list[int]:
    """Processes whose environment carries this session's mark (setsid'ed daemons included)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"{_MARK}={session_id}\0".encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
