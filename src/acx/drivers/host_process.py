"""The ``host_process`` driver: commands run as host processes in a per-session work directory.

What it enforces and what it does not:

* Every session gets its own work directory (``<workdir_root>/acx-<session id>-<8 random hex
  digits>``), removed on close unless ``keep_workdir``; ``list_sessions`` lists the ones left
  (crashed or kept sessions). Relative paths (cwd, files) resolve against it. **Absolute paths are
  host paths**: there is no filesystem isolation, so benchmarks that write ``/logs`` or ``/tests``
  are refused at planning (they need ``--env docker``).
* ``setup.workdir`` is a host directory; it must exist (acx never creates directories outside the
  session directory on your machine).
* ``no-network`` runs every command inside a fresh network namespace (``unshare --net
  --map-root-user``; only loopback) when the OS allows it; ``allowlist``/``denylist`` are refused.
  The policy can change between phases: it applies to commands started afterwards; a command's
  process group is killed when its ``exec`` returns, and what left the group (``setsid``,
  daemons) is killed with the session's cgroup, or else by its ``ACX_SESSION_ID`` marker or a
  working directory inside a session directory of the run when the run ends (:meth:`end_run`).
* Commands start in their own session (``setsid``); a timeout or a cancellation sends SIGTERM to the
  whole process group, then SIGKILL after ``kill_grace_seconds`` — children and commands that
  ignore SIGTERM included.
* **Containment** (``containment``, default ``auto``): where acx can create a cgroup v2 under its
  own cgroup and move a command into it (probed once: a cgroup2 mount, write access, a kernel
  with ``cgroup.kill``), each session gets one (named after its directory) and every command
  starts inside it (joined between ``vfork`` and ``exec`` by the C helper ``_cspawn``, or —
  where it was not built — by a ``/bin/sh`` wrapper before ``exec``, an extra exec); closing
  the session — or the end of the run, or ``close_session`` after a crash — kills everything in
  it, whatever the processes did (``env -i``, ``setsid``, double forks, another directory).
  Where cgroups are not available (``auto``) or not wanted (``process_group``), process groups
  plus the end-of-run sweep below apply: a daemon that drops its marker *and* leaves the session
  directory is out of reach there. ``containment = "cgroup"`` refuses to open a session without
  cgroups.
* Commands get a minimal environment: ``PATH``, ``HOME``, ``LANG`` and ``TMPDIR`` of acx (those
  set), plus what the plan declares (env maps, a harness's own variables) — never acx's other
  variables, such as the user's API keys. ``inherit_env = true`` passes ``os.environ`` whole
  (the compiler warns, W0304). Read once per driver, when it opens its first session.
* Every command also gets ``ACX_SESSION_ID=<session id>`` in its environment (it cannot be
  overridden, and commands may read it). That is how acx finds a crashed session's leftover
  processes: ``close_session`` (``--resume``, gc) SIGKILLs every process of the same user whose
  initial environment holds exactly that entry, or whose working directory is inside the
  session directory, then removes the directory. A process that drops the variable (``env -i``)
  and leaves the session directory is out of its reach.
* The acx process that opened a session holds its directory open (one close-on-exec descriptor)
  until the session closes, so ``acx gc`` tells a crashed run's leftovers (nobody holds them) from
  a live run's sessions without any file written per session; the kernel drops the descriptor
  when the process dies, whatever killed it. A session kept on purpose (``keep_environment``,
  ``keep_workdir``) gets an empty ``.<directory name>.kept`` marker beside its directory, and gc
  spares it unless ``--include-kept``. ``kill_stray_processes`` kills what a session's earlier
  commands left running, by the ``ACX_SESSION_ID`` marker.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import trio

from acx.drivers import _procs
from acx.drivers._base import Driver, ExecResult, OpenRequest, Session, SessionRecord
from acx.drivers._owner import held_dirs
from acx.drivers._procs import (
    PIPE_BUF,
    Command,
    Proc,
    close_fds,
    closed,
    group_alive,
    prefill,
    resolve,
    safe_name,
    signal_group,
    spawn,
    wait_exit,
)
from acx.drivers._specs import DriverCapabilities, HostProcessConfig, probe_host_process
from acx.errors import CapabilityError, DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy

__all__ = ["HostProcessDriver", "HostProcessSession"]

#: Environment entry ``ACX_SESSION_ID=<session id>`` of every command: finds a crashed session's processes.
_MARKER_KEY = b"ACX_SESSION_ID"
#: What a command inherits from acx unless ``inherit_env = true`` (issue 11 item 6): enough to
#: find programs, a home, a locale and a temp directory; the plan declares everything else.
MINIMAL_ENV = ("PATH", "HOME", "LANG", "TMPDIR")
#: A session directory's name: ``acx-<id as safe_name makes it>-<8 hex digits>``.
_SESSION_DIR = re.compile(r"acx-([A-Za-z0-9_.-]{0,40})-[0-9a-f]{8}")
_RANDOM = random.Random()
#: Where the blocking calls of sessions run: inline while quick, in worker threads while slow.
_SPAWNS, _DIRS, _RELEASES = _procs.Offload(), _procs.Offload(), _procs.Offload()


@functools.cache
def _unshare() -> str:
    return shutil.which("unshare") or "unshare"


# ---- containment: a cgroup v2 per session ---------------------------------------------------------
#: Text written into a session cgroup's ``cgroup.procs`` by the wrapper that starts each command, so
#: the command is inside before it can fork: ``sh -c 'echo 0 > "$0" && exec "$@"' <procs> argv...``.
_JOIN_CGROUP = 'echo 0 > "$0" || exit 125; exec "$@"'
#: The same, for a command whose environment has no ``PWD`` (the shell would add one).
_JOIN_CGROUP_NO_PWD = 'echo 0 > "$0" || exit 125; unset PWD; exec "$@"'


def _cgroup2_mount() -> str | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on hybrid
    hosts), from /proc/self/mountinfo; None without one."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                sep = fields.index("-")
                if fields[sep + 1] == "cgroup2":
                    return fields[4]
    except (OSError, ValueError, IndexError):
        pass
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


@functools.cache
def cgroup_parent() -> str | None:
    """The directory under which session cgroups are made — acx's own cgroup v2 — when this
    process may create a cgroup there and move a command into it (probed once); else None, and
    sessions fall back to process groups plus the marker/cwd sweep (see the module docstring)."""
    mount, own = _cgroup2_mount(), _own_cgroup()
    if mount is None or own is None:
        return None
    parent = os.path.join(mount, own.lstrip("/"))
    probe = os.path.join(parent, f"acx-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        return None
    try:
        if not os.path.exists(os.path.join(probe, "cgroup.kill")):
            return None  # kernels before 5.14: no atomic kill of a whole cgroup
        if not _can_join(os.path.join(probe, "cgroup.procs")):
            return None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        _remove_cgroup(probe)
    _sweep_orphan_cgroups(parent)
    return parent


def _can_join(procs: str) -> bool:
    """Whether a command can start inside the cgroup of ``procs`` the way sessions start theirs
    (``_cspawn``, else the joining shell)."""
    if _procs.FAST_SPAWN:
        with open(os.devnull, "wb") as null:
            try:
                return spawn(["true"], subprocess.DEVNULL, null.fileno(), null.fileno(), "/", {}, procs).wait() == 0
            except OSError:
                return False
    done = subprocess.run(
        ["/bin/sh", "-c", _JOIN_CGROUP, procs, "true"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=10,
        check=False,
    )
    return done.returncode == 0


#: The orphan sweep leaves cgroups younger than this alone (seconds).
_SWEEP_MIN_AGE = 60.0


def _sweep_orphan_cgroups(parent: str) -> None:
    """rmdir the empty session cgroups nobody holds open: left by sessions that were never closed
    (a crash, a dropped driver) whose processes are gone. A live session holds its cgroup open;
    one with processes left is kept for ``--resume``/gc (``close_session`` kills them)."""
    try:
        names = [n for n in os.listdir(parent) if _SESSION_DIR.fullmatch(n)]
    except OSError:
        return
    empty = set()
    young = time.time() - _SWEEP_MIN_AGE
    for name in names:
        path = os.path.join(parent, name)
        try:
            if os.stat(path).st_ctime > young:
                continue  # maybe a session another acx is opening, not yet holding it open
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as fh:
                if not fh.read().strip():
                    empty.add(path)
        except OSError:
            continue
    if not empty:
        return
    for path in empty - held_dirs(empty):
        with contextlib.suppress(OSError):
            os.rmdir(path)  # EBUSY if a process joined meanwhile: left alone


def _cgroup_name(root: str) -> str:
    return os.path.basename(root)


def _kill_cgroup(path: str) -> None:
    """SIGKILL every process in the cgroup ``path`` (``cgroup.kill``), wait until it is empty,
    remove it. Whatever the processes did — ``setsid``, ``env -i``, a double fork, another
    directory — they cannot leave a cgroup on their own."""
    try:
        with open(os.path.join(path, "cgroup.kill"), "w", encoding="ascii") as fh:
            fh.write("1")
    except FileNotFoundError:
        return
    except OSError:
        _kill_listed(path)
    _remove_cgroup(path)


def _cgroup_empty(path: str) -> bool:
    """Whether no process is left in the cgroup ``path`` (``populated 0`` in ``cgroup.events``);
    False when that cannot be read."""
    try:
        with open(os.path.join(path, "cgroup.events"), "rb") as fh:
            return b"populated 0" in fh.read()
    except OSError:
        return False


def _kill_cgroups(paths: list[str]) -> None:
    for path in paths:
        _kill_cgroup(path)


def _kill_listed(path: str) -> None:
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs"), encoding="ascii") as fh:
                pids = [int(p) for p in fh.read().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _remove_cgroup(path: str) -> None:
    """rmdir once the killed processes are gone (EBUSY until then; bounded, ~2 s)."""

    for _ in range(200):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


class HostProcessSession(Session):
    kill_grace_seconds: ClassVar[float] = 1.0

    def __init__(
        self,
        *,
        session_id: str,
        root: str,
        workdir: str,
        own_root: bool,
        config: HostProcessConfig,
        public_env: Mapping[str, str],
        network_policy: NetworkPolicy,
        base_env: dict[bytes, bytes],
        holder: int = -1,
        cgroup: str | None = None,
        cgroup_fd: int = -1,
    ) -> None:
        super().__init__(session_id=session_id, workdir=workdir, public_env=public_env)
        #: The session's cgroup directory: every command starts inside it, and closing the session
        #: kills whatever is left in it (None where cgroups are not available: process groups).
        self.cgroup = cgroup
        #: Held open while the session lives, like its directory: how a sweep tells it from an
        #: orphan. Opened right after the mkdir (:func:`_make_session`).
        self._cgroup_fd = cgroup_fd
        if cgroup is not None and cgroup_fd < 0:
            with contextlib.suppress(OSError):
                self._cgroup_fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.root = root
        #: The session directory, held open while the session is: how gc tells it is live.
        self._holder = holder
        self._own_root = own_root
        self._config = config
        self._policy = network_policy
        self._live: set[int] = set()
        self._base_env = base_env
        self._marker = os.fsencode(session_id)

    # ---- paths -------------------------------------------------------------------------------
    def host_path(self, path: str) -> Path:
        """Absolute paths are host paths; relative ones resolve against the session workdir."""
        p = Path(path)
        return p if p.is_absolute() else Path(self.workdir or self.root, p)

    def _owns(self, target: Path) -> bool:
        """Whether ``target`` lies in the session's own directory or its configured workdir."""
        roots = {os.path.abspath(self.root), os.path.abspath(self.workdir or self.root)}
        where = os.path.abspath(target)
        return any(where == r or where.startswith(r + os.sep) for r in roots)

    def _argv(self, argv: list[str], env: dict[bytes, bytes] | None = None) -> list[str]:
        if self._policy.network_mode == "no-network":
            argv = [_unshare(), "--net", "--map-root-user", "--", *argv]
        if self.cgroup is not None and not _procs.FAST_SPAWN:
            script = _JOIN_CGROUP if env is None or b"PWD" in env else _JOIN_CGROUP_NO_PWD
            argv = ["/bin/sh", "-c", script, os.path.join(self.cgroup, "cgroup.procs"), *argv]
        return argv

    def _not_runnable(self, name: str, env: dict[bytes, bytes], workdir: str) -> ExecResult | None:
        """Behind the cgroup wrapper (no ``_cspawn``) the spawn cannot fail for the command itself: say 126/127 as
        a direct spawn would (same message), before starting anything."""
        path = os.path.join(workdir, name) if "/" in name else resolve(name, env.get(b"PATH"))
        if path is None or not os.path.exists(path):
            return ExecResult(returncode=127, stderr=f"{name}: No such file or directory\n")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            return ExecResult(returncode=126, stderr=f"{name}: Permission denied\n")
        return None

    def _env(self, env: dict[str, str]) -> dict[bytes, bytes]:
        """The command's environment, already encoded (subprocess would encode every entry)."""
        out = self._base_env.copy()
        for key, value in env.items():
            out[os.fsencode(key)] = os.fsencode(value)
        out[_MARKER_KEY] = self._marker  # last: the crash-recovery marker always wins
        return out

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
        base = self.workdir or self.root
        workdir = base if cwd is None else cwd if os.path.isabs(cwd) else os.path.join(base, cwd)
        command_env = self._env(env)
        procs = None if self.cgroup is None else os.path.join(self.cgroup, "cgroup.procs")
        if procs is not None and argv and not _procs.FAST_SPAWN:
            if not os.path.isdir(workdir):
                raise DriverError(f"working directory {workdir} does not exist in session {self.id}")
            refused = self._not_runnable(argv[0], command_env, workdir)
            if refused is not None:
                return refused
        # Plain pipes, no trio stream objects: Command reads them. A stdin that fits the pipe
        # buffer is written before the command starts and its pipe closed (EOF) at once.
        out_r = out_w = err_r = err_w = in_r = in_w = -1
        rest: memoryview | None = None
        try:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            if stdin is not None:
                in_r, in_w = os.pipe()
                if len(stdin) <= PIPE_BUF:  # fits an empty pipe whole: this write cannot block
                    if stdin:
                        os.write(in_w, stdin)
                    in_w = closed(in_w)
                else:
                    os.set_blocking(in_w, False)
                    rest = prefill(in_w, stdin)
                    if rest is None:
                        in_w = closed(in_w)
            # With _cspawn: the command joins the session's cgroup between vfork and exec (no wrapper
            # shell, ~0.7 ms CPU less per command). vfork holds the calling thread until the child
            # has exec'd: ~0.1 ms on a quiet machine, milliseconds on a busy one (the child waits to
            # be scheduled), which on the trio thread serialised every spawn of the run
            # (bench/run_overhead.py at load 11 on 2 cores, process_group, 600 tasks: 3.6-4.5 s
            # inline, 1.5-1.9 s threaded). _SPAWNS picks by how long spawns have been taking; the C
            # call drops the GIL while it waits. Without _cspawn (subprocess, mostly Python): inline.
            spawn_args = (
                self._argv(argv, command_env),
                in_r if stdin is not None else subprocess.DEVNULL,
                out_w,
                err_w,
                workdir,
                command_env,
                procs if _procs.FAST_SPAWN else None,
            )
            if _procs.FAST_SPAWN:
                proc = await _SPAWNS.run(spawn, *spawn_args)
            else:
                await trio.lowlevel.checkpoint()
                proc = spawn(*spawn_args)
        except OSError as exc:
            close_fds(out_r, err_r, in_w)
            if procs is not None and exc.filename == procs:
                raise DriverError(
                    f"session {self.id}: cannot start a command in its cgroup {self.cgroup}: {exc.strerror}"
                ) from exc
            if not isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError)):
                raise
            # The working directory is checked only when the spawn fails (a stat per command saved).
            if not os.path.isdir(workdir):
                raise DriverError(f"working directory {workdir} does not exist in session {self.id}") from exc
            # Same contract as a shell: command not found / not executable → 126/127.
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return ExecResult(returncode=code, stderr=f"{argv[0]}: {exc.strerror}\n")
        except BaseException:
            close_fds(out_r, err_r, in_w)
            raise
        finally:
            close_fds(out_w, err_w, in_r)  # the command's ends: it has its own copies now
        pid = proc.pid
        self._live.add(pid)
        cmd = Command(proc, out_r, err_r, in_w, rest, max_output_bytes)
        try:
            # One cancel scope for the timeout and, once the command has exited, the drain
            # deadline: cancelled before the exit = timed out.
            with trio.CancelScope() as scope:
                if timeout is not None:
                    scope.deadline = trio.current_time() + timeout
                await cmd.watch(scope)
        finally:
            # Runs on success, timeout and caller cancellation alike: nothing outlives exec().
            # After a normal exit this SIGTERM is the only syscall: it finds the group empty.
            if signal_group(pid, signal.SIGTERM) or proc.returncode is None:
                with trio.CancelScope(shield=True):
                    await self._kill_group(proc, cmd.pidfd)
            self._live.discard(pid)
            close_fds(out_r, err_r, cmd.pidfd, cmd.in_w)
        timed_out = not cmd.exited
        returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        if timed_out:
            returncode = 124 if returncode >= 0 else returncode
        return ExecResult(
            returncode=returncode,
            stdout=cmd.out.text(),
            stderr=cmd.err.text(),
            timed_out=timed_out,
            output_truncated=cmd.out.truncated or cmd.err.truncated,
        )

    async def _kill_group(self, proc: Proc, pidfd: int) -> None:
        """The group has been sent SIGTERM: SIGKILL what is left after the grace period, reap."""
        pgid = proc.pid
        with trio.move_on_after(self.kill_grace_seconds):
            while proc.poll() is None or group_alive(pgid):
                await trio.sleep(0.02)
        signal_group(pgid, signal.SIGKILL)
        if proc.returncode is None:
            await wait_exit(proc, pidfd)

    # ---- files -------------------------------------------------------------------------------
    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        target = self.host_path(path)

        def _write() -> None:
            if self._owns(target):
                target.parent.mkdir(parents=True, exist_ok=True)
            elif not target.parent.is_dir():
                # An absolute path is a host path: acx does not create directories all over the
                # host (a mistyped `cwd` would otherwise appear as a new directory tree).
                raise DriverError(
                    f"host_process: cannot write {target}: {target.parent} does not exist on the host "
                    "(absolute paths are host paths; acx creates directories only inside the session's "
                    "own directory)"
                )
            target.write_bytes(data)
            target.chmod(mode)

        await trio.to_thread.run_sync(_write)

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        target = self.host_path(path)

        def _read() -> bytes:
            # O_NONBLOCK: opening a FIFO the agent left (no writer) must not block this worker
            # thread forever — trio cannot cancel it. Only regular files are read.
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    raise IsADirectoryError(str(path))
                if not stat.S_ISREG(mode):
                    raise DriverError(f"{path} is not a regular file", code="not_a_file")
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
        caps = probe_host_process()
        if policy.network_mode not in caps.network_modes:
            raise CapabilityError(
                f"host_process cannot enforce network_mode {policy.network_mode!r}: "
                + caps.unsupported_reasons.get(policy.network_mode, "not supported"),
                code="E0452",
                help="use --env docker",
            )
        self._policy = policy

    # ---- lifecycle ---------------------------------------------------------------------------
    async def _close(self) -> None:
        for pgid in list(self._live):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._live.clear()
        if self._cgroup_fd >= 0:
            os.close(self._cgroup_fd)
            self._cgroup_fd = -1
        if self._holder >= 0:
            os.close(self._holder)
            self._holder = -1
        remove = self._own_root and not self._config.keep_workdir
        if self.cgroup is not None or remove:
            # Everything the session's commands started, wherever it went (issue 11 item 12), then
            # the directory. A cgroup with processes left takes a kill and a wait: always a worker
            # thread. Otherwise it is an rmdir or two, inline while those are quick: on a busy ext4
            # an rmdir waits for the journal (1.4 ms median, 4 ms p90 on the development VM under
            # load), which on the trio thread stalls every other task of the run.
            root = self.root if remove else None
            if self.cgroup is None or _cgroup_empty(self.cgroup):
                await _RELEASES.run(_release, self.cgroup, root)
            else:
                await trio.to_thread.run_sync(_release, self.cgroup, root)
        else:
            await trio.lowlevel.checkpoint()
        if self._own_root and not remove:
            _mark_kept(self.root)  # kept on purpose: gc spares it by default

    async def kill_stray_processes(self) -> None:
        """SIGKILL what earlier commands of this session left running outside their process
        group (``setsid``, daemons), found by the session's ``ACX_SESSION_ID`` marker. A process
        that dropped the marker (``env -i``) is out of reach, as for crash reaping."""
        marker = self._marker
        await trio.to_thread.run_sync(_kill_matching, lambda pid: _marker_of(pid) == marker)


def _session_dirs(parent: str, session_id: str) -> list[str]:
    """The directories of session ``session_id`` under ``parent``: exactly ``acx-<id>-`` plus the
    8-character suffix ``mkdtemp`` adds (no dash), so ``x`` never matches the session ``x-y``."""
    prefix = _prefix(session_id)
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    out = []
    for name in names:
        rest = name[len(prefix) :]
        if name.startswith(prefix) and len(rest) == 8 and "-" not in rest:
            path = os.path.join(parent, name)
            if _is_real_dir(path):
                out.append(path)
    return out


def _reap(session_id: str, roots: list[str]) -> int:
    """SIGKILL every process of a dead session: its environment holds the exact marker
    ``ACX_SESSION_ID=<session id>``, or its cwd is inside one of ``roots``."""
    marker = os.fsencode(session_id)
    allowed = [os.path.realpath(r) for r in roots]
    return _kill_matching(lambda pid: _marker_of(pid) == marker or _cwd_inside(pid, allowed))


def _reap_marked(prefix: bytes, spare: frozenset[bytes] = frozenset()) -> int:
    """SIGKILL the processes whose ``ACX_SESSION_ID`` starts with ``prefix``, except those of the
    ``spare`` sessions."""

    def matches(pid: int) -> bool:
        marker = _marker_of(pid)
        return marker is not None and marker.startswith(prefix) and marker not in spare

    return _kill_matching(matches)


def _kill_matching(matches: Callable[[int], bool]) -> int:
    """SIGKILL this user's processes that ``matches`` — never acx itself, never another user's
    (skipped even when we are root). Repeats while it finds some, so children forked during a
    pass are caught by the next one."""
    own, uid, total = os.getpid(), os.getuid(), 0
    for _ in range(5):
        killed = 0
        try:
            pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        except OSError:
            return total
        for pid in pids:
            if pid == own or not matches(pid):
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            except (ProcessLookupError, PermissionError, FileNotFoundError):
                pass
        total += killed
        if not killed:
            break
    return total


def _marker_of(pid: int) -> bytes | None:
    """The ``ACX_SESSION_ID`` value in a process's environment, if it has one we can read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:  # gone, another user's, a kernel thread
        return None
    key = _MARKER_KEY + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key) :]
    return None


def _cwd_inside(pid: int, allowed: list[str]) -> bool:
    if not allowed:
        return False
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    cwd = cwd.removesuffix(" (deleted)")
    return any(cwd == a or cwd.startswith(a + os.sep) for a in allowed)


def _make_session_dir(parent: str, prefix: str) -> str:
    """``<parent>/<prefix>XXXXXXXX`` (mode 0700), like ``tempfile.mkdtemp`` minus its per-call
    overhead: 8 random hex digits, a new name on a collision."""
    for _ in range(100):
        path = f"{parent}/{prefix}{_RANDOM.getrandbits(32):08x}"
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        except FileNotFoundError:  # the parent does not exist yet (first session)
            os.makedirs(parent, exist_ok=True)
            continue
        return path
    raise FileExistsError(f"no free session directory name under {parent}")


def _make_session(parent: str, prefix: str, keep: bool, cgroups: str | None) -> tuple[str, int, str | None, int]:
    """A session's directory (held open: the returned descriptor), its kept marker when ``keep``,
    and its cgroup under ``cgroups`` (named after the directory, held open too) when given: (root,
    holder, cgroup, cgroup descriptor). Nothing is left behind when a step fails."""
    try:
        root = _make_session_dir(parent, prefix)
        holder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if keep:
            _mark_kept(root)
    except OSError as exc:
        raise EnvironmentSetupError(f"host_process: cannot create a session directory: {exc}") from exc
    if cgroups is None:
        return root, holder, None, -1
    path = os.path.join(cgroups, _cgroup_name(root))
    try:
        os.mkdir(path)
        # At once: another acx process's orphan sweep spares what is held open (and young).
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        os.close(holder)
        _remove_session_dir(root)
        with contextlib.suppress(OSError):
            os.unlink(_kept_marker(root))
        raise EnvironmentSetupError(f"host_process: cannot create the session cgroup {path}: {exc}") from exc
    return root, holder, path, fd


def _kept_marker(root: str) -> str:
    head, name = os.path.split(root)
    return os.path.join(head, f".{name}.kept")


def _mark_kept(root: str) -> None:
    with contextlib.suppress(OSError):
        os.close(os.open(_kept_marker(root), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _release(cgroup: str | None, root: str | None) -> None:
    """Kill and remove the session's cgroup (when it has one), then remove its directory (when
    given): the end of a session, in a worker thread."""
    if cgroup is not None:
        _kill_cgroup(cgroup)
    if root is not None:
        _remove_session_dir(root)


def _remove_session_dir(root: str) -> None:
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
    sessions_discoverable = True  # acx-<session id>-* directories under the workdir root
    _env_snapshot: dict[bytes, bytes] | None = None
    _parent_dir: str | None = None
    _real_parent_dir: str | None = None

    def __init__(self, config: HostProcessConfig | None = None) -> None:
        super().__init__(config if config is not None else HostProcessConfig())
        #: (session id, real directory) of every session this driver opened: without cgroups,
        #: :meth:`end_run` also kills what still works inside one (a daemon that dropped its marker).
        self._opened: list[tuple[str, str]] = []

    def capabilities(self) -> DriverCapabilities:
        return probe_host_process()

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
        if request.setup.workdir and not os.path.isdir(request.setup.workdir):
            raise EnvironmentSetupError(
                f"host_process: setup.workdir {request.setup.workdir} is a host path and does not exist; "
                "create it, or unset setup.workdir so each session gets its own work directory"
            )
        keep = request.labels.get("acx.keep") == "true"
        cgroups = self._cgroup_parent(config)  # probed once, on this thread (functools.cache)
        # Off the trio thread when mkdirs have been slow: a busy filesystem's journal (see _close).
        root, holder, cgroup, cgroup_fd = await _DIRS.run(
            _make_session, self._parent(), _prefix(request.session_id), keep, cgroups
        )
        self._opened.append((request.session_id, os.path.join(self._real_parent(), os.path.basename(root))))
        return HostProcessSession(
            session_id=request.session_id,
            root=root,
            workdir=str(Path(request.setup.workdir)) if request.setup.workdir else root,
            own_root=True,
            config=config,
            public_env=request.startup_env,
            network_policy=policy,
            base_env=self._base_env(),
            holder=holder,
            cgroup=cgroup,
            cgroup_fd=cgroup_fd,
        )

    def _cgroup_parent(self, config: HostProcessConfig) -> str | None:
        """Where this session's cgroup goes (:func:`cgroup_parent`); None when containment is
        ``process_group`` or (``auto``) cgroups are not available here."""
        if config.containment == "process_group":
            return None
        parent = cgroup_parent()
        if parent is None and config.containment == "cgroup":
            raise EnvironmentSetupError(
                "host_process: containment = 'cgroup' but this process cannot create and join a "
                "cgroup v2 (no cgroup2 mount, no write access to its own cgroup, or a kernel "
                "before 5.14); use containment = 'auto' to fall back to process groups"
            )
        return parent

    def _real_parent(self) -> str:
        """:meth:`_parent` with symlinks resolved (cached): a session directory's real path is this
        plus its name (acx made it: no symlink of its own)."""
        real = self._real_parent_dir
        if real is None:
            real = self._real_parent_dir = os.path.realpath(self._parent())
        return real

    def _parent(self) -> str:
        """The absolute directory that holds the session directories (cached per driver)."""
        parent = self._parent_dir
        if parent is None:
            config = self.config
            assert isinstance(config, HostProcessConfig)
            parent = self._parent_dir = os.path.abspath(config.workdir_root or tempfile.gettempdir())
        return parent

    def _base_env(self) -> dict[bytes, bytes]:
        """What every command starts from, encoded once per driver, read at the first session:
        :data:`MINIMAL_ENV` of ``os.environ`` (``PATH`` defaulted), or all of it with
        ``inherit_env = true``."""
        env = self._env_snapshot
        if env is None:
            config = self.config
            assert isinstance(config, HostProcessConfig)
            if config.inherit_env:
                env = (
                    dict(os.environb)
                    if os.supports_bytes_environ
                    else {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()}
                )
            else:
                env = {os.fsencode(k): os.fsencode(os.environ[k]) for k in MINIMAL_ENV if os.environ.get(k)}
                env.setdefault(b"PATH", os.fsencode(os.defpath))
            self._env_snapshot = env
        return env

    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        """Session directories that were not closed (crashed or kept); ``labels={"acx.run_id": ...}``
        keeps those of one run. A record's id is the session id when the directory name holds it."""
        parent = self._parent()

        def _scan() -> list[str]:
            try:
                names = os.listdir(parent)
            except OSError:
                return []
            return sorted(n for n in names if _SESSION_DIR.fullmatch(n) and _is_real_dir(os.path.join(parent, n)))

        names = await trio.to_thread.run_sync(_scan)
        real = {os.path.realpath(os.path.join(parent, n)): n for n in names}
        held = await trio.to_thread.run_sync(held_dirs, set(real))
        held_names = {real[p] for p in held}
        out = []
        for name in names:
            session_id = _session_id_of(name)
            run_id = (labels or {}).get("acx.run_id")
            if run_id and not (session_id or "").startswith(f"{run_id}-"):
                continue
            path = os.path.join(parent, name)
            kept = os.path.exists(_kept_marker(path))
            out.append(
                SessionRecord(
                    id=session_id or name,
                    provider=self.id,
                    labels={"path": path, "acx.session": session_id or ""},
                    name=path,
                    state="kept" if kept else "active",
                    owner_alive=name in held_names,
                    kept=kept,
                )
            )
        return out

    async def end_run(self, session_prefix: str, keep: frozenset[str] = frozenset()) -> None:
        """SIGKILL the processes of the run's sessions that left their command's process group
        (``setsid``, daemons): found by their ``ACX_SESSION_ID`` marker or a working directory
        inside one of the run's session directories — one scan of the process table per run —
        and, with cgroups, whatever is left in a session cgroup that was never closed. Processes
        of kept sessions are left alone."""
        spare = frozenset(os.fsencode(k) for k in keep)
        await trio.to_thread.run_sync(_reap_marked, os.fsencode(session_prefix), spare)
        roots = [r for sid, r in self._opened if sid.startswith(session_prefix) and sid not in keep]
        if roots:
            await trio.to_thread.run_sync(_kill_matching, lambda pid: _cwd_inside(pid, roots))
        parent = cgroup_parent()
        if parent is not None and roots:  # this driver's sessions that were never closed (not kept)
            paths = [os.path.join(parent, _cgroup_name(root)) for root in roots]
            await trio.to_thread.run_sync(_kill_cgroups, paths)

    async def close_session(self, session_id: str) -> None:
        """Kill the leftover processes of a crashed session (found by their ``ACX_SESSION_ID``
        marker, or a cwd inside the session directory) and remove its directory."""
        roots = await trio.to_thread.run_sync(_session_dirs, self._parent(), session_id)
        parent = cgroup_parent()
        if parent is not None:
            for root in roots:
                await trio.to_thread.run_sync(_kill_cgroup, os.path.join(parent, _cgroup_name(root)))
        killed = await trio.to_thread.run_sync(_reap, session_id, roots)
        if not roots and not killed:
            raise DriverError(f"no host_process session with id {session_id!r}", code="session_not_found")
        for root in roots:
            await trio.to_thread.run_sync(functools.partial(shutil.rmtree, root, ignore_errors=True))
            with contextlib.suppress(OSError):
                os.unlink(_kept_marker(root))


def _is_real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _session_id_of(dir_name: str) -> str | None:
    """The id ``close_session`` takes for a directory ``acx-<id>-<8 chars>``: the session id when
    the name holds it whole (ids acx generates always do), else its hashed form."""
    match = _SESSION_DIR.fullmatch(dir_name)
    if match is None:
        return None
    candidate = match.group(1)
    return candidate if safe_name(candidate) == candidate else None


def _prefix(session_id: str) -> str:
    return f"acx-{safe_name(session_id)}-"
