"""Output helpers of the compile-family commands: a small YAML emitter, the dry-run text view,
atomic file writes. No third-party imports: printing must not cost start-up time."""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any

__all__ = ["render_dry_run_text", "to_yaml", "value_text", "write_output", "write_text_atomic"]

_PLAIN = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_./@+=-]*(?: [A-Za-z0-9_./@+=-]+)*$")
_RESERVED = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"})


def write_text_atomic(path: str, text: str, *, flag: str | None = "-o") -> None:
    """Write ``text`` to ``path`` (see :func:`write_output`); ``flag`` names the option in errors."""
    write_output(path, text.encode("utf-8"), flag=flag, make_parents=flag is not None)


def write_output(
    path: str, data: bytes, *, flag: str | None = "-o", make_parents: bool = False, mode: int | None = None
) -> None:
    """Write ``data`` to the file ``path`` names, without ever replacing what is not a regular file.

    * a regular file (or a new one): a temp file next to it, fsync, rename — an interrupted write
      never leaves half a file; the file's mode is kept. A symlink is followed: the *target* is
      rewritten and the link stays a link.
    * a character device or a FIFO (``/dev/stdout``, ``/dev/null``, a named pipe), and anything
      under ``/dev`` or ``/proc`` (``/dev/fd/1`` may be a shell redirection to a regular file):
      written in place, never renamed over.
    * a directory, a block device or a socket: refused.

    ``mode``: the most the new file may allow (an existing file's narrower mode is kept); default:
    an existing file's mode, else the umask's.

    Every failure is an :class:`~acx.errors.AcxUserError` (E0217) naming ``flag`` and ``path``.
    """
    label = f"`{flag} {path}`" if flag else path
    try:
        target = _output_target(path, label, flag or path)
        if target is None:
            _write_in_place(path, data)
            return
        if make_parents:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        _replace_atomically(target, data, mode)
    except OSError as exc:
        from acx.errors import AcxUserError

        reason = exc.strerror or str(exc)
        raise AcxUserError(
            f"cannot write {label}: {reason}",
            code="E0217",
            path=flag or path,
            help="check the path: its directory must be writable (or creatable) and the file writable",
        ) from None


def _output_target(path: str, label: str, where: str) -> str | None:
    """The regular file to replace atomically (symlinks resolved), or None to write ``path`` in place."""
    import stat

    from acx.errors import AcxUserError

    if "\0" in path:
        raise AcxUserError(f"cannot write {label}: the path contains a NUL character", code="E0217", path=where)
    try:
        mode = os.stat(path).st_mode  # follows symlinks
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise AcxUserError(
            f"cannot write {label}: it is a directory",
            code="E0217",
            path=where,
            help=f"name a file, e.g. {os.path.join(path, 'plan.json')}",
        )
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        raise AcxUserError(
            f"cannot write {label}: it is not a regular file, a character device or a pipe",
            code="E0217",
            path=where,
            help="pass a regular file path",
        )
    absolute = os.path.abspath(path)
    if (mode is not None and not stat.S_ISREG(mode)) or absolute.startswith(("/dev/", "/proc/")):
        return None
    return os.path.realpath(absolute)


def _write_in_place(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()


def _replace_atomically(target: str, data: bytes, mode: int | None = None) -> None:
    directory = os.path.dirname(target)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes 0600; keep the file's mode (or the umask's) unless one is asked for.
        os.chmod(tmp, _mode_for(target) if mode is None else _mode_for(target, mode) & mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _mode_for(path: str, new: int | None = None) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        if new is not None:
            return new
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


# ---- YAML -------------------------------------------------------------------------------------


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED and not _looks_numeric(text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text.lower() in {".inf", "-.inf", ".nan"}
    return True


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{}" if not value else json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[]" if not value else json.dumps(value, ensure_ascii=False)
    return _scalar(value)


def _nonempty_container(value: Any) -> bool:
    return isinstance(value, (dict, list)) and bool(value)


def _block(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict) and value:
        out: list[str] = []
        for key, item in value.items():
            if _nonempty_container(item):
                out.append(f"{pad}{_scalar(str(key))}:")
                out.extend(_block(item, indent + 2))
            else:
                out.append(f"{pad}{_scalar(str(key))}: {_flow(item)}")
        return out
    if isinstance(value, list) and value:
        out = []
        for item in value:
            if _nonempty_container(item):
                sub = _block(item, indent + 2)
                out.append(f"{pad}- {sub[0].lstrip()}")
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {_flow(item)}")
        return out
    return [pad + _flow(value)]


def to_yaml(data: Any) -> str:
    """Block-style YAML for JSON-like data (strings quoted JSON-style when they need it)."""
    return "\n".join(_block(data, 0)) + "\n"


# ---- dry-run text view ------------------------------------------------------------------------


def value_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _winner_text(chain: list[Any]) -> str:
    win = chain[-1]
    return f"{win.layer}  {win.source}" if win.kind != "default" else "default"


def _lines(rows: list[tuple[str, str]]) -> list[str]:
    width = min(64, max((len(a) for a, _ in rows), default=0))
    return [f"  {a.ljust(width)}  # {b}" for a, b in rows]


def _section_rows(
    provenance: dict[str, list[Any]], leaves: dict[str, Any], full: bool, tally: dict[str, int]
) -> list[tuple[str, str]]:
    """Rows ``path = value  # source`` of one scope; counts winners by kind into ``tally``."""
    rows = []
    for path, chain in provenance.items():
        kind = chain[-1].kind
        tally[kind] = tally.get(kind, 0) + 1
        if kind == "default" and not full:
            continue
        rows.append((f"{path} = {value_text(leaves.get(path))}", _winner_text(chain)))
    return rows


def render_dry_run_text(compiled: Any, *, full: bool = False) -> str:
    """Terraform-style summary: every value that is not at its default, with where it came from."""
    from acx.compiler import redact
    from acx.compiler._explain import flat_leaves

    orch = compiled.orchestration
    out = [f"orchestration {orch.name}  id {orch.id}  ({len(orch.requests)} request(s))"]
    out.append(f"  spec: {compiled.spec_path}")
    for path in compiled.config_paths:
        out.append(f"  config: {path}")
    tally: dict[str, int] = {}
    leaves = flat_leaves({"task_concurrency": orch.task_concurrency, "runtime": redact(orch.runtime)})
    tc = {"task_concurrency": compiled.orchestration_provenance["task_concurrency"]}
    rest = {k: v for k, v in compiled.orchestration_provenance.items() if k != "task_concurrency"}
    out.extend(_lines(_section_rows(tc, leaves, True, {}) + _section_rows(rest, leaves, full, tally)))
    for run in orch.requests:
        out.append("")
        out.append(f"request {run.name}  key {run.key}")
        rows = _section_rows(compiled.provenance.get(run.name, {}), flat_leaves(redact(run.request)), full, tally)
        meta = run.request.metadata
        for name in ("env_inputs", "secret_refs"):
            if getattr(meta, name):
                rows.append((f"metadata.{name} = {value_text(getattr(meta, name))}", "compiler"))
        out.extend(_lines(rows))
    files, cli, defaults = tally.get("file", 0), tally.get("cli", 0), tally.get("default", 0)
    summary = f"{len(orch.requests)} request(s): {files} value(s) from files, {cli} from the command line, "
    summary += f"{defaults} at defaults" + ("" if full else " (hidden; --full shows them)")
    out.extend(["", summary])
    return "\n".join(out) + "\n"
