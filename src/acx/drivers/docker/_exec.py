"""Commands in a docker session: the exec wrapper, deadlines, kills and exit codes.

Every command runs through a tiny POSIX ``sh`` wrapper that sets the cwd, feeds stdin from a file
and tags the process environment with ``ACX_EXEC_ID``. A deadline (or cancellation of the caller)
kills, from a second exec, every process carrying the tag *and their process groups* — so a
command that ignores SIGTERM, forks children or calls ``setsid`` is gone, not just its client.
:meth:`ExecOps.kill_stray_processes` kills everything but the container's own init session at a
phase boundary (the Harbor runtime calls it before its verifier runs).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import trio

from acx.drivers._base import DEFAULT_MAX_OUTPUT_BYTES, ExecResult
from acx.drivers.docker._engine import _short
from acx.errors import DriverError

if TYPE_CHECKING:
    from acx.drivers.docker._session import DockerSession

#: Runs every command: cwd, stdin from a file (removed once open), then exec the argv so the
#: command keeps the exec's pid (a session and process-group leader under runc).
_WRAPPER = r"""cwd=$1 stdin=$2; shift 2
if [ -n "$cwd" ]; then
  cd "$cwd" 2>/dev/null || { echo "acx-cwd-missing:$ACX_EXEC_ID" >&2; exit 126; }
fi
if [ -n "$stdin" ]; then exec 0<"$stdin"; rm -f "$stdin"; exec "$@"; fi
exec "$@" </dev/null"""

#: Kills every process tagged with ACX_EXEC_ID=$1 and its process group; repeats until none is left
#: (a fork racing the scan is caught by the next round).
_KILLER = r"""tag=$1 me=$$
for round in 1 2 3 4 5 6 7 8; do
  found=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$me" ] && continue
    if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "ACX_EXEC_ID=$tag"; then
      s=$(cat "$d/stat" 2>/dev/null) || continue
      r=${s##*) }
      set -- $r
      if [ "$3" -gt 1 ] 2>/dev/null && [ "$3" != "$me" ]; then kill -9 -"$3" 2>/dev/null; fi
      kill -9 "$p" 2>/dev/null
      found=1
    fi
  done
  [ -z "$found" ] && break
  sleep 0.05
done
exit 0"""

#: Kills every process of the container except its init session: docker-init (PID 1) and the
#: container's main command share session 1, while every exec starts a session of its own (runc
#: calls setsid) and no process can ever join session 1 again — so this spares exactly the
#: container's own processes and this script, whatever the others did to their environment,
#: process group or session. Repeats until a round finds nothing (a fork racing the scan is caught
#: by the next round); exit 1 when something still runs after the last round. Shell built-ins
#: only (`read`, `kill`), plus `sleep` between late rounds.
_REAPER = r"""me=$$
{ read -r s < /proc/$me/stat; } 2>/dev/null || { echo "acx-reap: cannot read /proc" >&2; exit 2; }
r=${s##*) }; set -- $r; mine=$4
round=0
while [ "$round" -lt 60 ]; do
  round=$((round + 1)); found=0
  for d in /proc/[0-9]*; do
    { read -r s < "$d/stat"; } 2>/dev/null || continue
    r=${s##*) }; set -- $r
    [ "$1" = Z ] || [ "$1" = X ] || [ "$4" = 1 ] || [ "$4" = "$mine" ] && continue
    kill -9 "${d#/proc/}" 2>/dev/null; found=$((found + 1))
  done
  [ "$found" = 0 ] && exit 0
  [ "$round" -gt 3 ] && sleep 0.05
done
echo "acx-reap: $found process(es) still running" >&2
exit 1"""

#: Prints the container's cgroup OOM-kill counter (cgroup v2 ``memory.events``, v1
#: ``memory.oom_control``); shell built-ins only. The engine's own ``OOMKilled`` flag covers only a
#: container whose init was killed, and on some engines not even that.
_OOM_COUNT = r"""for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  [ -r "$f" ] || continue
  while read -r k v; do [ "$k" = oom_kill ] && { echo "$v"; exit 0; }; done < "$f"
done
exit 1"""

_STATE_DIR = "/tmp/.acx"
_KILL_TIMEOUT = 15.0


class _Output:
    """Caps each stream at ``limit`` bytes while still draining it (a full pipe would block)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.truncated = False

    def add(self, out: bytes | None, err: bytes | None) -> None:
        for chunk, buf in ((out, self.stdout), (err, self.stderr)):
            if not chunk:
                continue
            room = self.limit - len(buf)
            if len(chunk) > room:
                self.truncated = True
                chunk = chunk[: max(room, 0)]
            buf.extend(chunk)


class DockerExec:
    """Commands of a :class:`~acx.drivers.docker.DockerSession` (composed into it)."""

    def __init__(self, s: DockerSession) -> None:
        self.s = s
        #: The cgroup's OOM-kill count when last read (a fresh container starts at 0).
        self._oom_seen = 0
        #: The session's state directory exists in the container (made once, before the first command).
        self._state_dir_open = False

    # -- commands --
    async def _exec(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> ExecResult:
        tag = uuid.uuid4().hex
        user = self.s.current_user()
        stdin_path = ""
        if stdin is not None:
            stdin_path = f"{_STATE_DIR}/{tag}.stdin"
            if user is not None:
                await self._open_state_dir()
            # Written by root; a command run as another user must be able to open it.
            await self.s.write_bytes(stdin_path, stdin, mode=0o600 if user is None else 0o644)
        env = {**self.s._proxy_env, **env}
        environment = [f"{k}={v}" for k, v in env.items()] + [f"ACX_EXEC_ID={tag}"]
        from docker.errors import APIError

        try:
            created = await self.s.driver._call(
                self.s.api.exec_create,
                self.s.container_id,
                ["/bin/sh", "-c", _WRAPPER, "acx-exec", self.s.files._abs(cwd) if cwd else "", stdin_path, *argv],
                stdout=True,
                stderr=True,
                environment=environment,
                user=user or "",
            )
        except APIError as exc:
            # e.g. the container died (OOM-killed, removed by `acx env close`): a driver failure.
            await self._raise_if_stopped()
            raise DriverError(
                f"cannot run a command in session {self.s.id}: {_short(exc)}", code="exec_failed"
            ) from exc
        exec_id = created["Id"]
        out = _Output(max_output_bytes)
        timed_out = await self._run_stream(exec_id, tag, out, timeout)
        code = await self.s.driver._call(_exit_code, self.s.api, exec_id)
        if not timed_out and code in (None, 137):
            # Killed by a signal acx did not send, or no exit recorded: was it the sandbox itself
            # (killed from outside, OOM-killed, removed), or its memory limit?
            await self._raise_if_stopped(settle=1.0)
            if code == 137 and await self._oom_killed():
                out.add(None, b"\n[acx: the sandbox reached its memory limit; a process was OOM-killed]\n")
        if user is not None and code == 126 and b"unable to find user" in out.stdout + out.stderr:
            raise DriverError(
                f"user {user!r} does not exist in session {self.s.id} (not in the image's /etc/passwd)",
                code="exec_user_missing",
                help="create the user in the image (e.g. `RUN useradd -m NAME`) or give a numeric uid",
            )
        if code == 126 and f"acx-cwd-missing:{tag}".encode() in out.stderr:
            raise DriverError(f"working directory {cwd} does not exist in session {self.s.id}", code="cwd_missing")
        if timed_out:
            # Same convention as host_process: killed at the deadline → -SIGKILL; a command that
            # exited on its own just as the deadline passed → 124 (like timeout(1)).
            code = -9 if code in (None, 137) else (124 if code >= 0 else code)
        return ExecResult(
            returncode=code if code is not None else -1,
            stdout=out.stdout.decode("utf-8", errors="replace"),
            stderr=out.stderr.decode("utf-8", errors="replace"),
            timed_out=timed_out,
            output_truncated=out.truncated,
        )

    async def _open_state_dir(self) -> None:
        """Once per session, before a command of another user reads its stdin file: the state
        directory becomes writable to every user, so that user's wrapper can remove the file."""
        if self._state_dir_open:
            return
        created = await self.s.driver._call(
            self.s.api.exec_create,
            self.s.container_id,
            ["/bin/sh", "-c", f"mkdir -p {_STATE_DIR} && chmod 0777 {_STATE_DIR}"],
            user="0",
        )
        await self.s.driver._call(self.s.api.exec_start, created["Id"])
        self._state_dir_open = True

    async def _run_stream(self, exec_id: str, tag: str, out: _Output, timeout: float | None) -> bool:
        """Pump the exec's output; on deadline or cancellation kill the tagged processes.

        Returns whether the deadline passed.
        """
        done = trio.Event()
        state = {"exited": False}

        def pump() -> None:
            for chunk_out, chunk_err in self.s.api.exec_start(exec_id, stream=True, demux=True):
                out.add(chunk_out, chunk_err)

        failure: list[BaseException] = []

        async def runner() -> None:
            try:
                await self.s.driver._stream(pump)
                state["exited"] = True
            except Exception as exc:  # the engine connection broke: a driver failure, below
                failure.append(exc)
            finally:
                done.set()

        timed_out = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runner)
                with trio.move_on_after(timeout if timeout is not None else float("inf")):
                    await done.wait()
                if not done.is_set():
                    timed_out = True
                    with trio.CancelScope(shield=True):
                        await self._kill(tag)
                        # The stream closes once the processes are gone; keep what they printed.
                        with trio.move_on_after(5):
                            await done.wait()
                nursery.cancel_scope.cancel()
        finally:
            if not state["exited"]:
                # Cancelled by the caller (or the stream broke): the command must not outlive us.
                with trio.CancelScope(shield=True):
                    await self._kill(tag)
        if failure and not timed_out:
            raise DriverError(
                f"lost the output stream of a command in session {self.s.id}: {_short(failure[0])}",
                code="exec_failed",
            ) from failure[0]
        return timed_out

    async def _kill(self, tag: str) -> None:
        with trio.move_on_after(_KILL_TIMEOUT):
            try:
                killer = await self.s.driver._call(
                    self.s.api.exec_create,
                    self.s.container_id,
                    ["/bin/sh", "-c", _KILLER, "acx-kill", tag],
                    stdout=True,
                    stderr=True,
                    user="0",  # reads every process's environment, whichever user it runs as
                )
                await self.s.driver._call(self.s.api.exec_start, killer["Id"])
            except Exception:  # the container may already be gone: nothing left to kill
                return

    async def _container_state(self) -> dict[str, Any]:
        from docker.errors import APIError

        try:
            info = await self.s.driver._call(self.s.api.inspect_container, self.s.container_id)
        except APIError:  # removed altogether
            return {"Running": False, "Status": "removed"}
        return dict(info.get("State") or {})

    async def _raise_if_stopped(self, settle: float = 0.0) -> None:
        """A clear error when the container itself is gone (killed from outside, OOM, removed).

        ``settle``: how long to watch for the engine to record the stop — a command's stream can
        end before the container's state says it exited.
        """
        deadline = trio.current_time() + settle
        while True:
            state = await self._container_state()
            if not state.get("Running", True) or trio.current_time() >= deadline:
                break
            await trio.sleep(0.05)
        if state.get("Running", True):
            return
        why = (
            "it ran out of memory (OOM-killed)"
            if state.get("OOMKilled")
            else f"it was stopped from outside ({state.get('Status', 'not running')})"
        )
        raise DriverError(f"the sandbox of session {self.s.id} is gone: {why}", code="sandbox_stopped")

    async def _oom_killed(self) -> bool:
        """Whether a process was OOM-killed since the last check (the engine's flag or the cgroup's
        ``oom_kill`` counter, which also counts kills inside a container that keeps running)."""
        if (await self._container_state()).get("OOMKilled"):
            return True
        from docker.errors import APIError

        try:
            created = await self.s.driver._call(
                self.s.api.exec_create, self.s.container_id, ["/bin/sh", "-c", _OOM_COUNT], stdout=True, stderr=False
            )
            output = await self.s.driver._call(self.s.api.exec_start, created["Id"])
        except APIError:
            return False
        text = output.decode("ascii", "replace").strip() if isinstance(output, bytes) else str(output).strip()
        if not text.isdigit():
            return False
        previous = self._oom_seen
        self._oom_seen = max(previous, int(text))
        return int(text) > previous

    async def kill_stray_processes(self) -> None:
        """Kill every process left in the container by earlier commands (phase boundary).

        Everything outside the container's init session dies with SIGKILL — background jobs,
        ``setsid``/``nohup`` children, processes that dropped ``ACX_EXEC_ID`` with ``env -i`` —
        while docker-init and the container's main command survive. Runs as root, so processes
        that changed user are caught too. Raises :class:`DriverError` when something survives.
        """
        from docker.errors import APIError

        try:
            created = await self.s.driver._call(
                self.s.api.exec_create,
                self.s.container_id,
                ["/bin/sh", "-c", _REAPER, "acx-reap"],
                stdout=True,
                stderr=True,
                user="0",
            )
            output = await self.s.driver._call(self.s.api.exec_start, created["Id"])
            code = await self.s.driver._call(_exit_code, self.s.api, created["Id"])
        except APIError as exc:
            await self._raise_if_stopped()
            raise DriverError(
                f"cannot stop the processes left in session {self.s.id}: {_short(exc)}", code="exec_failed"
            ) from exc
        if code != 0:
            text = output.decode("utf-8", errors="replace") if isinstance(output, bytes) else str(output)
            raise DriverError(
                f"could not stop the processes left in session {self.s.id} (exit {code}): {text.strip()[:300]}",
                code="process_cleanup_failed",
            )


def _exit_code(api: Any, exec_id: str) -> int | None:
    # The output stream can close a moment before the engine records the exit (busy engines):
    # poll with a short, growing pause (about 10 s in total).
    delay = 0.002
    deadline = time.monotonic() + 10
    while True:
        info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            code = info.get("ExitCode")
            return int(code) if code is not None else None
        if time.monotonic() > deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
