"""The driver conformance suite: the same contract checks against any :class:`acx.drivers.Driver`.

Every check opens a fresh session from a driver factory, runs, and closes the session. Use it from
pytest::

    import pytest
    from acx.testing import driver_conformance as dc

    @pytest.mark.parametrize("check", dc.CHECKS, ids=dc.check_id)
    def test_my_driver(check, tmp_path):
        dc.run_check(check, lambda: MyDriver(MyConfig(...)), scratch=tmp_path)

A check is an ``async`` function ``(session, ctx) -> None`` that raises ``AssertionError`` on a
contract violation. The checks cover: exec semantics and argv vs shell (E2), exit codes, missing
executables, stdout/stderr separation, stdin, output caps, timeouts that kill the whole process
group (children and commands ignoring SIGTERM included, T3), cancellation that kills the command,
cwd/workdir rules (H5), environment precedence and stage scopes (V2), file and directory transfer
round trips with binary data and hidden files, missing paths, closed sessions — and the hooks the
interpreter and components call: ``download_tree`` (with ``supports_limited_download``: excludes and
limits enforced while copying), ``kill_stray_processes``, ``prepare``, and for drivers with
``sessions_discoverable`` the ``list_sessions`` / ``close_session`` round trip.

Commands used are POSIX ``sh`` and coreutils basics (echo, printf, printenv, pwd, cat, head,
mkdir, sleep, kill), so the suite runs on any Linux sandbox.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHECKS", "Check", "CheckContext", "check_id", "run_check", "run_check_async"]

PUBLIC_VAR = "ACX_CONF_PUBLIC"


@dataclass
class CheckContext:
    """What a check may use besides the session: a host scratch directory, the open request."""

    scratch: Path
    open_request: Any
    extra: dict[str, Any] = field(default_factory=dict)
    #: The driver that opened the session (for driver-level checks).
    driver: Any = None


CheckFn = Callable[[Any, CheckContext], Awaitable[None]]


@dataclass(frozen=True)
class Check:
    name: str
    fn: CheckFn
    doc: str


CHECKS: list[Check] = []


def check(fn: CheckFn) -> CheckFn:
    CHECKS.append(Check(fn.__name__.removeprefix("check_"), fn, (fn.__doc__ or "").strip()))
    return fn


def check_id(c: Check) -> str:
    return c.name


async def run_check_async(c: Check, driver_factory: Callable[[], Any], *, scratch: Path) -> None:
    from acx.drivers import OpenRequest

    driver = driver_factory()
    run_id = f"conf{uuid.uuid4().hex[:10]}"
    request = OpenRequest(
        # `<run id>-…` and the acx.run_id label: how the interpreter names sessions (crash recovery)
        session_id=f"{run_id}-{uuid.uuid4().hex[:6]}",
        labels={"acx.conformance": c.name, "acx.run_id": run_id},
        startup_env={PUBLIC_VAR: "public-value"},
    )
    session = await driver.open(request)
    ctx = CheckContext(scratch=Path(scratch), open_request=request, driver=driver)
    try:
        await c.fn(session, ctx)
    finally:
        import trio

        with trio.CancelScope(shield=True):
            await session.close()


def run_check(c: Check, driver_factory: Callable[[], Any], *, scratch: Path) -> None:
    """Run one check in a fresh trio loop (for synchronous pytest tests)."""
    import trio

    trio.run(lambda: run_check_async(c, driver_factory, scratch=scratch))


# ---- helpers -------------------------------------------------------------------------------


#: Start ``cmd`` in its own session (a daemon) and write its pid to ``out`` once it has left the
#: command's session — so the end of the exec() cannot kill it before setsid() ran.
DETACH = (
    "setsid {cmd} >/dev/null 2>&1 & p=$!; i=0; "
    "while [ $i -lt 50 ] && [ \"$(cut -d' ' -f6 /proc/$p/stat 2>/dev/null)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; "
    "do sleep 0.1; i=$((i+1)); done; echo $p > {out}"
)


async def _alive(session: Any, pid: str, *, polls: int = 40) -> bool:
    """Whether ``pid`` still exists in the sandbox (polls briefly: reaping is asynchronous)."""
    import trio

    for _ in range(polls):
        res = await session.exec(["sh", "-c", f"kill -0 {int(pid)} 2>/dev/null"])
        if res.returncode != 0:
            return False
        await trio.sleep(0.05)
    return True


def _workdir(session: Any) -> str:
    assert session.workdir, "a session must have a workdir (H5)"
    return str(session.workdir).rstrip("/")


# ---- exec semantics (E2) -------------------------------------------------------------------


@check
async def check_argv_exec(session: Any, ctx: CheckContext) -> None:
    """exec(argv) runs the program directly: stdout, returncode 0, no shell expansion."""
    res = await session.exec(["echo", "hello world"])
    assert res.returncode == 0 and not res.timed_out, res
    assert res.stdout == "hello world\n", res.stdout
    res = await session.exec(["printf", "%s", "$HOME * `x`"])
    assert res.stdout == "$HOME * `x`", "argv must not be shell-expanded"


@check
async def check_shell_exec(session: Any, ctx: CheckContext) -> None:
    """exec(str, shell=True) runs through sh: separate stdout/stderr, the script's exit code."""
    res = await session.exec("echo out; echo err 1>&2; exit 3", shell=True)
    assert res.returncode == 3, res
    assert res.stdout == "out\n" and res.stderr == "err\n", res
    assert not res.timed_out


@check
async def check_argv_shell_type_errors(session: Any, ctx: CheckContext) -> None:
    """A string without shell=True and a list with shell=True are type errors (E2)."""
    for args, kwargs in ((("echo hi",), {}), ((["echo", "hi"],), {"shell": True})):
        try:
            await session.exec(*args, **kwargs)
        except TypeError:
            continue
        raise AssertionError(f"exec{args} {kwargs} must raise TypeError")


@check
async def check_exit_codes(session: Any, ctx: CheckContext) -> None:
    """Non-zero exit codes come back unchanged; a missing executable is 127, not an exception."""
    res = await session.exec(["sh", "-c", "exit 7"])
    assert res.returncode == 7 and not res.ok
    res = await session.exec(["/nonexistent/acx-no-such-command"])
    assert res.returncode == 127, res


@check
async def check_stdin(session: Any, ctx: CheckContext) -> None:
    """stdin bytes reach the command; without stdin the command reads EOF at once."""
    payload = b"line one\nline two \xe2\x9c\x93\n"
    res = await session.exec(["cat"], stdin=payload)
    assert res.stdout.encode() == payload, res
    res = await session.exec(["cat"], timeout=10)
    assert res.stdout == "" and not res.timed_out


@check
async def check_output_cap(session: Any, ctx: CheckContext) -> None:
    """stdout beyond max_output_bytes is cut and flagged; the command still completes."""
    res = await session.exec(["head", "-c", "200000", "/dev/zero"], max_output_bytes=1000, timeout=30)
    assert res.returncode == 0 and not res.timed_out, res
    assert len(res.stdout.encode()) <= 1000 and res.output_truncated, len(res.stdout)
    res = await session.exec(["echo", "small"], max_output_bytes=1000)
    assert not res.output_truncated


# ---- timeouts and cancellation (T3) --------------------------------------------------------


@check
async def check_timeout_returns(session: Any, ctx: CheckContext) -> None:
    """A command past its timeout returns timed_out=True promptly (not after it would finish)."""
    import trio

    start = trio.current_time()
    res = await session.exec(["sleep", "30"], timeout=0.5)
    elapsed = trio.current_time() - start
    assert res.timed_out and not res.ok, res
    assert elapsed < 10, f"timeout took {elapsed:.1f}s"


@check
async def check_timeout_kills_process_group(session: Any, ctx: CheckContext) -> None:
    """A timed-out command that ignores SIGTERM and spawns children is gone after its deadline."""
    script = "trap '' TERM; sleep 60 & echo $! > bg.pid; echo $$ > sh.pid; wait"
    res = await session.exec(script, shell=True, timeout=1.0)
    assert res.timed_out, res
    for name in ("sh.pid", "bg.pid"):
        pid = (await session.read_text(name)).strip()
        assert pid, f"{name} empty"
        assert not await _alive(session, pid), f"process {pid} ({name}) survived the timeout"


@check
async def check_cancellation_kills(session: Any, ctx: CheckContext) -> None:
    """Cancelling the caller kills the command inside the sandbox, not just the coroutine."""
    import trio

    async def runner() -> None:
        await session.exec("echo $$ > cancel.pid; exec sleep 60", shell=True)

    pid = ""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner)
        with trio.fail_after(20):
            while not pid:
                await trio.sleep(0.05)
                if await session.is_file("cancel.pid"):
                    pid = (await session.read_text("cancel.pid")).strip()
        nursery.cancel_scope.cancel()
    assert not await _alive(session, pid), f"process {pid} survived cancellation"


# ---- cwd and workdir (H5) ------------------------------------------------------------------


@check
async def check_cwd_rules(session: Any, ctx: CheckContext) -> None:
    """No cwd → the session workdir; relative cwd → under the workdir; explicit cwd wins."""
    wd = _workdir(session)
    res = await session.exec(["pwd"])
    assert res.stdout.strip() == wd, (res.stdout, wd)
    assert (await session.exec(["mkdir", "-p", "sub/deeper"])).ok
    res = await session.exec(["pwd"], cwd="sub")
    assert res.stdout.strip() == f"{wd}/sub", res.stdout
    res = await session.exec(["pwd"], cwd=f"{wd}/sub/deeper")
    assert res.stdout.strip() == f"{wd}/sub/deeper", res.stdout


@check
async def check_missing_cwd(session: Any, ctx: CheckContext) -> None:
    """A cwd that does not exist is a DriverError, not a silent fallback to another directory."""
    from acx.errors import DriverError

    try:
        await session.exec(["pwd"], cwd="does/not/exist")
    except DriverError:
        return
    raise AssertionError("exec with a missing cwd must raise DriverError")


# ---- environment (V2) ----------------------------------------------------------------------


@check
async def check_env_precedence(session: Any, ctx: CheckContext) -> None:
    """public vars < exec(env=...) < the current stage scope."""
    res = await session.exec(["printenv", PUBLIC_VAR])
    assert res.stdout == "public-value\n", res
    res = await session.exec(["printenv", PUBLIC_VAR], env={PUBLIC_VAR: "exec-value"})
    assert res.stdout == "exec-value\n", res
    with session.env_scope({PUBLIC_VAR: "scope-value"}):
        res = await session.exec(["printenv", PUBLIC_VAR], env={PUBLIC_VAR: "exec-value"})
        assert res.stdout == "scope-value\n", res
    res = await session.exec(["printenv", PUBLIC_VAR])
    assert res.stdout == "public-value\n", "scope must be restored on exit"


@check
async def check_env_scope_isolation(session: Any, ctx: CheckContext) -> None:
    """Scopes are isolated per async context and restored after failure and cancellation."""
    import trio

    seen: dict[str, str] = {}

    async def in_scope(value: str) -> None:
        with session.env_scope({"ACX_CONF_STAGE": value}):
            await trio.sleep(0.05)
            res = await session.exec(["printenv", "ACX_CONF_STAGE"])
            seen[value] = res.stdout.strip()

    async with trio.open_nursery() as nursery:
        for value in ("run", "evaluate"):
            nursery.start_soon(in_scope, value)
    assert seen == {"run": "run", "evaluate": "evaluate"}, seen
    try:
        with session.env_scope({"ACX_CONF_STAGE": "boom"}):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    with trio.move_on_after(0.01):
        with session.env_scope({"ACX_CONF_STAGE": "cancelled"}):
            await trio.sleep(1)
    res = await session.exec(["printenv", "ACX_CONF_STAGE"])
    assert res.returncode != 0 and res.stdout == "", "scope leaked after failure/cancel"


@check
async def check_public_scope(session: Any, ctx: CheckContext) -> None:
    """public_scope() hides the enclosing stage variables (collection sees public vars only, V2)
    and restores them on exit."""
    with session.env_scope({"ACX_CONF_STAGE": "run"}):
        with session.public_scope():
            hidden = await session.exec(["printenv", "ACX_CONF_STAGE"])
            public = await session.exec(["printenv", PUBLIC_VAR])
        back = await session.exec(["printenv", "ACX_CONF_STAGE"])
    assert hidden.returncode != 0 and hidden.stdout == "", "stage variable visible in public_scope"
    assert public.stdout == "public-value\n", public
    assert back.stdout == "run\n", "stage scope not restored after public_scope"


# ---- files and directories (E1) ------------------------------------------------------------


@check
async def check_binary_file_roundtrip(session: Any, ctx: CheckContext) -> None:
    """write_bytes/read_bytes keep every byte value; parents are created; text is UTF-8."""
    data = bytes(range(256)) * 64
    await session.write_bytes("nested/dir/blob.bin", data)
    assert await session.read_bytes("nested/dir/blob.bin") == data
    assert await session.is_file("nested/dir/blob.bin") and await session.is_dir("nested/dir")
    await session.write_text("note.txt", "ünïcödé ✓\n")
    assert await session.read_text("note.txt") == "ünïcödé ✓\n"
    res = await session.exec(["cat", "note.txt"])
    assert res.stdout == "ünïcödé ✓\n", "relative file paths resolve against the workdir"


@check
async def check_file_mode(session: Any, ctx: CheckContext) -> None:
    """write_bytes(mode=0o755) makes an executable script."""
    await session.write_bytes("run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
    res = await session.exec(["./run.sh"])
    assert res.stdout == "ran\n", res


@check
async def check_read_limit(session: Any, ctx: CheckContext) -> None:
    """read_bytes(max_bytes) refuses larger files with a DriverError."""
    from acx.errors import DriverError

    await session.write_bytes("big.bin", b"x" * 5000)
    assert len(await session.read_bytes("big.bin", max_bytes=5000)) == 5000
    try:
        await session.read_bytes("big.bin", max_bytes=100)
    except DriverError:
        return
    raise AssertionError("read_bytes over max_bytes must raise DriverError")


@check
async def check_missing_paths(session: Any, ctx: CheckContext) -> None:
    """Missing files/dirs: FileNotFoundError on read and download; is_file/is_dir are False."""
    assert not await session.is_file("nope.txt") and not await session.is_dir("nope")
    ops: list[Callable[[], Awaitable[Any]]] = [
        lambda: session.read_bytes("nope.txt"),
        lambda: session.download_dir("nope", str(ctx.scratch / "dl-missing")),
        lambda: session.upload_dir(str(ctx.scratch / "no-such-local-dir"), "up"),
    ]
    for op in ops:
        try:
            await op()
        except FileNotFoundError:
            continue
        raise AssertionError("an operation on a missing path must raise FileNotFoundError")


def _make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "top.txt": b"top\n",
        ".hidden": b"secret-ish dotfile\n",
        "a/b/c.bin": bytes(range(256)),
        "a/.dotdir/x": b"x",
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "empty").mkdir()
    return files


def _read_tree(root: Path) -> tuple[dict[str, bytes], set[str]]:
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            dirs.add(os.path.relpath(os.path.join(dirpath, d), root))
        for f in filenames:
            p = os.path.join(dirpath, f)
            files[os.path.relpath(p, root)] = Path(p).read_bytes()
    return files, dirs


@check
async def check_directory_roundtrip(session: Any, ctx: CheckContext) -> None:
    """upload_dir then download_dir returns the same tree: binary data, hidden files, empty dirs."""
    src = ctx.scratch / f"tree-{uuid.uuid4().hex[:6]}"
    files = _make_tree(src)
    await session.upload_dir(str(src), "up")
    assert await session.is_file("up/.hidden") and await session.is_dir("up/empty")
    assert await session.read_bytes("up/a/b/c.bin") == files["a/b/c.bin"]
    dst = ctx.scratch / f"back-{uuid.uuid4().hex[:6]}"
    await session.download_dir("up", str(dst))
    got_files, got_dirs = _read_tree(dst)
    assert got_files == files, sorted(got_files)
    assert {"empty", "a", "a/b", "a/.dotdir"} <= got_dirs, got_dirs


@check
async def check_file_upload_download(session: Any, ctx: CheckContext) -> None:
    """upload/download of single files keep content (binary) and the executable bit."""
    src = ctx.scratch / f"tool-{uuid.uuid4().hex[:6]}.sh"
    src.write_bytes(b"#!/bin/sh\nprintf 'tool\\000ok'\n")
    src.chmod(0o755)
    await session.upload(str(src), "bin/tool.sh")
    res = await session.exec(["./bin/tool.sh"])
    assert res.stdout == "tool\x00ok", repr(res.stdout)
    dst = ctx.scratch / f"dl-{uuid.uuid4().hex[:6]}" / "tool.sh"
    await session.download("bin/tool.sh", str(dst))
    assert dst.read_bytes() == src.read_bytes()


# ---- lifecycle -----------------------------------------------------------------------------


@check
async def check_closed_session(session: Any, ctx: CheckContext) -> None:
    """close() is idempotent; exec on a closed session is a DriverError."""
    from acx.errors import DriverError

    await session.close()
    await session.close()
    try:
        await session.exec(["echo", "x"])
    except DriverError:
        return
    raise AssertionError("exec after close must raise DriverError")


# ---- hooks the interpreter and components call ---------------------------------------------


@check
async def check_download_tree(session: Any, ctx: CheckContext) -> None:
    """download_tree copies a directory's contents and single files; a missing source is
    FileNotFoundError; with supports_limited_download, excludes and limits apply while copying."""
    from acx.drivers.transfer import ArchiveLimitError

    src = ctx.scratch / f"dt-{uuid.uuid4().hex[:6]}"
    files = _make_tree(src)
    (src / "skip.log").write_bytes(b"log\n")
    await session.upload_dir(str(src), "dt")
    dst = ctx.scratch / f"dt-back-{uuid.uuid4().hex[:6]}"
    await session.download_tree("dt", str(dst), exclude=["*.log"], max_bytes=1 << 20, max_entries=100)
    got, _ = _read_tree(dst)
    assert {k: v for k, v in got.items() if k != "skip.log"} == files, sorted(got)
    one = ctx.scratch / f"dt-file-{uuid.uuid4().hex[:6]}" / "content"
    await session.download_tree("dt/a/b/c.bin", str(one), max_bytes=1 << 20)
    assert one.read_bytes() == files["a/b/c.bin"]
    try:
        await session.download_tree("dt-missing", str(ctx.scratch / "dt-none"))
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("download_tree of a missing path must raise FileNotFoundError")
    if not session.supports_limited_download:
        return
    assert "skip.log" not in got, "supports_limited_download: excludes apply while copying"
    try:
        await session.download_tree("dt", str(ctx.scratch / "dt-limited"), max_entries=2)
    except ArchiveLimitError:
        return
    raise AssertionError("supports_limited_download: a tree over max_entries must raise ArchiveLimitError")


@check
async def check_kill_stray_processes(session: Any, ctx: CheckContext) -> None:
    """kill_stray_processes kills what earlier commands left running — a setsid'ed daemon outlives
    its exec() — and the session stays usable."""
    await session.exec(DETACH.format(cmd="sleep 60", out="stray.pid"), shell=True, timeout=20)
    # A sandbox without setsid or /proc (the in-memory fake) has no daemon to kill.
    pid = (await session.read_text("stray.pid")).strip() if await session.is_file("stray.pid") else ""
    if pid:
        assert await _alive(session, pid, polls=1), "the setsid'ed daemon outlives its exec()"
    await session.kill_stray_processes()
    if pid:
        assert not await _alive(session, pid), f"process {pid} survived kill_stray_processes"
    res = await session.exec(["echo", "still usable"])
    assert res.stdout == "still usable\n", res


@check
async def check_capabilities(session: Any, ctx: CheckContext) -> None:
    """capabilities() and the plan-time probe() describe the driver (P7: what the planner checks)."""
    from acx.drivers import DriverCapabilities

    caps = ctx.driver.capabilities()
    probed = type(ctx.driver).probe()
    assert isinstance(caps, DriverCapabilities) and isinstance(probed, DriverCapabilities)
    assert "public" in caps.network_modes, caps.network_modes


@check
async def check_prepare(session: Any, ctx: CheckContext) -> None:
    """prepare() (before a run) succeeds against a working provider and returns notes (strings)."""
    notes = await ctx.driver.prepare()
    assert isinstance(notes, list) and all(isinstance(n, str) for n in notes), notes


@check
async def check_cluster_hooks(session: Any, ctx: CheckContext) -> None:
    """Cluster placement hooks: missing_images() answers a list of the images asked (none for no
    image), a live session is not infrastructure_lost, max_infrastructure_losses is a count."""
    driver = ctx.driver
    assert await driver.missing_images([]) == []
    asked = ["acx-conformance/never-built-image:0"]
    missing = await driver.missing_images(asked)
    assert isinstance(missing, list) and set(missing) <= set(asked), missing
    assert session.infrastructure_lost is False
    assert isinstance(driver.max_infrastructure_losses, int) and driver.max_infrastructure_losses >= 0


@check
async def check_sessions_discoverable(session: Any, ctx: CheckContext) -> None:
    """A driver with sessions_discoverable lists a live session by the id it was opened with
    (filtered by acx.run_id), close_session releases it, and a second close_session is
    DriverError(code=session_not_found)."""
    import contextlib

    import msgspec

    from acx.errors import DriverError

    driver = ctx.driver
    if not driver.sessions_discoverable:
        return
    run_id = ctx.open_request.labels["acx.run_id"]
    listed = {r.id for r in await driver.list_sessions({"acx.run_id": run_id})}
    assert session.id in listed, f"{session.id} not in {sorted(listed)}"
    other = msgspec.structs.replace(
        ctx.open_request,
        session_id=f"{run_id}x-{uuid.uuid4().hex[:6]}",
        labels={**ctx.open_request.labels, "acx.run_id": f"{run_id}x"},
    )
    crashed = await driver.open(other)
    try:
        assert crashed.id not in listed, "the acx.run_id filter keeps other runs' sessions out"
        await crashed.exec("sleep 60 >/dev/null 2>&1 &", shell=True)
        await driver.close_session(crashed.id)
        after = {r.id for r in await driver.list_sessions({"acx.run_id": f"{run_id}x"})}
        assert crashed.id not in after, "close_session must release the sandbox"
        try:
            await driver.close_session(crashed.id)
        except DriverError as exc:
            assert exc.code == "session_not_found", exc.code
        else:
            raise AssertionError("close_session of an unknown id must raise DriverError(session_not_found)")
    finally:
        with contextlib.suppress(DriverError):
            await crashed.close()
