"""An in-memory fake driver for interpreter unit tests (and the conformance suite's self-test).

Nothing touches the host: files live in a dict, "processes" are trio tasks in a process table,
and commands are interpreted by a tiny POSIX-sh subset (``;``, ``&&``, ``||``, ``&``, ``>``,
``>>``, ``N>&M``, ``$VAR``, ``$$``, ``$!``, ``$?``) with the built-ins the conformance suite
uses: ``echo printf pwd cd printenv env cat head mkdir rm chmod sleep exit true false trap kill wait
exec sh``. Scripts written to the fake filesystem with ``#!/bin/sh`` run through the same interpreter.

Tests add their own programs with ``FakeDriver(programs={"agent": fn})``: ``fn(proc, args)`` is
an async function that reads ``proc.stdin``, writes with ``proc.write_out``/``write_err``, may use
``proc.session`` (files) and returns an exit code. Failures are injected with ``fail_open``.
Because sleeping is ``trio.sleep``, everything runs on ``trio.testing.MockClock``.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import trio

from acx.drivers._base import Driver, ExecResult, OpenRequest, Session
from acx.drivers._specs import DriverCapabilities, EnvironmentConfig
from acx.errors import CapabilityError, DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy

__all__ = ["FakeConfig", "FakeDriver", "FakeProcess", "FakeSession"]

Program = Callable[["FakeProcess", list[str]], Awaitable[int]]

_PIDS = itertools.count(1000)
_VAR = re.compile(r"\$(\$|!|\?|\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")
_OPS = {";", "&&", "||", "&", "\n"}


class FakeConfig(EnvironmentConfig, frozen=True):
    """Fake driver params (tests only)."""

    workdir: str = "/work"


@dataclass
class FakeProcess:
    """One running fake command: its streams, env, cwd and place in the process table."""

    session: FakeSession
    pid: int
    pgid: int
    env: dict[str, str]
    cwd: str
    stdin: bytes = b""
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    last_bg: int | None = None
    last_rc: int = 0
    ignore_term: bool = False
    jobs: list[tuple[int, trio.Event]] = field(default_factory=list)
    nursery: Any = None

    def write_out(self, data: str | bytes) -> None:
        self.out += data.encode() if isinstance(data, str) else data

    def write_err(self, data: str | bytes) -> None:
        self.err += data.encode() if isinstance(data, str) else data


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class FakeSession(Session):
    def __init__(self, driver: FakeDriver, request: OpenRequest, workdir: str) -> None:
        super().__init__(session_id=request.session_id, workdir=workdir, public_env=request.startup_env)
        self.driver = driver
        self.request = request
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}
        self.dirs: set[str] = {"/", workdir}
        self.alive: dict[int, int] = {}  # pid → pgid of live fake processes
        self.policy = request.network_policy
        self.exec_log: list[tuple[list[str], dict[str, str], str | None]] = []
        self._mkdirs(workdir)

    # ---- paths -------------------------------------------------------------------------------
    def abspath(self, path: str, cwd: str | None = None) -> str:
        base = cwd or self.workdir or "/"
        return posixpath.normpath(posixpath.join(base, path))

    def _mkdirs(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(len(parts) + 1):
            self.dirs.add("/" + "/".join(parts[:i]) if i else "/")

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
        wd = self.abspath(cwd) if cwd is not None else (self.workdir or "/")
        if wd not in self.dirs:
            raise DriverError(f"working directory {wd} does not exist in session {self.id}")
        self.exec_log.append((list(argv), dict(env), cwd))
        pid = next(_PIDS)
        proc = FakeProcess(self, pid, pid, dict(env), wd, stdin or b"")
        self.alive[pid] = pid
        code = 0
        deadline = trio.move_on_after(timeout) if timeout is not None else trio.CancelScope()
        try:
            with deadline:
                async with trio.open_nursery() as nursery:
                    proc.nursery = nursery
                    code = await self.run_argv(proc, argv)
                    nursery.cancel_scope.cancel()  # background jobs die with the command
        finally:
            for p, g in list(self.alive.items()):
                if g == pid:
                    del self.alive[p]
        timed_out = deadline.cancelled_caught
        out, err = bytes(proc.out), bytes(proc.err)
        truncated = len(out) > max_output_bytes or len(err) > max_output_bytes
        return ExecResult(
            returncode=124 if timed_out else code,
            stdout=out[:max_output_bytes].decode("utf-8", errors="replace"),
            stderr=err[:max_output_bytes].decode("utf-8", errors="replace"),
            timed_out=timed_out,
            output_truncated=truncated,
        )

    async def run_argv(self, proc: FakeProcess, argv: list[str]) -> int:
        name, args = argv[0], argv[1:]
        program = self.driver.programs.get(name) or self.driver.programs.get(posixpath.basename(name))
        if program is not None:
            return await program(proc, args)
        base = posixpath.basename(name)
        builtin = _BUILTINS.get(base)
        if builtin is not None and name in (base, f"/bin/{base}", f"/usr/bin/{base}"):
            try:
                return await builtin(proc, args)
            except _Exit as exc:
                return exc.code
        path = self.abspath(name, proc.cwd)
        if "/" in name and path in self.files:
            if not self.modes.get(path, 0) & 0o111:
                proc.write_err(f"{name}: Permission denied\n")
                return 126
            text = self.files[path].decode("utf-8", errors="replace")
            if text.startswith("#!") and "sh" in text.splitlines()[0]:
                return await _run_script(proc, text.split("\n", 1)[1] if "\n" in text else "")
            return 126
        proc.write_err(f"{name}: not found\n")
        return 127

    # ---- files -------------------------------------------------------------------------------
    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        p = self.abspath(path)
        self._mkdirs(posixpath.dirname(p))
        self.files[p] = bytes(data)
        self.modes[p] = mode
        await trio.lowlevel.checkpoint()

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        p = self.abspath(path)
        if p not in self.files:
            raise FileNotFoundError(path)
        data = self.files[p]
        if max_bytes is not None and len(data) > max_bytes:
            raise DriverError(f"{path} is larger than the {max_bytes}-byte limit")
        return data

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        src = Path(local_dir)
        if not src.is_dir():
            raise FileNotFoundError(local_dir)
        dst = self.abspath(remote_dir)
        self._mkdirs(dst)
        for p in sorted(src.rglob("*")):
            rel = p.relative_to(src).as_posix()
            if p.is_dir():
                self._mkdirs(posixpath.join(dst, rel))
            else:
                await self.write_bytes(posixpath.join(dst, rel), p.read_bytes(), mode=p.stat().st_mode & 0o777)

    async def download_dir(self, remote_dir: str, local_dir: str) -> None:
        src = self.abspath(remote_dir)
        if src not in self.dirs:
            raise FileNotFoundError(remote_dir)
        out = Path(local_dir)
        out.mkdir(parents=True, exist_ok=True)
        prefix = src.rstrip("/") + "/"
        for d in self.dirs:
            if d.startswith(prefix):
                (out / d[len(prefix) :]).mkdir(parents=True, exist_ok=True)
        for f, data in self.files.items():
            if f.startswith(prefix):
                target = out / f[len(prefix) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        await trio.lowlevel.checkpoint()

    async def is_file(self, path: str) -> bool:
        return self.abspath(path) in self.files

    async def is_dir(self, path: str) -> bool:
        return self.abspath(path) in self.dirs

    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        if not self.driver.dynamic_network:
            await super().set_network_policy(policy)
        self.driver.policy_log.append((self.id, policy.network_mode))
        self.policy = policy

    async def _close(self) -> None:
        self.alive.clear()
        self.driver.closed.append(self.id)
        await trio.lowlevel.checkpoint()


class FakeDriver(Driver):
    """In-memory driver. Records opened/closed sessions and network-policy switches."""

    id: ClassVar[str] = "fake"
    config_class = FakeConfig

    def __init__(
        self,
        config: EnvironmentConfig | None = None,
        *,
        programs: Mapping[str, Program] | None = None,
        network_modes: tuple[str, ...] = ("public", "no-network", "allowlist"),
        dynamic_network: bool = True,
        fail_open: int = 0,
        open_delay: float = 0.0,
    ) -> None:
        super().__init__(config)
        self.programs: dict[str, Program] = dict(programs or {})
        self.network_modes = network_modes
        self.dynamic_network = dynamic_network
        self.fail_open = fail_open
        self.open_delay = open_delay
        self.opened: list[OpenRequest] = []
        self.sessions: dict[str, FakeSession] = {}
        self.closed: list[str] = []
        self.policy_log: list[tuple[str, str]] = []

    def capabilities(self) -> DriverCapabilities:
        return DriverCapabilities(
            network_modes=self.network_modes,
            dynamic_network_policy=self.dynamic_network,
            task_env=True,
            startup_env=True,
            isolated_filesystem=True,
            setup_image=True,
        )

    async def open(self, request: OpenRequest) -> Session:
        if self.open_delay:
            await trio.sleep(self.open_delay)
        if request.network_policy.network_mode not in self.network_modes:
            raise CapabilityError(f"fake driver cannot enforce {request.network_policy.network_mode}")
        if self.fail_open > 0:
            self.fail_open -= 1
            raise EnvironmentSetupError("fake driver: injected open failure")
        self.opened.append(request)
        config = self.config
        workdir = request.setup.workdir or (config.workdir if isinstance(config, FakeConfig) else "/work")
        session = FakeSession(self, request, workdir)
        self.sessions[request.session_id] = session
        return session

    def live_sessions(self) -> list[str]:
        return [sid for sid in self.sessions if sid not in self.closed]


# ---- the mini shell ------------------------------------------------------------------------


def _expand(proc: FakeProcess, word: str) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1).strip("{}")
        if name == "$":
            return str(proc.pid)
        if name == "!":
            return str(proc.last_bg or "")
        if name == "?":
            return str(proc.last_rc)
        return proc.env.get(name, "")

    return _VAR.sub(repl, word)


def _split(script: str) -> list[tuple[list[str], str]]:
    """Simple commands with the operator that ends each (``;``, ``&&``, ``||``, ``&``)."""
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[tuple[list[str], str]] = []
    cur: list[str] = []
    for tok in lexer:
        if tok in _OPS:
            if cur:
                out.append((cur, tok))
            cur = []
        else:
            cur.append(tok)
    if cur:
        out.append((cur, ";"))
    return out


async def _run_script(proc: FakeProcess, script: str) -> int:
    rc = 0
    skip_next = False
    for words, op in _split(script):
        if skip_next:
            skip_next = (op == "&&" and rc != 0) or (op == "||" and rc == 0)
            continue
        if op == "&":
            await _background(proc, words)
            rc = 0
        else:
            try:
                rc = await _simple(proc, words)
            except _Exit as exc:
                proc.last_rc = exc.code
                return exc.code
        proc.last_rc = rc
        skip_next = (op == "&&" and rc != 0) or (op == "||" and rc == 0)
    return rc


async def _background(proc: FakeProcess, words: list[str]) -> None:
    child = FakeProcess(proc.session, next(_PIDS), proc.pgid, dict(proc.env), proc.cwd)
    child.ignore_term, child.nursery = proc.ignore_term, proc.nursery
    proc.session.alive[child.pid] = proc.pgid
    done = trio.Event()
    proc.last_bg = child.pid
    proc.jobs.append((child.pid, done))

    async def job() -> None:
        try:
            await _simple(child, words)
        except _Exit:
            pass
        finally:
            proc.session.alive.pop(child.pid, None)
            proc.out += child.out
            proc.err += child.err
            done.set()

    proc.nursery.start_soon(job)
    await trio.lowlevel.checkpoint()


async def _simple(proc: FakeProcess, words: list[str]) -> int:
    argv: list[str] = []
    raw: list[str] = []
    redirects: list[tuple[int, str, str]] = []  # (fd, op, target)
    i = 0
    while i < len(words):
        w = words[i]
        if w in (">", ">>", ">&", "<"):
            fd = 1
            # shlex loses adjacency: a lone single digit before `>` is taken as the fd (2>&1).
            if raw and raw[-1] in ("0", "1", "2") and w != "<":
                fd = int(raw.pop())
                argv.pop()
            target = words[i + 1] if i + 1 < len(words) else ""
            redirects.append((fd, w, _expand(proc, target)))
            i += 2
            continue
        raw.append(w)
        argv.append(_expand(proc, w))
        i += 1
    if not argv:
        return 0
    sub = FakeProcess(proc.session, proc.pid, proc.pgid, proc.env, proc.cwd, proc.stdin)
    sub.nursery = proc.nursery
    sub.last_bg, sub.last_rc, sub.ignore_term, sub.jobs = (
        proc.last_bg,
        proc.last_rc,
        proc.ignore_term,
        proc.jobs,
    )
    for _fd, op, target in redirects:
        if op == "<":
            sub.stdin = await proc.session.read_bytes(proc.session.abspath(target, proc.cwd))
    try:
        rc = await proc.session.run_argv(sub, argv)
    finally:
        proc.last_bg, proc.ignore_term, proc.cwd = sub.last_bg, sub.ignore_term, sub.cwd
        await _apply_redirects(proc, sub, redirects)
    return rc


async def _apply_redirects(proc: FakeProcess, sub: FakeProcess, redirects: list[tuple[int, str, str]]) -> None:
    streams = {1: bytes(sub.out), 2: bytes(sub.err)}
    dest: dict[int, str] = {1: "out", 2: "err"}
    for fd, op, target in redirects:
        if op == ">&" and target in ("1", "2"):
            dest[fd] = "out" if target == "1" else "err"
        elif op in (">", ">>"):
            dest[fd] = "file:" + op + target
    for fd, data in streams.items():
        where = dest[fd]
        if where == "out":
            proc.out += data
        elif where == "err":
            proc.err += data
        else:
            append = where.startswith("file:>>")
            path = where[len("file:>>") :] if append else where[len("file:>") :]
            if path == "/dev/null":
                continue
            full = proc.session.abspath(path, proc.cwd)
            old = proc.session.files.get(full, b"") if append else b""
            await proc.session.write_bytes(full, old + data)


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n in "01234567":
                j = i + 1
                while j < len(text) and j < i + 5 and text[j] in "01234567":
                    j += 1
                out.append(chr(int(text[i + 1 : j], 8)))
                i = j
                continue
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(n, "\\" + n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


async def _echo(proc: FakeProcess, args: list[str]) -> int:
    proc.write_out(" ".join(args) + "\n")
    return 0


async def _printf(proc: FakeProcess, args: list[str]) -> int:
    if not args:
        return 1
    fmt, rest = _unescape(args[0]), args[1:]
    proc.write_out(fmt.replace("%s", "{}").format(*rest) if "%s" in fmt else fmt)
    return 0


async def _pwd(proc: FakeProcess, args: list[str]) -> int:
    proc.write_out(proc.cwd + "\n")
    return 0


async def _cd(proc: FakeProcess, args: list[str]) -> int:
    target = proc.session.abspath(args[0] if args else "/", proc.cwd)
    if target not in proc.session.dirs:
        proc.write_err(f"cd: {target}: No such file or directory\n")
        return 1
    proc.cwd = target
    return 0


async def _printenv(proc: FakeProcess, args: list[str]) -> int:
    if not args:
        proc.write_out("".join(f"{k}={v}\n" for k, v in sorted(proc.env.items())))
        return 0
    if args[0] not in proc.env:
        return 1
    proc.write_out(proc.env[args[0]] + "\n")
    return 0


async def _cat(proc: FakeProcess, args: list[str]) -> int:
    if not args:
        proc.write_out(proc.stdin)
        return 0
    for a in args:
        p = proc.session.abspath(a, proc.cwd)
        if p not in proc.session.files:
            proc.write_err(f"cat: {a}: No such file or directory\n")
            return 1
        proc.write_out(proc.session.files[p])
    return 0


async def _head(proc: FakeProcess, args: list[str]) -> int:
    if len(args) >= 2 and args[0] == "-c":
        n = int(args[1])
        src = args[2] if len(args) > 2 else None
        if src == "/dev/zero":
            proc.write_out(b"\x00" * n)
            return 0
        data = proc.stdin if src is None else await proc.session.read_bytes(proc.session.abspath(src, proc.cwd))
        proc.write_out(data[:n])
        return 0
    proc.write_err("head: only -c N is supported by the fake driver\n")
    return 2


async def _mkdir(proc: FakeProcess, args: list[str]) -> int:
    for a in args:
        if a != "-p":
            proc.session._mkdirs(proc.session.abspath(a, proc.cwd))
    return 0


async def _rm(proc: FakeProcess, args: list[str]) -> int:
    session = proc.session
    for a in args:
        if a.startswith("-"):
            continue
        target = session.abspath(a, proc.cwd)
        prefix = target.rstrip("/") + "/"
        session.files = {f: d for f, d in session.files.items() if f != target and not f.startswith(prefix)}
        session.dirs = {d for d in session.dirs if d != target and not d.startswith(prefix)} | {"/"}
    return 0


async def _chmod(proc: FakeProcess, args: list[str]) -> int:
    return 0


async def _sleep(proc: FakeProcess, args: list[str]) -> int:
    await trio.sleep(float(args[0]) if args else 0)
    return 0


async def _exit(proc: FakeProcess, args: list[str]) -> int:
    raise _Exit(int(args[0]) if args else proc.last_rc)


async def _true(proc: FakeProcess, args: list[str]) -> int:
    return 0


async def _false(proc: FakeProcess, args: list[str]) -> int:
    return 1


async def _trap(proc: FakeProcess, args: list[str]) -> int:
    if len(args) >= 2 and args[0] == "" and "TERM" in args[1:]:
        proc.ignore_term = True
    return 0


async def _kill(proc: FakeProcess, args: list[str]) -> int:
    if args and args[0] == "-0":
        pids = [int(a) for a in args[1:]]
        return 0 if pids and all(p in proc.session.alive for p in pids) else 1
    proc.write_err("kill: only -0 is supported by the fake driver\n")
    return 2


async def _wait(proc: FakeProcess, args: list[str]) -> int:
    for _, done in list(proc.jobs):
        await done.wait()
    return 0


async def _exec_builtin(proc: FakeProcess, args: list[str]) -> int:
    rc = await proc.session.run_argv(proc, args) if args else 0
    raise _Exit(rc)


async def _sh(proc: FakeProcess, args: list[str]) -> int:
    if len(args) >= 2 and args[0] == "-c":
        return await _run_script(proc, args[1])
    proc.write_err("sh: only `sh -c SCRIPT` is supported by the fake driver\n")
    return 2


_BUILTINS: dict[str, Program] = {
    "echo": _echo,
    "printf": _printf,
    "pwd": _pwd,
    "cd": _cd,
    "printenv": _printenv,
    "env": _printenv,
    "cat": _cat,
    "head": _head,
    "mkdir": _mkdir,
    "rm": _rm,
    "chmod": _chmod,
    "sleep": _sleep,
    "exit": _exit,
    "true": _true,
    "false": _false,
    "trap": _trap,
    "kill": _kill,
    "wait": _wait,
    "exec": _exec_builtin,
    "sh": _sh,
    "bash": _sh,
}
