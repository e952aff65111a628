"""Parquet rows through pyarrow — the only module that imports it (optional: ``acx-eval[parquet]``).

Rows are read batch by batch (``iter_batches``), so memory stays bounded by the batch size.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acx.components.datasets._formats import Locator
from acx.errors import AcxPlanError

__all__ = ["iter_parquet"]

_BATCH_ROWS = 8192


def iter_parquet(path: Path) -> Iterator[tuple[Locator, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise AcxPlanError(
            f"dataset {path} is Parquet, which needs the optional dependency pyarrow",
            code="E0407",
            path="benchmark.params.path",
            help="install it: pip install 'acx-eval[parquet]' (or convert the file to JSONL)",
        ) from None
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
    index = 0
    for batch in reader.iter_batches(batch_size=_BATCH_ROWS):
        for record in batch.to_pylist():
            index += 1
            yield Locator(name, record=index, kind="row"), record
