"""Fixtures for planner tests: datasets and Harbor task directories."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def dataset(tmp_path: Path) -> Callable[..., Path]:
    def write(records: list[Any] | str, name: str = "d.jsonl") -> Path:
        path = tmp_path / name
        if isinstance(records, str):
            path.write_text(records)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return path

    return write


@pytest.fixture
def harbor_task(tmp_path: Path) -> Callable[..., Path]:
    """Write a Harbor task dir: ``harbor_task("name", toml_text, dockerfile=...)``."""

    def make(
        name: str = "hello",
        toml: str = "",
        *,
        root: Path | None = None,
        dockerfile: str | None = "FROM acx-test/bookworm:latest\nWORKDIR /app\n",
        instruction: str = "Say hello.\n",
    ) -> Path:
        d = (root or tmp_path) / name
        (d / "tests").mkdir(parents=True)
        (d / "task.toml").write_text(textwrap.dedent(toml))
        (d / "instruction.md").write_text(instruction)
        (d / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
        if dockerfile is not None:
            (d / "environment").mkdir()
            (d / "environment" / "Dockerfile").write_text(dockerfile)
        return d

    return make
