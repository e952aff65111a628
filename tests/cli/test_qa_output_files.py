"""QA: `-o FILE` and `acx fmt FILE` write through symlinks, never replace special files, and fail
with a diagnostic (E0217, exit 2) instead of an internal error."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from acx.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPEC = 'run x {\n  benchmark exact_match { dataset = "data/lang-qa.jsonl" }\n  harness command { command = "e" }\n}\n'


@pytest.fixture()
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.acx"
    path.write_text(SPEC, encoding="utf-8")
    return path


@pytest.mark.parametrize("dry_run", [False, True])
def test_output_to_a_directory_is_a_clear_error(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    # contract P8
    target = tmp_path / "out"
    target.mkdir()
    assert main(["compile", str(spec), "-o", str(target), *(["--dry-run"] if dry_run else [])]) == 2
    err = capsys.readouterr().err
    assert "error[E0217]" in err and f"`-o {target}`" in err and "is a directory" in err
    assert "internal error" not in err
    assert list(target.iterdir()) == [] and [p.name for p in tmp_path.glob(".*.tmp")] == []


def test_output_to_an_uncreatable_path_is_a_clear_error(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract P8
    assert main(["compile", str(spec), "-o", "/proc/acx-qa-no-such-dir/x.json"]) == 2
    err = capsys.readouterr().err
    assert "error[E0217]" in err and "internal error" not in err
    blocker = spec.parent / "file"
    blocker.write_text("x", encoding="utf-8")
    assert main(["compile", str(spec), "--dry-run", "-o", str(blocker / "p.txt")]) == 2
    assert "error[E0217]" in capsys.readouterr().err


@pytest.mark.parametrize("dry_run", [False, True])
def test_output_writes_through_a_symlink(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    # contract P8
    real = tmp_path / "real.txt"
    real.write_text("old\n", encoding="utf-8")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to("real.txt")
    args = ["compile", str(spec), "-o", str(link), *(["--dry-run", "--format", "json"] if dry_run else [])]
    assert main(args) == 0
    assert link.is_symlink() and os.readlink(link) == "real.txt"
    assert json.loads(real.read_text(encoding="utf-8"))
    # A dry run keeps the target's mode; a compiled program is owner-only whatever it replaces (V1).
    assert real.stat().st_mode & 0o777 == (0o640 if dry_run else 0o600)


def test_output_to_a_fifo_or_character_device_writes_in_place(
    spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # contract P8
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open does not block
    try:
        assert main(["compile", str(spec), "--dry-run", "-o", str(fifo)]) == 0
        data = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert data.startswith(b"orchestration x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not replaced by a file
    assert main(["compile", str(spec), "-o", os.devnull]) == 0
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


def test_fmt_formats_the_target_of_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract P8
    real = tmp_path / "real.acx"
    real.write_text("let  x =  1\n", encoding="utf-8")
    link = tmp_path / "link.acx"
    link.symlink_to("real.acx")
    assert main(["fmt", str(link)]) == 0
    assert link.is_symlink() and real.read_text(encoding="utf-8") == "let x = 1\n"


def test_nul_in_a_dataset_path_is_a_user_error_for_plans(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # contract P8
    spec.write_text(SPEC.replace("data/lang-qa.jsonl", "data/x\\u0000"), encoding="utf-8")
    for command in (["check"], ["compile", "--dry-run"], ["compile", "--plans"]):
        assert main([*command, str(spec)]) == 2
        err = capsys.readouterr().err
        assert "error[E0204]" in err and "NUL" in err and "benchmark.dataset" in err
