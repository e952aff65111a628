"""Artifact collection, download and restore on driver primitives (contracts A4–A8, T4).

``collect`` runs after the run phase, before evaluation and before the environment is released:

1. the plan's collection commands, in order, with ``bash -c``, public variables only (stage scopes
   are masked), each under its own deadline and all under ``artifact_collect_timeout_seconds``;
2. when ``save_artifacts``, every ``plan.artifacts`` entry is downloaded into a staging directory
   under the attempt's ``artifacts/`` with safe extraction, excludes and the ``artifact_limits``
   (bytes, entries, time), fingerprinted with sha256 and published by rename;
3. a ``submission-<id>.manifest.json`` is written atomically — ``complete=false`` with per-entry
   ``failed`` / ``cancelled`` / ``not_collected`` statuses when anything went wrong.

``restore`` (fresh verifier, A7) verifies the manifest and every checksum, uploads all entries to a
staging directory in the sandbox, then installs them parents-before-children — a directory restore
replaces the directory's contents (hidden files included) but keeps the directory — and rolls every
installed entry back if one fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import stat
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from acx.errors import DriverError
from acx.interpreter._fs import ResultsDiskFull, disk_full_error
from acx.ir import ArtifactSpec, ExecutionIssue, ExecutionPlan

if TYPE_CHECKING:
    from acx.drivers import Session

__all__ = ["MANIFEST_SCHEMA_VERSION", "ArtifactOutcome", "collect", "find_manifest", "restore"]

MANIFEST_SCHEMA_VERSION = 1
ARTIFACTS_DIR = "artifacts"


@dataclass
class ArtifactOutcome:
    """What ``collect`` did: per-entry records for ``result.json`` and the issues it raised."""

    declared_artifacts: list[dict[str, Any]] = field(default_factory=list)
    issues: list[ExecutionIssue] = field(default_factory=list)
    manifest_path: Path | None = None
    complete: bool = True
    manifest: dict[str, Any] | None = None

    @property
    def blocks_evaluation(self) -> bool:
        """Preparation or transfer failures block evaluation and checkpointing (A6)."""
        return any(i.severity != "warning" for i in self.issues)


def public_vars_only(session: Session) -> contextlib.AbstractContextManager[None]:
    """Collection and restore see public variables only (V2)."""
    return session.public_scope()


def _issue(code: str, message: str, *, phase: str = "collect", severity: str = "error") -> ExecutionIssue:
    return ExecutionIssue(severity=severity, phase=phase, code=code, message=message)  # type: ignore[arg-type]


def destination_of(spec: ArtifactSpec) -> str:
    dest = spec.destination if spec.destination is not None else spec.source.lstrip("/")
    return posixpath.normpath(dest)


def _spec_problem(spec: ArtifactSpec, dest: str) -> str | None:
    if not spec.source.startswith("/") or posixpath.normpath(spec.source) == "/":
        return f"artifact source {spec.source!r} must be an absolute path other than /"
    if ".." in spec.source.split("/"):
        return f"artifact source {spec.source!r} contains '..'"
    if dest.startswith("/") or dest == "." or dest.split("/")[0] == ".." or ".." in dest.split("/"):
        return f"artifact destination {dest!r} must be a relative path inside artifacts/"
    if spec.service != "main":
        return f"artifact {spec.source!r}: only service 'main' is supported"
    return None


# ---- collection commands (A5) ------------------------------------------------------------------


async def _run_commands(session: Any, plan: ExecutionPlan) -> list[ExecutionIssue]:
    issues: list[ExecutionIssue] = []
    stage = plan.artifact_collect_timeout_seconds
    deadline = trio.current_time() + stage if stage else float("inf")
    with public_vars_only(session):
        for index, cmd in enumerate(plan.artifact_collect):
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                issues.append(
                    _issue(
                        "artifact_collect_timeout",
                        f"collection stage deadline passed before command #{index}",
                    )
                )
                break
            budget = min(cmd.timeout_seconds, remaining)
            try:
                res = await session.exec(["bash", "-c", cmd.command], timeout=budget)
            except DriverError as exc:
                issues.append(_issue("artifact_collect_failed", f"collection command #{index} failed: {exc.code}"))
                break
            if res.timed_out:
                issues.append(
                    _issue(
                        "artifact_collect_timeout",
                        f"collection command #{index} timed out after {budget:g} s",
                    )
                )
                break
            if res.returncode != 0:
                # Only the index and exit code: command output may carry secrets.
                issues.append(
                    _issue("artifact_collect_failed", f"collection command #{index} exited with {res.returncode}")
                )
                break
    return issues


# ---- download (A4, A6) ---------------------------------------------------------------------------


@dataclass
class _Budget:
    bytes_left: int
    entries_left: int


async def collect(
    session: Any, plan: ExecutionPlan, attempt_dir: Path, *, scrub: Callable[[str], str] | None = None
) -> ArtifactOutcome:
    """Run collection commands, then download ``plan.artifacts`` into ``attempt_dir/artifacts``."""
    outcome = ArtifactOutcome()
    outcome.issues.extend(await _run_commands(session, plan))
    if not plan.save_artifacts:
        return outcome
    root = Path(attempt_dir) / ARTIFACTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    entries = _initial_entries(plan.artifacts)
    limits = plan.artifact_limits
    budget = _Budget(limits.max_mb * 1024 * 1024, limits.max_files)
    manifest_path = Path(attempt_dir) / f"submission-{uuid.uuid4().hex[:12]}.manifest.json"
    failed_operation: str | None = None
    try:
        with trio.move_on_after(limits.timeout_seconds) as scope:
            for entry in entries:
                if entry["status"] != "pending":
                    continue
                stop = await _collect_entry(session, entry, root, budget)
                if stop:
                    failed_operation = "download"
                    break
        if scope.cancelled_caught:
            failed_operation = "download"
            for entry in entries:
                if entry["status"] == "collecting":
                    entry.update(status="failed", error_type="timeout")
            outcome.issues.append(
                _issue("artifact_download_timeout", f"artifact download exceeded {limits.timeout_seconds:g} s")
            )
    except BaseException as exc:
        for entry in entries:
            if entry["status"] == "collecting":
                entry.update(status="cancelled", error_type="cancelled")
        try:
            _finish(entries, outcome, manifest_path, failed_operation or "download", scrub)
        except OSError:
            if not isinstance(exc, ResultsDiskFull):
                raise
        raise
    _finish(entries, outcome, manifest_path, failed_operation, scrub)
    return outcome


def _initial_entries(specs: list[ArtifactSpec]) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    taken: list[str] = []
    for spec in specs:
        dest = destination_of(spec)
        entry: dict[str, Any] = {
            "source": spec.source,
            "destination": dest,
            "exclude": list(spec.exclude),
            "service": spec.service,
            "status": "pending",
            "kind": None,
            "sha256": None,
            "size_bytes": 0,
            "file_count": 0,
            "files": [],
            "error_type": None,
        }
        problem = _spec_problem(spec, dest)
        if problem is None and any(_overlaps(dest, other) for other in taken):
            problem = f"artifact destination {dest!r} overlaps an earlier declaration"
        if problem is not None:
            entry.update(status="failed", error_type="invalid_declaration", error=problem)
        else:
            taken.append(dest)
        entries.append(entry)
    return entries


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


async def _collect_entry(session: Any, entry: dict[str, Any], root: Path, budget: _Budget) -> bool:
    """Download one entry; True when the stage must stop (limits breached)."""
    from acx.drivers.transfer import ArchiveLimitError

    entry["status"] = "collecting"
    source = entry["source"]
    staging = root / f".staging-{uuid.uuid4().hex[:8]}"
    try:
        kind = "directory" if await session.is_dir(source) else "file" if await session.is_file(source) else None
        if kind is None:
            entry.update(status="missing")
            return False
        entry["kind"] = kind
        await _download(session, source, kind, staging, entry["exclude"], budget)
        if kind == "file" and not (staging / "content").exists():
            entry.update(status="excluded")  # the file itself matched an exclude pattern
            return False
        files, excluded = await trio.to_thread.run_sync(_fingerprint_tree, staging, kind, entry["exclude"])
        _charge(files, budget)
        final = root / entry["destination"]
        await trio.to_thread.run_sync(_publish, staging, final, kind)
        _record(entry, files, excluded, kind)
        return False
    except ArchiveLimitError as exc:
        entry.update(status="failed", error_type="limit_exceeded", error=str(exc))
        return True
    except (DriverError, OSError) as exc:
        full = disk_full_error(exc)
        if full is not None:  # the results disk, not the artifact: the run stops, the attempt reruns
            raise ResultsDiskFull(str(root), full) from exc
        entry.update(status="failed", error_type=getattr(exc, "code", type(exc).__name__), error=_safe_message(exc))
        return False
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _safe_message(exc: BaseException) -> str:
    """Our own driver messages are safe to persist; provider exception text is reduced to its type."""
    from acx.drivers.transfer import UnsafeArchiveError

    if isinstance(exc, (UnsafeArchiveError, FileNotFoundError, PermissionError)):
        return str(exc)
    if isinstance(exc, DriverError):
        return f"{exc.code}"
    return type(exc).__name__


async def _download(
    session: Session, source: str, kind: str, staging: Path, exclude: list[str], budget: _Budget
) -> None:
    """Copy one source through the Session contract; ``_fingerprint_tree`` re-applies excludes and
    ``_charge`` the limits afterwards, for drivers that cannot enforce them while copying."""
    target = staging if kind == "directory" else staging / "content"
    await session.download_tree(
        source, str(target), exclude=exclude, max_bytes=budget.bytes_left, max_entries=budget.entries_left
    )


def _charge(files: list[dict[str, Any]], budget: _Budget) -> None:
    from acx.drivers.transfer import ArchiveLimitError

    size = sum(int(f.get("size", 0)) for f in files)
    if size > budget.bytes_left:
        raise ArchiveLimitError("artifacts exceed the size limit (artifact_limits.max_mb)")
    if len(files) > budget.entries_left:
        raise ArchiveLimitError("artifacts exceed the entry limit (artifact_limits.max_files)")
    budget.bytes_left -= size
    budget.entries_left -= len(files)


def _fingerprint_tree(staging: Path, kind: str, exclude: list[str]) -> tuple[list[dict[str, Any]], int]:
    """Validate a downloaded tree (any driver) and describe every member with its sha256.

    Escaping symlinks and special files are refused here too, so a driver whose own transfer is a
    plain copy still cannot smuggle them in. Excludes are applied (again) for such drivers.
    """
    from acx.drivers.transfer import UnsafeArchiveError, is_excluded, symlink_escapes

    base = staging
    files: list[dict[str, Any]] = []
    excluded = 0
    if not base.exists():
        base.mkdir(parents=True)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(base).as_posix()
            shown = rel if kind == "directory" else ""
            if kind == "directory" and is_excluded(rel, exclude):
                excluded += 1
                _remove(full)
                if name in dirnames:
                    dirnames.remove(name)
                continue
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(full)
                # os.walk does not follow links: ``rel`` is the link's real place in the tree.
                problem = symlink_escapes(rel.count("/"), target)
                if problem is not None:
                    raise UnsafeArchiveError(f"symlink {rel!r} {problem}")
                files.append({"path": shown, "type": "symlink", "target": target, "size": 0})
            elif stat.S_ISDIR(st.st_mode):
                files.append({"path": shown, "type": "dir", "mode": stat.S_IMODE(st.st_mode), "size": 0})
            elif stat.S_ISREG(st.st_mode):
                files.append(
                    {
                        "path": shown,
                        "type": "file",
                        "mode": stat.S_IMODE(st.st_mode),
                        "size": st.st_size,
                        "sha256": _sha256(full),
                    }
                )
            else:
                raise UnsafeArchiveError(f"artifact member {rel!r} is a special file")
    return files, excluded


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def _entry_digest(files: list[dict[str, Any]]) -> str:
    """One sha256 over names, types, modes, sizes and content digests (stable order)."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f["path"]):
        digest.update(json.dumps([f["path"], f["type"], f.get("size", 0), f.get("sha256"), f.get("target")]).encode())
    return digest.hexdigest()


def _publish(staging: Path, final: Path, kind: str) -> None:
    if final.exists() or final.is_symlink():
        _remove(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if kind == "directory":
        os.replace(staging, final)
    else:
        os.replace(staging / "content", final)


def _record(entry: dict[str, Any], files: list[dict[str, Any]], excluded: int, kind: str) -> None:
    regular = [f for f in files if f["type"] == "file"]
    entry.update(
        files=files,
        file_count=len(regular),
        size_bytes=sum(f["size"] for f in regular),
        sha256=_entry_digest(files),
        status="excluded" if (excluded and not files) else "collected",
        excluded_count=excluded,
    )


def _finish(
    entries: list[dict[str, Any]],
    outcome: ArtifactOutcome,
    path: Path,
    failed_operation: str | None,
    scrub: Callable[[str], str] | None = None,
) -> None:
    for entry in entries:
        if entry["status"] in ("pending", "collecting"):
            entry["status"] = "not_collected"
    if scrub is not None:
        # Error texts may quote what a command printed; paths and checksums stay exact (restore).
        for entry in entries:
            if isinstance(entry.get("error"), str):
                entry["error"] = scrub(entry["error"])
    bad = [e for e in entries if e["status"] in ("failed", "cancelled", "not_collected")]
    complete = not bad
    for entry in entries:
        # (an entry cut off by the stage deadline is covered by the artifact_download_timeout issue)
        if entry["status"] in ("failed", "cancelled") and entry.get("error_type") != "timeout":
            outcome.issues.append(
                _issue(
                    "artifact_collection_failed",
                    f"artifact {entry['source']}: {entry['status']} ({entry.get('error') or entry['error_type']})",
                )
            )
    manifest = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "directory": ARTIFACTS_DIR,
        "complete": complete,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "created_ns": time.time_ns(),
        "entries": entries,
        "error_type": None if complete else (bad[0].get("error_type") or bad[0]["status"]),
        "failed_operation": None if complete else (failed_operation or "download"),
    }
    _atomic_write_json(path, manifest)
    outcome.manifest = manifest
    outcome.manifest_path = path
    outcome.complete = complete
    outcome.declared_artifacts = [
        {
            "path": posixpath.join(ARTIFACTS_DIR, e["destination"]),
            "source": e["source"],
            "status": e["status"],
            "kind": e["kind"],
            "size": e["size_bytes"],
            "checksum": f"sha256:{e['sha256']}" if e["sha256"] else None,
        }
        for e in entries
    ]


def _atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# ---- restore (A7) ----------------------------------------------------------------------------------


def find_manifest(attempt_dir: Path) -> Path | None:
    """The newest ``submission-*.manifest.json`` of an attempt (None when there is none)."""
    best: tuple[int, Path] | None = None
    for path in Path(attempt_dir).glob("submission-*.manifest.json"):
        try:
            created = int(json.loads(path.read_text()).get("created_ns", 0))
        except (OSError, ValueError):
            created = 0
        if best is None or created > best[0]:
            best = (created, path)
    return None if best is None else best[1]


def _restore_issue(code: str, message: str) -> ExecutionIssue:
    return _issue(code, message, phase="evaluate")


def _verify(root: Path, entry: dict[str, Any]) -> str | None:
    """Why the stored tree of ``entry`` does not match the manifest (None when it does): every
    file's bytes and mode, every symlink's target, every directory — and nothing more."""
    final = root / entry["destination"]
    for f in entry["files"]:
        path = final / f["path"] if f["path"] else final
        problem = _entry_problem(path, f)
        if problem is not None:
            return f"{path.relative_to(root)} {problem}"
    if entry["kind"] == "directory":
        if not final.is_dir() or final.is_symlink():
            return f"{entry['destination']} is missing"
        listed = {f["path"] for f in entry["files"]}
        for dirpath, dirnames, filenames in os.walk(final):  # links are not followed
            for name in dirnames + filenames:
                rel = (Path(dirpath) / name).relative_to(final).as_posix()
                if rel not in listed:
                    return f"{entry['destination']}/{rel} is not in the manifest"
    return None


def _entry_problem(path: Path, f: dict[str, Any]) -> str | None:
    if f["type"] == "symlink":
        if not path.is_symlink() or os.readlink(path) != f["target"]:
            return "is not the recorded symlink"
        return None
    if f["type"] == "file":
        if not path.is_file() or path.is_symlink():
            return "is missing"
        if path.stat().st_size != f["size"] or _sha256(path) != f["sha256"]:
            return "does not match its checksum"
    elif f["type"] == "dir" and (not path.is_dir() or path.is_symlink()):
        return "is missing"
    if "mode" in f and stat.S_IMODE(path.lstat().st_mode) != f["mode"]:
        return "has another mode than recorded"
    return None


_INSTALL = r"""t=$1 s=$2 b=$3 kind=$4
set -e
mkdir -p "$b"
if [ "$kind" = directory ]; then
  mkdir -p "$t"
  for f in "$t"/* "$t"/.[!.]* "$t"/..?*; do if [ -e "$f" ] || [ -L "$f" ]; then mv "$f" "$b"/; fi; done
  for f in "$s"/* "$s"/.[!.]* "$s"/..?*; do if [ -e "$f" ] || [ -L "$f" ]; then mv "$f" "$t"/; fi; done
else
  mkdir -p "$(dirname "$t")"
  if [ -e "$t" ] || [ -L "$t" ]; then mv "$t" "$b"/file; fi
  mv "$s" "$t"
fi"""

_ROLLBACK = r"""t=$1 b=$3 kind=$4
if [ "$kind" = directory ]; then
  for f in "$t"/* "$t"/.[!.]* "$t"/..?*; do if [ -e "$f" ] || [ -L "$f" ]; then rm -rf "$f"; fi; done
  for f in "$b"/* "$b"/.[!.]* "$b"/..?*; do if [ -e "$f" ] || [ -L "$f" ]; then mv "$f" "$t"/; fi; done
else
  rm -rf "$t"
  if [ -e "$b"/file ] || [ -L "$b"/file ]; then mv "$b"/file "$t"; fi
fi"""


async def restore(session: Any, plan: ExecutionPlan, attempt_dir: Path) -> list[ExecutionIssue]:
    """Verify the attempt's manifest and checksums, then restore artifacts to their sources."""
    manifest_path = find_manifest(Path(attempt_dir))
    if manifest_path is None:
        if not plan.artifacts:
            return []
        return [_restore_issue("artifact_manifest_missing", "no submission manifest to restore artifacts from")]
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [_restore_issue("artifact_manifest_invalid", f"{manifest_path.name} is not valid JSON")]
    if not manifest.get("complete"):
        return [_restore_issue("artifact_manifest_incomplete", f"{manifest_path.name} records a partial collection")]
    root = Path(attempt_dir) / manifest.get("directory", ARTIFACTS_DIR)
    entries = _restorable(manifest.get("entries", []))
    for entry in entries:
        problem = _verify(root, entry)
        if problem is not None:
            return [_restore_issue("artifact_checksum_mismatch", f"artifact {entry['source']}: {problem}")]
    if not entries:
        return []
    try:
        with public_vars_only(session), trio.fail_after(plan.artifact_limits.timeout_seconds):
            await _install_all(session, root, entries)
    except trio.TooSlowError:
        return [
            _restore_issue("artifact_restore_timeout", "restoring artifacts exceeded artifact_limits.timeout_seconds")
        ]
    except (DriverError, OSError) as exc:
        return [_restore_issue("artifact_restore_failed", f"restoring artifacts failed: {_safe_message(exc)}")]
    return []


def _restorable(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Collected entries, one per source, parents before children (declaration order otherwise)."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for entry in entries:
        if entry.get("status") != "collected" or entry["source"] in seen:
            continue
        seen.add(entry["source"])
        out.append(entry)
    return sorted(out, key=lambda e: len(posixpath.normpath(e["source"]).split("/")))


async def _install_all(session: Any, root: Path, entries: list[dict[str, Any]]) -> None:
    staging = f"/tmp/.acx-restore-{uuid.uuid4().hex[:10]}"
    installed: list[tuple[dict[str, Any], str, str]] = []
    try:
        # Stage everything first: a transfer failure leaves the workspace untouched.
        staged = []
        for index, entry in enumerate(entries):
            local = root / entry["destination"]
            remote = f"{staging}/s{index}"
            if entry["kind"] == "directory":
                await session.upload_dir(str(local), remote)
            else:
                await session.upload(str(local), remote)
            staged.append((entry, remote, f"{staging}/b{index}"))
        for entry, remote, backup in staged:
            await _sh(session, _INSTALL, entry["source"], remote, backup, entry["kind"])
            installed.append((entry, remote, backup))
    except BaseException:
        with trio.CancelScope(shield=True), trio.move_on_after(60):
            for entry, remote, backup in reversed(installed):
                await _sh(session, _ROLLBACK, entry["source"], remote, backup, entry["kind"], check=False)
            await session.exec(["rm", "-rf", staging])
        raise
    await session.exec(["rm", "-rf", staging])


async def _sh(session: Any, script: str, *args: str, check: bool = True) -> None:
    res = await session.exec(["sh", "-c", script, "acx-restore", *args])
    if check and not res.ok:
        raise DriverError(
            f"installing artifact {args[0]} failed (exit {res.returncode})", code="artifact_restore_failed"
        )
