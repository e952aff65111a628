"""Output helpers of the compile-family commands: a small YAML emitter, the dry-run text view,
atomic file writes. No third-party imports: printing must not cost start-up time."""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any

__all__ = ["render_dry_run_text", "to_yaml", "value_text", "write_text_atomic"]

_PLAIN = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_./@+=-]*(?: [A-Za-z0-9_./@+=-]+)*$")
_RESERVED = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"})


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same directory and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".acx-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(path))  # mkstemp makes 0600; keep the file's mode (or the umask's)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _mode_for(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
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
        rows = _section_rows(
            compiled.provenance.get(run.name, {}), flat_leaves(redact(run.request)), full, tally
        )
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
