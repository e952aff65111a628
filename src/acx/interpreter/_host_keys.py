"""Model keys and ``host_process``: what an agent running as the user can read of acx.

On ``docker`` and ``bwrap`` an agent never reaches acx's process; on ``host_process`` it runs as
the same user, and ``/proc/<acx pid>/environ`` (readable by any process of that user, whatever
``kernel.yama.ptrace_scope`` says) holds the environment acx started with — the real model key
among it. :func:`keys_kept_from_agents` warns when a run meets that case and, while the run
lasts, takes the key's variables out of that block: ``os.unsetenv`` (children started without an
explicit environment no longer inherit them) and their bytes overwritten in the initial
environment block the kernel shows. Python's ``os.environ`` keeps them (the gateway and graders
read it), and the C-level variables are put back when the run ends (a library caller's later
subprocesses inherit them as before; ``putenv`` places them on the heap, which ``/proc/<pid>/environ``
never shows). What stays readable is said in the warning and in docs/models.md: acx's memory
(with ``ptrace_scope = 0``), the environment of the shell that started acx, and other attempts'
per-attempt tokens.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from acx.envref import iter_references

__all__ = ["exposed_key_names", "hide_from_proc_environ", "keys_kept_from_agents"]

log = logging.getLogger("acx")


def exposed_key_names(programs: Sequence[Any], environ: Mapping[str, str]) -> dict[str, list[str]]:
    """request name → the variables its model keys resolve from, for requests that run on
    ``host_process`` and have a key set (empty when none does)."""
    out: dict[str, list[str]] = {}
    for prog in programs:
        req = prog.request
        if req.environment.id != "host_process":
            continue
        model = req.model
        refs = [getattr(model, "api_key", None)]
        refs += [getattr(r, "api_key", None) for r in (getattr(model, "roles", None) or {}).values()]
        names = sorted(
            {name for ref in refs if isinstance(ref, str) for name, _ in iter_references(ref) if environ.get(name)}
        )
        if names:
            out[prog.name] = names
    return out


def _environ_block() -> tuple[int, int] | None:
    """(start, end) addresses of this process's initial environment block (``/proc/self/stat``
    fields 50 and 51), or None where the kernel does not say."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[47]), int(fields[48])
    except (OSError, IndexError, ValueError):
        return None


def hide_from_proc_environ(names: Iterable[str]) -> list[str]:
    """Unset ``names`` at the C level and overwrite their ``NAME=value`` entries in the initial
    environment block with NUL bytes, so ``/proc/<pid>/environ`` no longer shows them; returns
    the names wiped (``os.environ`` is left as it is)."""
    wanted = {os.fsencode(n) for n in names}
    for name in wanted:
        os.unsetenv(name)
    block = _environ_block()
    if block is None or not wanted:
        return []
    start, end = block
    wiped: list[str] = []
    try:
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            data = mem.read(end - start)
            offset = 0
            for entry in data.split(b"\0"):
                if entry.split(b"=", 1)[0] in wanted:
                    mem.seek(start + offset)
                    mem.write(b"\0" * len(entry))
                    wiped.append(os.fsdecode(entry.split(b"=", 1)[0]))
                offset += len(entry) + 1
    except OSError as exc:  # a kernel or sandbox that refuses writes to /proc/self/mem
        log.warning("could not clear the model key from /proc/%d/environ: %s", os.getpid(), exc)
    return wiped


def _warn(exposed: Mapping[str, list[str]], wiped: Sequence[str], live: bool) -> None:
    names = sorted({n for ns in exposed.values() for n in ns})
    where = ", ".join(f"`{r}`" for r in exposed)
    done = (
        f"acx has removed {', '.join(wiped)} from its own process environment (/proc/{os.getpid()}/environ) "
        "for the run; "
        if wiped
        else (
            f"{', '.join(names)} stays readable in /proc/{os.getpid()}/environ; "
            if live
            else "the environment acx was given is not its own, so nothing was removed from it; "
        )
    )
    text = (
        f"acx: warning: {where} run(s) agents on host_process with a real model key ({', '.join(names)}): "
        "they run as your user and can read what you can — "
        + done
        + "the shell that started acx still holds the key, acx's memory is readable where "
        "kernel.yama.ptrace_scope is 0, and each agent can read the other attempts' gateway tokens. "
        "Only --env docker and --env bwrap keep the key away from agents (docs/models.md)."
    )
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    log.warning("%s", text.removeprefix("acx: warning: "))


@contextlib.contextmanager
def keys_kept_from_agents(programs: Sequence[Any], environ: Mapping[str, str]) -> Iterator[None]:
    """Around a run: warn when a ``host_process`` request has a real model key, and (when
    ``environ`` is this process's own ``os.environ``) keep the key's variables out of
    ``/proc/<pid>/environ`` and out of children's inherited environments until the run ends."""
    exposed = exposed_key_names(programs, environ)
    if not exposed:
        yield
        return
    live = environ is os.environ
    names = sorted({n for ns in exposed.values() for n in ns})
    wiped = hide_from_proc_environ(names) if live else []
    _warn(exposed, wiped, live)
    try:
        yield
    finally:
        if live:
            for name in names:
                value = os.environ.get(name)
                if value is not None:
                    os.putenv(name, value)
