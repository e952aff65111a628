"""Parquet and Arrow rows through pyarrow — the only module that imports it (optional:
``acx-eval[parquet]``).

Rows are read batch by batch, so memory stays bounded by the batch size. Arrow covers a Hugging
Face ``Dataset.save_to_disk`` folder (``state.json`` listing ``data-*.arrow`` shards in the Arrow
streaming format) and single ``.arrow`` files (streaming or file format).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acx.components.datasets._formats import Locator
from acx.errors import AcxPlanError

__all__ = ["arrow_shards", "iter_arrow", "iter_parquet"]

_BATCH_ROWS = 8192


def _no_pyarrow(path: Path, what: str) -> AcxPlanError:
    return AcxPlanError(
        f"dataset {path} is {what}, which needs the optional dependency pyarrow",
        code="E0407",
        path="benchmark.params.path",
        help="install it: pip install 'acx-eval[parquet]' (or convert the file to JSONL)",
    )


def iter_parquet(path: Path) -> Iterator[tuple[Locator, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise _no_pyarrow(path, "Parquet") from None
    name = str(path)
    try:
        reader = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError family
        raise AcxPlanError(
            f"dataset {path} is not a readable Parquet file: {exc}",
            code="E0402",
            path=name,
            help="check that the file is Parquet (e.g. written by pandas/datasets `to_parquet`)",
        ) from None
    from acx.components.datasets._formats import too_large
    from acx.inputs import MAX_DATASET_ROWS

    rows = reader.metadata.num_rows
    if rows > MAX_DATASET_ROWS:  # said before a row is decoded (a few MB can hold millions)
        raise too_large(path, f"has {rows:,} rows, more than {MAX_DATASET_ROWS:,}")
    index = 0
    for batch in reader.iter_batches(batch_size=_BATCH_ROWS):
        for record in batch.to_pylist():
            index += 1
            yield Locator(name, record=index, kind="row"), record


def arrow_shards(directory: Path) -> list[Path]:
    """The shards of a ``save_to_disk`` folder, in order, from its ``state.json``."""
    import json

    state = directory / "state.json"
    try:
        files = json.loads(state.read_text(encoding="utf-8"))["_data_files"]
        shards = [directory / str(f["filename"]) for f in files]
    except (OSError, ValueError, KeyError, TypeError):
        raise AcxPlanError(
            f"{state} does not list the dataset's shards (`_data_files`)",
            code="E0402",
            path=str(state),
            help="point `path` at a folder written by Hugging Face `Dataset.save_to_disk`, or at one data file",
        ) from None
    missing = [s for s in shards if not s.is_file()]
    if not shards or missing:
        raise AcxPlanError(
            f"{state} lists {len(shards)} shard(s); missing: {', '.join(m.name for m in missing) or 'all'}",
            code="E0401",
            path=str(state),
            help="copy the whole save_to_disk folder",
        )
    return shards


def iter_arrow(path: Path) -> Iterator[tuple[Locator, Any]]:
    """Rows of one ``.arrow`` file, or of every shard of a ``save_to_disk`` folder (row numbers
    count across the shards; the locator names the shard)."""
    try:
        import pyarrow.ipc  # noqa: F401
    except ImportError:
        raise _no_pyarrow(path, "Arrow") from None
    shards = arrow_shards(path) if path.is_dir() else [path]
    index = 0
    for shard in shards:
        for batch in _arrow_batches(shard):
            for record in batch.to_pylist():
                index += 1
                yield Locator(str(shard), record=index, kind="row"), record


def _arrow_batches(path: Path) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    try:
        reader = ipc.open_stream(pa.memory_map(str(path)))
        yield from reader
        return
    except pa.ArrowInvalid:
        pass
    try:
        file_reader = ipc.open_file(pa.memory_map(str(path)))
    except pa.ArrowInvalid as exc:
        raise AcxPlanError(
            f"dataset {path} is not an Arrow stream or file: {exc}",
            code="E0402",
            path=str(path),
            help="`.arrow` files are read as written by Hugging Face `save_to_disk` or pyarrow",
        ) from None
    for i in range(file_reader.num_record_batches):
        yield file_reader.get_batch(i)
