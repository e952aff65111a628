"""JSONL is read in batches (issue 30): a batch of plain rows is decoded into typed structs in one
call, any other batch row by row. Whatever the batch boundaries, the tasks and the errors are
those of the row-by-row reader (a transform forces that path: it sees every raw record)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acx.components._configs import DatasetConfig
from acx.components.datasets import _formats, load_dataset
from acx.errors import AcxPlanError


def _config(path: Path, **extra: Any) -> DatasetConfig:
    return msgspec.convert({"path": str(path), **extra}, DatasetConfig)


def _row_by_row(config: DatasetConfig, base: Path) -> Any:
    return load_dataset(config, base, transform=lambda record, loc: record)


def _lines(n: int, *, extra_at: int | None = None, blank_at: int | None = None) -> str:
    out = []
    for i in range(n):
        row: dict[str, Any] = {"id": f"q{i}", "input": f"what is {i}?", "target": str(i), "subject": f"s{i % 3}"}
        if i == extra_at:
            row["note"] = None  # an unmapped column: this row's metadata keeps it
        out.append(json.dumps(row))
        if i == blank_at:
            out.append("   ")
    return "\n".join(out) + "\n"


@pytest.fixture(params=[64, 300, 1 << 22], ids=["tiny-batches", "small-batches", "one-batch"])
def batch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(_formats, "_BATCH_BYTES", request.param)
    return int(request.param)


@pytest.mark.parametrize(
    "text",
    [
        _lines(40),
        _lines(40, extra_at=17),
        _lines(40, blank_at=9),
        _lines(40).rstrip("\n"),  # no newline at the end
        "\n\n" + _lines(5) + "\n\n",
        _lines(40).replace("\n", "\r\n"),
    ],
    ids=["plain", "an-extra-column", "a-blank-line", "no-final-newline", "blank-edges", "crlf"],
)
@pytest.mark.parametrize("select", [{}, {"limit": 7}, {"shuffle": True, "seed": 3, "limit": 11}])
def test_batches_give_the_row_by_row_tasks(tmp_path: Path, batch: int, text: str, select: dict[str, Any]) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    config = _config(path, fields={"category": "subject"}, **select)
    got = load_dataset(config, tmp_path)
    assert got == _row_by_row(config, tmp_path)
    assert got and all(t.metadata["row"] >= 1 for t in got)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"id": "q3", "input": "x", "target": "y"}', "duplicate task id 'q3'"),
        ('{"id": " q99", "input": "x", "target": "y"}', "is not a non-empty string"),
        ('{"id": "q99", "input": "x", "target": "y"},{"id": "q98", "input": "x", "target": "y"}', "not valid JSON"),
        ('{"id": "q99", "input": 5, "target": "y"}', "input is a int"),
        ("[1, 2]", "is a JSON list"),
    ],
)
def test_an_error_in_a_later_batch_names_its_line(tmp_path: Path, batch: int, bad: str, message: str) -> None:
    path = tmp_path / "d.jsonl"
    lines = _lines(30).splitlines()
    lines.insert(24, bad)
    path.write_text("\n".join(lines) + "\n")
    config = _config(path, fields={"category": "subject"})
    with pytest.raises(AcxPlanError) as info:
        load_dataset(config, tmp_path)
    with pytest.raises(AcxPlanError) as expected:
        _row_by_row(config, tmp_path)
    assert message in str(info.value)
    assert info.value.diagnostics[0].span is not None and info.value.diagnostics[0].span.line == 25
    assert str(info.value) == str(expected.value)


_FREEZE_PROBE = """
import gc, json, sys
from pathlib import Path
import msgspec
from acx.components._configs import DatasetConfig
from acx.components.datasets import load_dataset
from acx.errors import AcxPlanError

base = Path(sys.argv[1])
out = {}
for name in ("small.jsonl", "large.jsonl", "broken.jsonl"):
    gc.unfreeze()
    try:
        load_dataset(msgspec.convert({"path": name}, DatasetConfig), base)
    except AcxPlanError:
        pass
    out[name] = [gc.isenabled(), gc.get_freeze_count() > 0]
print(json.dumps(out))
"""


def test_a_large_file_freezes_its_tasks_out_of_the_collector_a_small_or_failed_one_does_not(
    tmp_path: Path,
) -> None:  # issue 30: the collector stops walking a million loaded tasks; it stays enabled
    import subprocess
    import sys

    row = json.dumps({"id": "q", "input": "x" * 200, "target": "1"})
    large = "".join(row.replace('"q"', f'"q{i}"', 1) + "\n" for i in range(16 * 1024 * 1024 // len(row) + 1))
    (tmp_path / "large.jsonl").write_text(large)
    (tmp_path / "small.jsonl").write_text(row + "\n")
    (tmp_path / "broken.jsonl").write_text(large + "{not json\n")
    # In a process of its own: gc.freeze() is process-wide, and pytest's worker must not keep it.
    res = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got == {"small.jsonl": [True, False], "large.jsonl": [True, True], "broken.jsonl": [True, False]}
