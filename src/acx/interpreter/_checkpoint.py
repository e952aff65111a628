"""Evaluation checkpoints and evaluation-only recovery (contract A9).

After the run stage of an attempt whose evaluation mode is ``none`` or ``fresh`` has collected
everything (and before the evaluation runs), the attempt writes ``attempt-N/checkpoint.json``
(schema :data:`CHECKPOINT_SCHEMA`, owner-only, scrubbed): the classified inference inputs (the
run result before evaluation — answer, trajectory, telemetry/usage — and the trajectory file),
the preparation inputs evaluation needs (the PreparedTask), the network policies, the artifact
integrity data (manifest name and checksum; the manifest holds every file's checksum) and the
fingerprints of the inputs the evaluation depends on (task, task files, tests, benchmark params).
A failed scoring never rewrites it: the file is written once, before evaluation.

Recovery (:func:`check`) re-evaluates an attempt from its checkpoint without running the agent
when every recorded input still matches; otherwise it says what changed and the attempt reruns
(``--resume``/``--reuse``) or is reported unrecoverable (``acx regrade``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from acx.interpreter._fs import PRIVATE, atomic_write_bytes, encode_scrubbed_json, task_dir_name
from acx.interpreter._store import FINAL_STATES, read_json
from acx.ir import ExecutionPlan, PreparedTask, RunResult, TaskSpec, content_hash, to_builtins
from acx.secrets import Scrubber

if TYPE_CHECKING:
    from acx.components import BaseBenchmark

__all__ = [
    "CHECKPOINT_NAME",
    "CHECKPOINT_SCHEMA",
    "EVALUATION_INPUT_KINDS",
    "RECOVERABLE_MODES",
    "Recovery",
    "RecoveryPolicy",
    "build",
    "check",
    "evaluation_failed",
    "find",
    "fingerprints",
    "reopen_for_recovery",
    "restore_into",
    "write",
]

CHECKPOINT_SCHEMA = "acx.evaluation_checkpoint.v1"
CHECKPOINT_NAME = "checkpoint.json"
RECOVERABLE_MODES = ("none", "fresh")
#: Input kinds that belong to the evaluation (a regrade may change them on purpose).
EVALUATION_INPUT_KINDS = frozenset({"tests", "benchmark_params"})
#: Files of an attempt that recovery carries into the recovering attempt directory.
_CARRIED = ("model_calls.json",)
_MAX_FILES = 20_000


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tree(root: Path, skip: tuple[Path, ...]) -> dict[str, str]:
    """relative path → sha256 of every regular file under ``root`` (a file: itself), links as
    ``link:<target>``; subtrees in ``skip`` are left to their own kind."""
    if root.is_file():
        return {root.name: _sha256(root)}
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if (here / d) not in skip)
        for name in sorted(filenames):
            p = here / name
            rel = p.relative_to(root).as_posix()
            out[rel] = f"link:{os.readlink(p)}" if p.is_symlink() else _sha256(p)
            if len(out) > _MAX_FILES:
                return {"<too many files>": str(len(out))}
    return out


def fingerprints(benchmark: BaseBenchmark, task: TaskSpec, benchmark_params: Any) -> dict[str, Any]:
    """What the evaluation of ``task`` depends on besides the agent's output: the task as loaded,
    the benchmark params, and the files the benchmark names (``recovery_inputs(task)`` → kind →
    path, e.g. Harbor's ``task_files`` and ``tests``)."""
    out: dict[str, Any] = {
        "task": content_hash(task),
        "benchmark_params": content_hash(benchmark_params),
    }
    paths: Mapping[str, str] = benchmark.recovery_inputs(task)
    resolved = {kind: Path(p).resolve() for kind, p in paths.items() if p}
    for kind, root in sorted(resolved.items()):
        others = tuple(r for k, r in resolved.items() if k != kind and r != root)
        out[kind] = _tree(root, others) if root.exists() else None
    return out


def build(
    *,
    run_id: str,
    task: TaskSpec,
    attempt: int,
    plan: ExecutionPlan,
    result: RunResult,
    prepared: PreparedTask,
    artifacts: Mapping[str, Any],
    attempt_dir: Path,
    inputs: Mapping[str, Any],
    transcript_sha256: str | None = None,
) -> dict[str, Any]:
    """The checkpoint record. ``transcript_sha256``: the digest of the ``model_calls.json`` this
    try wrote, taken from the bytes as they were written (saves reading the file back); without
    it the file in ``attempt_dir`` is hashed, if there is one."""
    manifest_name = artifacts.get("manifest")
    manifest: dict[str, Any] | None = None
    if manifest_name:
        path = attempt_dir / str(manifest_name)
        manifest = {"name": str(manifest_name), "sha256": _sha256(path)}
    digest = transcript_sha256
    if digest is None:
        trajectory = attempt_dir / "model_calls.json"
        digest = _sha256(trajectory) if trajectory.is_file() else None
    return {
        "schema_version": CHECKPOINT_SCHEMA,
        "task_id": task.task_id,
        "attempt": attempt,
        "source_run_id": run_id,
        "evaluation_mode": plan.evaluation_environment_mode,
        "run_completed": True,
        "inference": {
            "run_result": to_builtins(result),
            "trajectory_file": "model_calls.json" if digest is not None else None,
            "trajectory_sha256": digest,
        },
        "preparation": {"prepared_task": to_builtins(prepared)},
        "network_policies": {
            "run": to_builtins(plan.run_network_policy),
            "evaluation": to_builtins(plan.evaluation_network_policy),
        },
        "artifacts": {
            "collect": plan.collect_artifacts,
            "declared": to_builtins(plan.artifacts),
            "manifest": manifest,
            "declared_artifacts": artifacts.get("declared_artifacts"),
        },
        "inputs": dict(inputs),
    }


def write(attempt_dir: Path, checkpoint: dict[str, Any], scrub: Scrubber) -> Path:
    """Atomic, owner-only, secrets scrubbed; parents created on demand by the write.

    No fsync of its own (it cost ≈1.4 ms of the trio thread per attempt, half the interpreter's
    overhead in bench/run_overhead.py): the checkpoint is written before the evaluation, so the
    group-commit round (``syncfs`` of the results filesystem) that makes the attempt's result
    durable makes it durable too. A machine crash before that round loses at most the checkpoint
    of an attempt whose result was not recorded either: it has no usable checkpoint (missing, or
    unreadable: :func:`check` refuses it) and reruns, as without checkpoints. A killed process
    loses nothing (the file is in the page cache).
    """
    path = attempt_dir / CHECKPOINT_NAME
    atomic_write_bytes(path, encode_scrubbed_json(checkpoint, scrub), fsync=False, mode=PRIVATE)
    return path


def find(run_dir: Path, task_id: str, attempt: int) -> Path | None:
    """The attempt's checkpoint in ``run_dir`` (unfinished or finished task), if any."""
    name = task_dir_name(task_id)
    for state in ("running", *FINAL_STATES):
        path = run_dir / "details" / state / name / f"attempt-{attempt}" / CHECKPOINT_NAME
        if path.is_file():
            return path
    return None


@dataclass(frozen=True)
class Recovery:
    """A checkpoint that passed :func:`check`: the agent's side of the attempt, restored."""

    path: Path
    result: RunResult
    prepared: PreparedTask
    #: Evaluation inputs that differ from the checkpoint (only a regrade accepts them).
    changed: tuple[str, ...] = ()


def _diff(kind: str, old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        shown = ", ".join(changed[:5]) + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else "")
        return f"{kind} changed: {shown}"
    if new is None:
        return f"{kind} missing"
    return f"{kind} changed"


def check(
    path: Path,
    *,
    task: TaskSpec,
    attempt: int,
    plan: ExecutionPlan,
    inputs: Mapping[str, Any],
    allow_evaluation_changes: bool = False,
    scrub: Scrubber | None = None,
) -> Recovery | str:
    """The checkpoint at ``path`` as a :class:`Recovery`, or why it cannot be used (a sentence
    naming what changed or is missing).

    ``scrub``: the run's scrubber. The file was written scrubbed (:func:`write`), so the current
    values are compared as they would be written: a secret that happens to equal a field's value
    can never make an unchanged checkpoint look changed."""
    written: Callable[[Any], Any] = scrub.tree if scrub else (lambda obj: obj)
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        return f"checkpoint unreadable: {exc}"
    if not isinstance(data, dict) or data.get("schema_version") != CHECKPOINT_SCHEMA:
        return "checkpoint has an unknown schema"
    if data.get("task_id") != written(task.task_id) or data.get("attempt") != attempt:
        return "checkpoint belongs to another task or attempt"
    mode = plan.evaluation_environment_mode
    if mode not in RECOVERABLE_MODES:
        return f"evaluation mode {mode!r} evaluates in the run sandbox, which is gone: the attempt reruns"
    if data.get("evaluation_mode") != written(mode):
        return f"evaluation mode changed: {data.get('evaluation_mode')!r} → {mode!r}"
    if data.get("network_policies", {}).get("evaluation") != written(to_builtins(plan.evaluation_network_policy)):
        return "evaluation network policy changed"
    old_inputs = data.get("inputs") or {}
    inputs = written(dict(inputs))
    changed: list[str] = []
    for kind in sorted(old_inputs.keys() | inputs.keys()):
        old, new = old_inputs.get(kind), inputs.get(kind)
        if old == new:
            continue
        if allow_evaluation_changes and kind in EVALUATION_INPUT_KINDS:
            changed.append(_diff(kind, old, new))
            continue
        return _diff("task content" if kind == "task" else kind.replace("_", " "), old, new)
    problem = _artifacts_problem(path.parent, data.get("artifacts") or {}, plan, written)
    if problem is not None:
        return problem
    inference = data.get("inference") or {}
    traj = inference.get("trajectory_file")
    if traj:
        tpath = path.parent / traj
        if not tpath.is_file() or _sha256(tpath) != inference.get("trajectory_sha256"):
            return f"trajectory file {traj} missing or changed"
    try:
        result = msgspec.convert(inference.get("run_result"), RunResult)
        prepared = msgspec.convert((data.get("preparation") or {}).get("prepared_task"), PreparedTask)
    except (msgspec.ValidationError, TypeError) as exc:
        return f"checkpoint run result unreadable: {exc}"
    return Recovery(path=path, result=result, prepared=prepared, changed=tuple(changed))


def _artifacts_problem(
    attempt_dir: Path, recorded: Mapping[str, Any], plan: ExecutionPlan, written: Callable[[Any], Any]
) -> str | None:
    """Artifact integrity (A6/A7): the manifest recorded, unchanged, and every collected file's
    checksum as it lists them; the current plan's declarations covered by the recorded ones."""
    if plan.collect_artifacts and not recorded.get("collect"):
        return "artifacts are collected now but were not when the checkpoint was written"
    if written(to_builtins(plan.artifacts)) != recorded.get("declared") and plan.collect_artifacts:
        return "declared artifacts changed"
    manifest = recorded.get("manifest")
    if not manifest:
        return None
    from acx.interpreter import _artifacts

    mpath = attempt_dir / str(manifest.get("name"))
    if not mpath.is_file():
        return f"artifact manifest {manifest.get('name')} missing"
    if _sha256(mpath) != manifest.get("sha256"):
        return f"artifact manifest {manifest.get('name')} changed"
    try:
        doc = read_json(mpath)
        root = attempt_dir / doc.get("directory", _artifacts.ARTIFACTS_DIR)
        for entry in _artifacts._restorable(doc.get("entries", [])):
            problem = _artifacts._verify(root, entry)
            if problem is not None:
                return f"artifact {entry['source']}: {problem}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"artifact manifest {manifest.get('name')} unreadable: {exc}"
    return None


def restore_into(recovery: Recovery, attempt_dir: Path) -> None:
    """Copy the checkpoint, its manifest, artifacts and trajectory file into ``attempt_dir`` (a
    recovery from another run: real copies, never hard links; symlinks stay symlinks)."""
    src = recovery.path.parent
    if src.resolve() == attempt_dir.resolve():
        return
    attempt_dir.mkdir(parents=True, exist_ok=True)
    data = read_json(recovery.path)
    names = [CHECKPOINT_NAME, *_CARRIED]
    manifest = (data.get("artifacts") or {}).get("manifest")
    if manifest:
        names.append(str(manifest["name"]))
        from acx.interpreter import _artifacts

        doc = read_json(src / str(manifest["name"]))
        directory = doc.get("directory", _artifacts.ARTIFACTS_DIR)
        if (src / directory).exists():
            shutil.copytree(src / directory, attempt_dir / directory, symlinks=True, dirs_exist_ok=True)
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, attempt_dir / name)
            if name == CHECKPOINT_NAME:
                os.chmod(attempt_dir / name, PRIVATE)


@dataclass
class RecoveryPolicy:
    """Where a request looks for checkpoints, and what a refusal means.

    ``kind``: ``resume`` (this run's own directory), ``reuse`` (the reused run) — a refused or
    missing checkpoint means the attempt runs normally, the reason recorded —, or ``regrade``
    (the source run of ``acx regrade``): no agent ever runs; an attempt that cannot be recovered
    is recorded as such.
    """

    source: Path
    kind: str
    source_run_id: str = ""
    #: (task id, attempt) whose evaluation failed in the source: without a checkpoint (evaluation
    #: mode ``reuse``) they rerun, and say why.
    eval_failed: set[tuple[str, int]] = field(default_factory=set)
    #: ``--recovery strict``: an attempt up for evaluation-only recovery whose checkpoint is
    #: refused (or missing) is marked ``eval_error`` with the reason — its agent never runs again.
    strict: bool = False

    @property
    def no_agent(self) -> bool:
        return self.kind == "regrade"


def evaluation_failed(result: Mapping[str, Any]) -> bool:
    """An attempt whose agent phase completed and whose evaluation failed (S2 ``eval_error``)."""
    return result.get("status") == "eval_error"


def reopen_for_recovery(task_dir: Path, running_dir: Path) -> list[int]:
    """``--resume``: a finished task with attempts whose evaluation failed goes back to
    ``running/``; each such attempt's result moves to ``retries/<id>/`` (A8: kept, not counted),
    so the attempt is evaluated again (from its checkpoint) or reruns. Returns those attempts."""
    reopened: list[int] = []
    for res in sorted(task_dir.glob("attempt-*/result.json")):
        try:
            data = read_json(res)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not evaluation_failed(data):
            continue
        dest = res.parent / "retries" / f"evaluation-{uuid.uuid4().hex[:8]}"
        dest.mkdir(parents=True)
        res.rename(dest / "result.json")
        reopened.append(int(res.parent.name.split("-", 1)[1]))
    if reopened:
        (task_dir / "task.json").unlink(missing_ok=True)
        running_dir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(task_dir, running_dir)
    return reopened
