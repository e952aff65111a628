"""Artifact planning (contracts A1–A4): convention dir, overrides, destinations, save policy.

A benchmark that collects artifacts always collects ``/logs/artifacts`` (A1); ``artifacts = []``
means "no extra paths", not "off"; only the class-level ``collect_artifacts = False`` disables
collection, and then any explicit override (even ``[]``) is refused as unsupported (A3).
"""

from __future__ import annotations

import posixpath

from acx.components import DEFAULT_ARTIFACTS_DIR
from acx.errors import AcxPlanError
from acx.ir import ArtifactSpec, ExecutionSpec

__all__ = ["check_artifact_overrides", "finalize_artifacts", "resolve_save_artifacts"]

_CONVENTION = ArtifactSpec(source=DEFAULT_ARTIFACTS_DIR, destination=DEFAULT_ARTIFACTS_DIR.lstrip("/"))


def check_artifact_overrides(execution: ExecutionSpec, *, supported: bool, benchmark_id: str) -> None:
    """A3: a benchmark with ``collect_artifacts = false`` rejects any explicit override."""
    if supported:
        return
    for field in ("artifacts", "artifact_collect"):
        if getattr(execution, field) is not None:
            raise AcxPlanError(
                f"execution.{field} is unsupported: benchmark {benchmark_id!r} does not collect artifacts "
                "(collect_artifacts = false)",
                code="E0423",
                path=f"execution.{field}",
                help=f"remove execution.{field} (unset or null); even [] counts as an override here",
            )


def _bad(task_id: str, message: str) -> AcxPlanError:
    return AcxPlanError(
        f"task {task_id!r}: {message}",
        code="E0424",
        path="execution.artifacts",
        help="sources are absolute sandbox paths; destinations are relative paths inside the attempt's "
        "artifacts/ directory and must not overlap",
    )


def _normalise(spec: ArtifactSpec, task_id: str) -> ArtifactSpec:
    src = spec.source
    if not src.startswith("/") or ".." in src.split("/"):
        raise _bad(task_id, f"artifact source must be an absolute path without `..`, got {src!r}")
    src = posixpath.normpath(src)
    if spec.service != "main":
        raise _bad(task_id, f"artifact {src!r}: service {spec.service!r} is not supported (main only)")
    dest = spec.destination if spec.destination is not None else src.lstrip("/")
    if dest.startswith("/") or ".." in dest.split("/") or dest in ("", "."):
        raise _bad(task_id, f"artifact destination must be a relative path without `..`, got {dest!r}")
    dest = posixpath.normpath(dest)
    if dest.startswith("submission-") and dest.endswith(".manifest.json"):
        raise _bad(task_id, f"artifact destination {dest!r} collides with the artifact manifest")
    if src == spec.source and dest == spec.destination:
        return spec
    return ArtifactSpec(source=src, destination=dest, exclude=spec.exclude, service=spec.service)


def _under(child: str, parent: str) -> str | None:
    """``child`` relative to ``parent`` when nested, else None."""
    if child == parent:
        return ""
    prefix = parent.rstrip("/") + "/"
    return child[len(prefix) :] if child.startswith(prefix) else None


def finalize_artifacts(
    extra: list[ArtifactSpec], *, task_id: str, mode: str, warnings: list[str]
) -> list[ArtifactSpec]:
    """Convention dir first (an explicit entry for it keeps its excludes), then the extra paths.

    Equal destinations: the first declaration wins, with a warning (A1). Nested destinations are
    fine when the sources nest the same way (a child path collected on its own); otherwise they
    overlap (A4). In fresh mode one source with different excludes cannot be restored (error).
    """
    specs = [_normalise(s, task_id) for s in extra]
    if not any(s.source == DEFAULT_ARTIFACTS_DIR and s.destination == _CONVENTION.destination for s in specs):
        specs.insert(0, _CONVENTION)
    out: list[ArtifactSpec] = []
    by_dest: dict[str, ArtifactSpec] = {}
    for spec in specs:
        dest = spec.destination or ""
        first = by_dest.get(dest)
        if first is not None:
            if first != spec:
                warnings.append(
                    f"task {task_id!r}: artifact {spec.source!r} → {dest!r} ignored: destination already "
                    f"taken by {first.source!r} (first declaration wins)"
                )
            continue
        for other in out:
            _check_nesting(other, spec, task_id, mode)
        by_dest[dest] = spec
        out.append(spec)
    return out


def _check_nesting(a: ArtifactSpec, b: ArtifactSpec, task_id: str, mode: str) -> None:
    da, db = a.destination or "", b.destination or ""
    for parent, child in ((a, b), (b, a)):
        rel = _under(child.destination or "", parent.destination or "")
        if rel is None:
            continue
        if _under(child.source, parent.source) != rel:
            raise _bad(
                task_id,
                f"artifact destinations {da!r} and {db!r} overlap but their sources "
                f"({a.source!r}, {b.source!r}) do not nest the same way",
            )
    if mode == "fresh" and a.source == b.source and a.exclude != b.exclude:
        raise _bad(
            task_id,
            f"artifact source {a.source!r} is declared twice with different excludes; "
            "a fresh verifier cannot restore both",
        )


def resolve_save_artifacts(explicit: bool | None, mode: str, task_id: str) -> bool:
    """A2: unset/null → true for fresh, false for reuse/none; explicit false with fresh is an error."""
    if explicit is None:
        return mode == "fresh"
    if not explicit and mode == "fresh":
        raise AcxPlanError(
            f"task {task_id!r}: execution.save_artifacts is false, but evaluation is fresh: "
            "the verifier needs the saved artifacts",
            code="E0422",
            path="execution.save_artifacts",
            help="remove save_artifacts (fresh saves by default) or choose evaluation_environment_mode reuse",
        )
    return explicit
