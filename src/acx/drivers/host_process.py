"""The ``host_process`` driver: commands run as host processes in a per-session work directory.

What it enforces and what it does not:

* Every session gets its own work directory (``<workdir_root>/acx-<session id>``), removed on close
  unless ``keep_workdir``. Relative paths (cwd, files) resolve against it. **Absolute paths are
  host paths**: there is no filesystem isolation, so benchmarks that write ``/logs`` or ``/tests``
  are refused at planning (they need ``--env docker``).
* ``setup.workdir`` is a host directory; it must exist (acx never creates directories outside the
  session directory on your machine).
* ``no-network`` runs every command inside a fresh network namespace (``unshare --net
  --map-root-user``; only loopback) when the OS allows it; ``allowlist``/``denylist`` are refused.
  The policy can change between phases: it applies to commands started afterwards, and no
  command outlives its ``exec`` (its process group is killed when it returns).
* Commands start in their own session (``setsid``); a timeout or a cancellation sends SIGTERM to the
  whole process group, then SIGKILL after ``kill_grace_seconds`` — children and commands that
  ignore SIGTERM included.
* Commands inherit the host environment (V2) unless ``inherit_env = false``.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import trio

from acx.drivers._base import Driver, ExecResult, OpenRequest, Session, SessionRecord
from acx.drivers._specs import DriverCapabilities, HostProcessConfig, probe_capabilities
from acx.errors import CapabilityError, DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy

__all__ = ["HostProcessDriver", "HostProcessSession"]

_READ_CHUNK = 65536
_DRAIN_SECONDS = 2.0


class _Capture:
    """Keeps at most ``limit`` bytes of a stream; drains the rest so the writer never blocks."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    def feed(self, data: bytes) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = True
            return
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        self.chunks.append(data)
        self.size += len(data)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


async def _pump(stream: Any, capture: _Capture) -> None:
    try:
        while True:
            data = await stream.receive_some(_READ_CHUNK)
            if not data:
                return
            capture.feed(data)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        return


async def _feed_stdin(stream: Any, data: bytes) -> None:
    try:
        if data:
            await stream.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


def _write_stdin_now(stream: Any, data: bytes) -> bytes | None:
    """Write what fits into the fresh (empty, non-blocking) stdin pipe and close it.

    A prompt usually fits in the pipe buffer (64 KiB on Linux): no feeder task, no extra
    scheduling. Returns the part that did not fit (the pipe stays open for the feeder), or None.
    """
    written = 0
    try:
        while written < len(data):
            written += os.write(stream.fileno(), data[written : written + _READ_CHUNK])
    except BlockingIOError:
        return data[written:]
    except (BrokenPipeError, OSError):
        pass  # the command exited or closed its stdin: like _feed_stdin, not an error
    stream.close()
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists but not ours any more: treat as gone from our side
        return False
    return True


class HostProcessSession(Session):
    kill_grace_seconds: ClassVar[float] = 1.0

    def __init__(
        self,
        *,
        session_id: str,
        root: Path,
        workdir: Path,
        own_root: bool,
        config: HostProcessConfig,
        public_env: Mapping[str, str],
        network_policy: NetworkPolicy,
    ) -> None:
        super().__init__(session_id=session_id, workdir=str(workdir), public_env=public_env)
        self.root = root
        self._own_root = own_root
        self._config = config
        self._policy = network_policy
        self._live: set[int] = set()
        #: Open (append) descriptor of the session's process-group record, created with the session.
        self._groups_fd: int | None = None

    # ---- paths -------------------------------------------------------------------------------
    def host_path(self, path: str) -> Path:
        """Absolute paths are host paths; relative ones resolve against the session workdir."""
        p = Path(path)
        return p if p.is_absolute() else Path(self.workdir or self.root) / p

    def _argv(self, argv: list[str]) -> list[str]:
        if self._policy.network_mode == "no-network":
            unshare = shutil.which("unshare") or "unshare"
            return [unshare, "--net", "--map-root-user", "--", *argv]
        return argv

    def _env(self, env: dict[str, str]) -> dict[str, str] | None:
        if not self._config.inherit_env:
            return {"PATH": os.defpath, **env}
        # Nothing to add: the child inherits our environment as is (None), which spares a copy
        # of os.environ per command.
        return {**os.environ, **env} if env else None

    # ---- exec --------------------------------------------------------------------------------
    async def _exec(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        max_output_bytes: int,
    ) -> ExecResult:
        workdir = self.host_path(cwd) if cwd is not None else Path(self.workdir or self.root)
        # The working directory is checked only when the spawn fails (a stat per command saved).
        try:
            proc = await trio.lowlevel.open_process(
                self._argv(argv),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=str(workdir),
                env=self._env(env),
                start_new_session=True,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            if not workdir.is_dir():
                raise DriverError(f"working directory {workdir} does not exist in session {self.id}") from exc
            # Same contract as a shell: command not found / not executable → 126/127.
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ExecResult(returncode=code, stderr=f"{argv[0]}: {exc.strerror}\n")
        out, err = _Capture(max_output_bytes), _Capture(max_output_bytes)
        self._live.add(proc.pid)
        self._note_group(proc.pid)
        deadline = trio.move_on_after(timeout) if timeout is not None else trio.CancelScope()
        try:
            with deadline:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_pump, proc.stdout, out)
                    nursery.start_soon(_pump, proc.stderr, err)
                    if stdin is not None:
                        rest = _write_stdin_now(proc.stdin, stdin)
                        if rest is not None:  # more than the pipe holds: fed as the command reads
                            nursery.start_soon(_feed_stdin, proc.stdin, rest)
                    await proc.wait()
                    # Output still held open by a background child must not hang exec(): give the
                    # pipes a moment to drain, then the group is killed below.
                    nursery.cancel_scope.deadline = min(
                        nursery.cancel_scope.deadline, trio.current_time() + _DRAIN_SECONDS
                    )
        finally:
            # Runs on success, timeout and caller cancellation alike: nothing outlives exec().
            with trio.CancelScope(shield=True):
                await self._kill_group(proc)
                self._live.discard(proc.pid)
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        await stream.aclose()
        timed_out = deadline.cancelled_caught
        returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        if timed_out:
            returncode = 124 if returncode >= 0 else returncode
        return ExecResult(
            returncode=returncode,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            output_truncated=out.truncated or err.truncated,
        )

    async def _kill_group(self, proc: Any) -> None:
        """SIGTERM the process group, SIGKILL what is left after the grace period, reap."""
        pgid = proc.pid
        if proc.returncode is None or _group_alive(pgid):
            if _group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            with trio.move_on_after(self.kill_grace_seconds):
                while proc.poll() is None or _group_alive(pgid):
                    await trio.sleep(0.02)
            if _group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        await proc.wait()

    # ---- files -------------------------------------------------------------------------------
    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        target = self.host_path(path)

        def _write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(mode)

        await trio.to_thread.run_sync(_write)

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        target = self.host_path(path)

        def _read() -> bytes:
            if target.is_dir():
                raise IsADirectoryError(str(path))
            with target.open("rb") as fh:
                data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
            if max_bytes is not None and len(data) > max_bytes:
                raise DriverError(f"{path} is larger than the {max_bytes}-byte limit")
            return data

        return await trio.to_thread.run_sync(_read)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        src, dst = Path(local_dir), self.host_path(remote_dir)
        if not src.is_dir():
            raise FileNotFoundError(local_dir)
        await trio.to_thread.run_sync(lambda: shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True))

    async def download_dir(self, remote_dir: str, local_dir: str) -> None:
        src, dst = self.host_path(remote_dir), Path(local_dir)

        def _copy() -> None:
            if not src.is_dir():
                raise FileNotFoundError(remote_dir)
            _check_tree(src)
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)

        await trio.to_thread.run_sync(_copy)

    async def is_file(self, path: str) -> bool:
        return self.host_path(path).is_file()

    async def is_dir(self, path: str) -> bool:
        return self.host_path(path).is_dir()

    # ---- network -----------------------------------------------------------------------------
    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        """Applies to commands started from now on; none started earlier is still running."""
        caps = probe_capabilities("host_process")
        if policy.network_mode not in caps.network_modes:
            raise CapabilityError(
                f"host_process cannot enforce network_mode {policy.network_mode!r}: "
                + caps.unsupported_reasons.get(policy.network_mode, "not supported"),
                code="E0452",
                help="use --env docker",
            )
        self._policy = policy

    # ---- lifecycle ---------------------------------------------------------------------------
    def _note_group(self, pgid: int) -> None:
        """Record a process group beside the session dir, so a later run can reap it after a crash."""
        if self._groups_fd is None:
            return
        try:
            os.write(self._groups_fd, f"{pgid}\n".encode())  # O_APPEND: one syscall per exec
        except OSError:
            pass

    async def _close(self) -> None:
        for pgid in list(self._live):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._live.clear()
        remove_root = self._own_root and not self._config.keep_workdir
        fd, self._groups_fd = self._groups_fd, None
        if fd is not None:
            os.close(fd)
        # Inline: a worker-thread hop costs more than removing a small directory (measured: GIL
        # hand-offs on a busy machine); the checkpoint keeps close() a scheduling point.
        _remove_session_files(self.root if remove_root else None, _groups_file(self.root) if fd is not None else None)
        await trio.lowlevel.checkpoint()


def _groups_file(root: Path) -> Path:
    return root.with_name(root.name + ".groups")


def _reap_groups(root: Path) -> int:
    """SIGKILL the recorded process groups of a dead session; only processes whose cwd is inside
    the session's directories are touched (a recycled pgid of an unrelated process is left alone)."""
    gfile = _groups_file(root)
    try:
        lines = gfile.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    allowed = [str(root.resolve())]
    groups: set[int] = set()
    for line in lines:
        if line.startswith("#workdir "):
            allowed.append(str(Path(line[len("#workdir ") :]).resolve()))
        elif line.strip().isdigit():
            groups.add(int(line))
    killed = 0
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            pgrp = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2])
            if pgrp not in groups:
                continue
            cwd = os.readlink(entry / "cwd")
        except (OSError, ValueError, IndexError):
            continue
        if any(cwd == a or cwd.startswith(a + os.sep) for a in allowed):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _make_session_files(parent: Path, prefix: str, workdir: str | None) -> tuple[Path, int]:
    """The session directory and its process-group record (``<dir>.groups``, opened for append)."""
    try:
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except FileNotFoundError:  # the parent does not exist yet (first session)
        parent.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        fd = os.open(_groups_file(root), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if workdir:
            os.write(fd, f"#workdir {workdir}\n".encode())
    except OSError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root, fd


def _remove_session_files(root: Path | None, groups: Path | None) -> None:
    if groups is not None:
        try:
            groups.unlink()
        except OSError:
            pass
    if root is not None:
        try:
            os.rmdir(root)  # usually empty: one syscall instead of rmtree's open/scandir/rmdir
        except OSError:
            shutil.rmtree(root, ignore_errors=True)


def _check_tree(root: Path) -> None:
    """Refuse special files and symlinks that leave the tree (download_dir safety)."""
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = (p.parent / os.readlink(p)).resolve()
                if target != real_root and real_root not in target.parents:
                    raise DriverError(f"refusing to download {p}: symlink escapes {root}")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise DriverError(f"refusing to download {p}: special file")


class HostProcessDriver(Driver):
    id: ClassVar[str] = "host_process"
    config_class = HostProcessConfig

    def capabilities(self) -> DriverCapabilities:
        return probe_capabilities("host_process")

    async def open(self, request: OpenRequest) -> Session:
        config = self.config
        assert isinstance(config, HostProcessConfig)
        policy = request.network_policy
        caps = self.capabilities()
        if policy.network_mode not in caps.network_modes:
            reason = caps.unsupported_reasons.get(policy.network_mode, "not supported")
            raise CapabilityError(
                f"host_process cannot enforce network_mode {policy.network_mode!r}: {reason}",
                code="E0452",
                help="use --env docker, or a policy host_process enforces: " + ", ".join(caps.network_modes),
            )
        root_parent = Path(config.workdir_root) if config.workdir_root else Path(tempfile.gettempdir())

        if request.setup.workdir and not Path(request.setup.workdir).is_dir():
            raise EnvironmentSetupError(
                f"host_process: setup.workdir {request.setup.workdir} is a host path and does not exist; "
                "create it, or unset setup.workdir so each session gets its own work directory"
            )
        try:
            # Inline: two metadata operations cost less than a worker-thread hop (see _close).
            prefix = f"acx-{_safe(request.session_id)}-"
            root, groups_fd = _make_session_files(root_parent, prefix, request.setup.workdir)
        except OSError as exc:
            raise EnvironmentSetupError(f"host_process: cannot create a session directory: {exc}") from exc
        session = HostProcessSession(
            session_id=request.session_id,
            root=root,
            workdir=Path(request.setup.workdir) if request.setup.workdir else root,
            own_root=True,
            config=config,
            public_env=request.startup_env,
            network_policy=policy,
        )
        session._groups_fd = groups_fd
        return session

    def _root_parent(self) -> Path:
        config = self.config
        assert isinstance(config, HostProcessConfig)
        return Path(config.workdir_root) if config.workdir_root else Path(tempfile.gettempdir())

    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        """Session directories (of any run) that were not closed: crashed or kept sessions."""
        parent = self._root_parent()
        out = []
        for gfile in sorted(parent.glob("acx-*.groups")):
            root = gfile.with_name(gfile.name[: -len(".groups")])
            out.append(SessionRecord(id=root.name, provider=self.id, labels={"path": str(root)}))
        return out

    async def close_session(self, session_id: str) -> None:
        """Kill the leftover processes of a crashed session and remove its directory."""
        parent = self._root_parent()
        for root in parent.glob(f"acx-{_safe(session_id)}-*"):
            if not root.is_dir():
                continue
            await trio.to_thread.run_sync(_reap_groups, root)
            await trio.to_thread.run_sync(functools.partial(shutil.rmtree, root, ignore_errors=True))
            try:
                _groups_file(root).unlink()
            except OSError:
                pass


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:40]
