"""``acx results export``: a run directory written out in another tool's format, with a manifest
of what that format could not hold (docs/results.md, "Other tools")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from acx.errors import AcxResultsError
from acx.results._interop import Manifest, RunView, atomic_write, dumps, load_view, prepare_out_dir, sync_all

__all__ = ["EXPORT_FORMATS", "INSPECT_FORMATS", "ExportWritten", "export_run"]

EXPORT_FORMATS = ("inspect", "harbor", "atif")
INSPECT_FORMATS = ("eval", "json")


@dataclass(frozen=True)
class ExportWritten:
    """What an export wrote: its files (relative to ``out``) and its manifest."""

    out: Path
    files: list[str]
    manifest: str
    not_represented: int


def manifest_name(run_id: str, kind: str) -> str:
    # Not a time-stamped *.json name: Inspect's log listing would take it for a log.
    return f"acx-export-{run_id}-{kind}.manifest.json"


def export_run(
    run_dir: str | os.PathLike[str], fmt: str, out: str | os.PathLike[str], *, inspect_format: str = "eval"
) -> ExportWritten:
    """Export the run in ``run_dir`` as ``fmt`` (``inspect``, ``harbor``, ``atif``) into ``out``."""
    if fmt not in EXPORT_FORMATS:
        raise AcxResultsError(
            f"unknown export format {fmt!r}", code="E0652", help="choose one of: " + ", ".join(EXPORT_FORMATS)
        )
    if inspect_format not in INSPECT_FORMATS:
        raise AcxResultsError(
            f"unknown Inspect log format {inspect_format!r}",
            code="E0652",
            help="choose one of: " + ", ".join(INSPECT_FORMATS),
        )
    view = load_view(run_dir)
    manifest = Manifest(fmt, {"tool": "acx", "run_id": view.run_id, "path": str(view.reader.path)})
    files: dict[str, bytes]
    if fmt == "inspect":
        files = _inspect_files(view, manifest, inspect_format)
    else:
        from acx.results._harbor import atif_files, harbor_files

        files = harbor_files(view, manifest) if fmt == "harbor" else atif_files(view, manifest)
    target = Path(out)
    name = manifest_name(view.run_id, f"inspect-{inspect_format}" if fmt == "inspect" else fmt)
    tops = sorted({p.split("/", 1)[0] for p in files} | {name})
    prepare_out_dir(target, tops)
    for rel, data in files.items():
        atomic_write(target / rel, data, fsync=False)
    # The manifest is written last and only once the files are durable: an export with a
    # manifest is whole, even after a crash.
    sync_all()
    manifest.files = sorted(files)
    atomic_write(target / name, dumps(manifest.to_json()))
    return ExportWritten(target, sorted(files), name, len(manifest.omitted))


def _inspect_files(view: RunView, manifest: Manifest, inspect_format: str) -> dict[str, bytes]:
    from acx.results._inspect import inspect_log, log_file_name, reductions_of, write_eval_zip, write_json_log

    header, samples = inspect_log(view, manifest)
    reductions = reductions_of(view)
    writer = write_eval_zip if inspect_format == "eval" else write_json_log
    return {log_file_name(header, inspect_format): writer(header, samples, reductions)}
