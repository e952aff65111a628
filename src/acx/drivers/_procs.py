"""Process helpers the host drivers share (``host_process``, ``bwrap``): starting a command in its
own session, watching it (its output pipes, the rest of its stdin, its exit), killing its process
group, and the directory-name form of a session id.

A documented seam inside ``acx.drivers`` (docs/architecture.md): ``bwrap`` runs its commands through
these, so both drivers keep one exec contract (exit codes, output caps, timeouts, process-group
kills). Nothing here knows about sessions or containment.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import trio

try:  # built at install time when a C compiler is there (setup.py); optional
    from acx.drivers import _cspawn
except ImportError:  # pragma: no cover - depends on the install
    _cspawn = None

T = TypeVar("T")

#: Whether :func:`spawn` can start a command straight into a cgroup (``_cspawn`` is built).
FAST_SPAWN = _cspawn is not None

__all__ = [
    "FAST_SPAWN",
    "PIPE_BUF",
    "Capture",
    "Child",
    "Command",
    "Offload",
    "Proc",
    "close_fds",
    "closed",
    "group_alive",
    "pidfd_of",
    "prefill",
    "resolve",
    "safe_name",
    "signal_group",
    "spawn",
    "wait_exit",
]

_READ_CHUNK = 65536
_DRAIN_SECONDS = 2.0
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{0,40}")


class Capture:
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


class Command:
    """A started command, watched from the exec task alone: its output pipes, the rest of its
    stdin, its exit (a pidfd where there is one, else polling)."""

    def __init__(self, proc: Proc, out_r: int, err_r: int, in_w: int, rest: memoryview | None, limit: int) -> None:
        self.proc = proc
        self.pidfd = pidfd_of(proc.pid)
        self.out, self.err = Capture(limit), Capture(limit)
        self.readers = {out_r: self.out, err_r: self.err}
        self.in_w = in_w
        self.rest = rest
        self.exited = False

    def _on_exit(self, scope: trio.CancelScope) -> None:
        self.exited = True
        if self.readers or self.in_w >= 0:
            # Output still held open by a background child must not hang exec(): give the pipes a
            # moment to drain, then the group is killed.
            scope.deadline = min(scope.deadline, trio.current_time() + _DRAIN_SECONDS)

    async def watch(self, scope: trio.CancelScope) -> None:
        """Read both pipes, feed stdin, notice the exit; return when all are done."""
        if not _EPOLL:
            await self._watch_with_tasks(scope)
            return
        # One private epoll set for the command's descriptors, itself waited on through trio: a
        # single task and (usually) a single wake-up per command, instead of a nursery, a reader
        # task per pipe and a trio registration per descriptor.
        ep = select.epoll(4)
        try:
            for fd in self.readers:
                ep.register(fd, _IN_ONCE)
            if self.pidfd >= 0:
                ep.register(self.pidfd, _IN_ONCE)
            if self.in_w >= 0:
                ep.register(self.in_w, _OUT_ONCE)
            epfd = ep.fileno()
            delay = 0.001
            while self.readers or self.in_w >= 0 or not self.exited:
                if self.pidfd < 0 and not self.exited:  # no pidfd: poll for the exit
                    with trio.move_on_after(delay):
                        await trio.lowlevel.wait_readable(epfd)
                    delay = min(delay * 2, 0.05)
                    if self.proc.poll() is not None:
                        self._on_exit(scope)
                else:
                    await trio.lowlevel.wait_readable(epfd)
                for fd, events in ep.poll(0, 4):  # 4: not the default 1023-entry buffer per call
                    if fd == self.pidfd:
                        self.proc.wait()  # it has exited: returns at once
                        self._on_exit(scope)
                    elif fd == self.in_w:
                        self._feed(ep)
                    else:
                        self._read(ep, fd, events)
        finally:
            ep.close()

    def _read(self, ep: select.epoll, fd: int, events: int) -> None:
        capture = self.readers[fd]
        if events & _GONE:
            # No writer is left: what the pipe holds, then EOF, can be read now without blocking.
            while data := os.read(fd, _READ_CHUNK):
                capture.feed(data)
            del self.readers[fd]
            return
        # Readable: a read of this blocking descriptor returns at once.
        data = os.read(fd, _READ_CHUNK)
        if data:
            capture.feed(data)
            ep.modify(fd, _IN_ONCE)
        else:
            del self.readers[fd]

    def _feed(self, ep: select.epoll | None) -> None:
        """Write the next piece of stdin; at the end (or EPIPE) close the pipe: EOF."""
        assert self.rest is not None
        try:
            self.rest = self.rest[os.write(self.in_w, self.rest[:_READ_CHUNK]) :]
        except BlockingIOError:
            pass
        except OSError:  # EPIPE: the command exited or closed its stdin, not an error
            self.rest = self.rest[:0]
        if self.rest:
            if ep is not None:
                ep.modify(self.in_w, _OUT_ONCE)
            return
        if ep is not None:
            ep.unregister(self.in_w)
        self.in_w = closed(self.in_w)

    async def _watch_with_tasks(self, scope: trio.CancelScope) -> None:
        """The same without epoll: a task per pipe, the exit polled (or waited on a pidfd)."""

        async def pump(fd: int, capture: Capture) -> None:
            while True:
                await trio.lowlevel.wait_readable(fd)
                data = os.read(fd, _READ_CHUNK)  # readable: returns at once
                if not data:
                    break
                capture.feed(data)
            del self.readers[fd]

        async def feed() -> None:
            while self.in_w >= 0:
                await trio.lowlevel.wait_writable(self.in_w)
                self._feed(None)

        async with trio.open_nursery() as nursery:
            for fd, capture in list(self.readers.items()):
                nursery.start_soon(pump, fd, capture)
            if self.in_w >= 0:
                nursery.start_soon(feed)
            await wait_exit(self.proc, self.pidfd)
            self._on_exit(scope)


class Proc(Protocol):
    """A started command: a :class:`subprocess.Popen` or a :class:`Child` (what the drivers use of it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class Child:
    """A command started by :func:`spawn` through ``_cspawn``: its pid and, once reaped, its exit
    code as subprocess reports it (negative: killed by that signal)."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): as subprocess says, 0
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = 0
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def spawn(
    argv: list[str],
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: str,
    env: dict[bytes, bytes],
    cgroup_procs: str | None = None,
) -> Proc:
    """Start a command in its own session (``setsid``): its process group is ours to kill.

    ``cgroup_procs``: the ``cgroup.procs`` file of the cgroup the command must start in; only with
    :data:`FAST_SPAWN` (without it, callers wrap the command in a joining shell). ``stdin`` -3
    (``subprocess.DEVNULL``): /dev/null. Raises OSError as subprocess does: FileNotFoundError for a
    missing program or ``cwd``, PermissionError for one that cannot be executed; an error whose
    ``filename`` is ``cgroup_procs`` means the command could not join the cgroup (nothing ran).
    """
    if _cspawn is None:
        if cgroup_procs is not None:
            raise ValueError("spawn(cgroup_procs=...) needs acx.drivers._cspawn")
        return subprocess.Popen(
            argv,
            executable=resolve(argv[0], env.get(b"PATH")),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    name = argv[0]
    exe = name if "/" in name else resolve(name, env.get(b"PATH"))
    if exe is None:
        raise _not_found(name, env.get(b"PATH"))
    entries = []
    for key, value in env.items():
        if b"=" in key:  # as subprocess refuses it: the entry would mean another variable
            raise ValueError(f"illegal environment variable name {key!r}")
        entries.append(key + b"=" + value)
    pid = _cspawn.spawn(
        os.fsencode(exe),
        [os.fsencode(a) for a in argv],
        entries,
        os.fsencode(cwd),
        -1 if stdin == subprocess.DEVNULL else stdin,
        stdout,
        stderr,
        None if cgroup_procs is None else os.fsencode(cgroup_procs),
    )
    return Child(pid)


def _not_found(name: str, path: bytes | None) -> OSError:
    """What an exec-per-PATH-entry search reports for ``name`` that :func:`resolve` did not find:
    EACCES when a non-executable file of that name is on the PATH, else ENOENT (as subprocess)."""
    for entry in os.fsdecode(path if path is not None else os.fsencode(os.defpath)).split(os.pathsep):
        candidate = os.path.join(entry or ".", name)
        if os.path.exists(candidate):
            return PermissionError(errno.EACCES, os.strerror(errno.EACCES), candidate)
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)


_RESOLVED: dict[tuple[str, bytes | None], str] = {}


def resolve(name: str, path: bytes | None) -> str | None:
    """``name`` looked up in the command's PATH once, then remembered (subprocess would build the
    candidate list for every spawn); None leaves the lookup — and its error — to subprocess."""
    if "/" in name:
        return None
    key = (name, path)
    found = _RESOLVED.get(key)
    if found is None:
        found = shutil.which(name, path=os.fsdecode(path) if path is not None else os.defpath)
        if found is None or not os.path.isabs(found):
            return None
        _RESOLVED[key] = found
    return found


def prefill(fd: int, data: bytes) -> memoryview | None:
    """Write what fits of ``data`` into the fresh, empty, non-blocking stdin pipe ``fd``.

    A prompt usually fits in the pipe buffer (64 KiB on Linux): it is written before the command
    starts, the pipe is closed, and nothing is left to feed. Returns what did not fit, or None.
    """
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view[:_READ_CHUNK]) :]
    except BlockingIOError:
        return view
    return None


def closed(fd: int) -> int:
    os.close(fd)
    return -1


def close_fds(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group; False when nothing (of ours) is left in it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):  # PermissionError: not ours any more
        return False
    return True


def group_alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


_EPOLL = hasattr(select, "epoll")
_IN_ONCE = getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLONESHOT", 0)
_OUT_ONCE = getattr(select, "EPOLLOUT", 0) | getattr(select, "EPOLLONESHOT", 0)
_GONE = getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)
_PIDFD = hasattr(os, "pidfd_open")
PIPE_BUF = getattr(select, "PIPE_BUF", 512)


def pidfd_of(pid: int) -> int:
    """A pidfd for ``pid`` (readable once it exits), or -1 where there is none (then: polling)."""
    global _PIDFD
    if _PIDFD:
        try:
            return os.pidfd_open(pid)
        except OSError:  # an old kernel, or a sandbox that forbids it: poll from now on
            _PIDFD = False
    return -1


async def wait_exit(proc: Proc, pidfd: int) -> None:
    """Wait (without blocking trio) until ``proc`` exits, and reap it."""
    if pidfd >= 0:
        await trio.lowlevel.wait_readable(pidfd)
        proc.wait()  # it has exited: returns at once
        return
    delay = 0.001
    while proc.poll() is None:
        await trio.sleep(delay)
        delay = min(delay * 2, 0.05)


class Offload:
    """Runs one kind of blocking call (a spawn, a session directory's mkdir or rmdir) inline on the
    trio thread while such calls are quick, in a worker thread while they are slow.

    Inline, a call blocks every task of the run for as long as it takes. A worker-thread hop costs
    CPU whatever the call — GIL hand-offs, a thread wake-up, trio's wake-up — measured at 0.5-1 ms
    of CPU per task for four hops on the development VM (bench/run_overhead.py). A quiet machine
    spawns or removes a directory in well under a millisecond; a busy one makes a vfork wait for
    the child to be scheduled and an rmdir for the filesystem's journal, for milliseconds. So the
    choice follows a moving average of the call's inline duration. Durations in a worker thread
    would include waiting for the GIL; instead every ``PROBE``-th call of a slow period runs
    inline, to notice when the machine is quiet again.
    """

    __slots__ = ("average", "skipped", "threshold")

    #: Weight of the newest inline duration in the moving average.
    ALPHA = 0.2
    #: While slow, one call in this many still runs inline (a fresh sample).
    PROBE = 8

    def __init__(self, threshold: float = 0.001) -> None:
        self.threshold = threshold
        self.average = 0.0
        self.skipped = 0

    @property
    def inline(self) -> bool:
        return self.average < self.threshold

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, inline or in a worker thread (not cancellable there: it always completes)."""
        if not self.inline and self.skipped < self.PROBE - 1:
            self.skipped += 1
            return await trio.to_thread.run_sync(fn, *args)
        self.skipped = 0
        await trio.lowlevel.checkpoint()
        start = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.average += self.ALPHA * (time.perf_counter() - start - self.average)


def safe_name(text: str) -> str:
    """``text`` as a directory-name part; an id that had to be changed (cut at 40 characters, or
    characters replaced) gets a hash of the whole id, so two ids never share a directory prefix."""
    if _SAFE_ID.fullmatch(text):
        return text
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in text)[:29]
    return f"{safe}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
