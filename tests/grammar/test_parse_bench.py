"""The parse benchmark stays runnable, and its .acx and YAML specs stay twins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "parse_bench.py"


def test_parse_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("parse_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # A small spec and a generous budget: this checks the harness, not the machine's speed.
    assert module.main(["--lines", "150", "--repeat", "2", "--budget-ms", "5000"]) == 0
    out = capsys.readouterr().out
    assert "warm parse + lower + type-check (.acx)" in out and "ratio .acx/YAML" in out
