"""The `dataset` benchmark's input limits (issue 24 item 9): bytes read, bytes decoded and rows are
bounded for every format with a located E0219, and `.gz` datasets are read (HumanEval ships
`HumanEval.jsonl.gz`). Contract B4 (loading is deterministic and bounded); the limits are those of
acx.inputs (MAX_DATASET_BYTES, MAX_DATASET_ROWS)."""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from acx.components._configs import DatasetConfig
from acx.components.datasets import load_dataset
from acx.errors import AcxPlanError
from acx.inputs import MAX_DATASET_BYTES, MAX_DATASET_ROWS

ROWS = [{"id": f"q{i}", "input": f"what is {i}+{i}?", "target": str(2 * i)} for i in range(3)]


def _load(path: Path, **kw: object) -> list:
    return load_dataset(DatasetConfig(path=path.name, **kw), path.parent)  # type: ignore[arg-type]


def test_a_gzipped_jsonl_dataset_loads(tmp_path: Path) -> None:
    # contract B4: HumanEval-style .jsonl.gz, read as the JSONL inside, ids and order kept
    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in ROWS)
    tasks = _load(path)
    assert [t.task_id for t in tasks] == ["q0", "q1", "q2"] and tasks[2].ground_truth == "4"


@pytest.mark.parametrize("name", ["d.csv.gz", "d.json.gz"])
def test_other_gzipped_text_formats_load(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name.endswith(".csv.gz"):
        text = "id,input,target\n" + "".join(f"{r['id']},{r['input']},{r['target']}\n" for r in ROWS)
    else:
        text = json.dumps(ROWS)
    path.write_bytes(gzip.compress(text.encode()))
    assert [t.task_id for t in _load(path)] == ["q0", "q1", "q2"]


@pytest.mark.parametrize("name", ["big.jsonl", "big.csv", "big.json", "big.parquet"])
def test_a_file_above_the_byte_limit_is_refused_before_it_is_read(tmp_path: Path, name: str) -> None:
    # a sparse file: its size is what is checked, before a byte is read (a 1 GB JSONL line
    # compiled for 230 s at 2 GiB before)
    path = tmp_path / name
    with path.open("wb") as fh:
        fh.truncate(MAX_DATASET_BYTES + 1)
    with pytest.raises(AcxPlanError) as info:
        _load(path)
    err = info.value
    assert err.code == "E0219" and err.path == "benchmark.params.path" and "above the limit" in str(err)
    assert "docs/errors.md#E0219" in (err.help or "")


def test_a_gzip_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # a few hundred KB that decompress past the limit (zeros, no newline: one endless "line"),
    # loaded in a child process whose peak memory is measured
    path = tmp_path / "bomb.jsonl.gz"
    chunk = b"0" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for _ in range(MAX_DATASET_BYTES // len(chunk) + 8):
            fh.write(chunk)
    assert path.stat().st_size < 8 * 2**20
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from acx.components._configs import DatasetConfig
        from acx.components.datasets import load_dataset
        from acx.errors import AcxPlanError
        try:
            load_dataset(DatasetConfig(path="bomb.jsonl.gz"), Path({str(tmp_path)!r}))
        except AcxPlanError as exc:
            print(exc.code, exc)
        """
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert proc.stdout.startswith("E0219") and "decompresses to more than" in proc.stdout, proc.stderr[-2000:]
    # bounded, not fast: the limit's worth of one line plus the interpreter, with 4x room
    assert max(peak_kib, before) < 4 * (MAX_DATASET_BYTES + 200 * 2**20) // 1024


def test_a_truncated_gzip_file_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in ROWS) * 50)[:40])
    with pytest.raises(AcxPlanError) as info:
        _load(path)
    assert info.value.code == "E0402" and "not a readable gzip file" in str(info.value)


def test_a_small_parquet_file_of_too_many_rows_is_refused_before_decoding(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    n = MAX_DATASET_ROWS + 1
    column = pa.DictionaryArray.from_arrays(pa.array([0] * n, type=pa.int8()), pa.array(["same row"]))
    ids = pa.array(range(n))
    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"id": ids, "input": column, "target": column}), path)
    assert path.stat().st_size < 16 * 2**20
    with pytest.raises(AcxPlanError) as info:
        _load(path)
    assert info.value.code == "E0219" and f"more than {MAX_DATASET_ROWS:,}" in str(info.value)


def test_a_parquet_file_that_decodes_past_the_byte_limit_is_refused(tmp_path: Path) -> None:
    # dictionary encoding: one 8 KB string repeated 40,000 times is a tiny file and 320 MB of rows
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    n = 40_000
    big = pa.DictionaryArray.from_arrays(pa.array([0] * n, type=pa.int8()), pa.array(["x" * 8192]))
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"id": pa.array(range(n)), "input": big, "target": big}), path)
    assert path.stat().st_size < 16 * 2**20
    with pytest.raises(AcxPlanError) as info:
        _load(path)
    assert info.value.code == "E0219" and "decodes to more than" in str(info.value)


def test_rows_beyond_the_limit_in_jsonl_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the row bound holds for streamed formats too (a lower limit, so the test stays small)
    from acx.components.datasets import _formats

    monkeypatch.setattr(_formats, "MAX_DATASET_ROWS", 5)
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}", "input": "x", "target": "y"}) + "\n" for i in range(6)))
    with pytest.raises(AcxPlanError) as info:
        _load(path)
    assert info.value.code == "E0219" and "more than 5 rows" in str(info.value)
    os.unlink(path)
