"""``acx results``/``acx report``/``acx view`` options with a fixed set of values refuse any other
value with the valid ones listed (exit 2); filters on the run's own values (category, error code)
that match no task say so (contract R12: nothing accepted and silently ignored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from acx.cli import main
from acx.ir import TaskStatus
from acx.testing.results import synthetic_tasks, write_run


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "r", synthetic_tasks(12, seed=3, error_rate=0.2))


def test_unknown_status_is_refused_listing_the_valid_ones(run_dir: Path, capsys) -> None:  # contract R12
    with pytest.raises(SystemExit) as e:
        main(["results", "tasks", str(run_dir), "--status", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--status" in err and "'bogus'" in err and "Traceback" not in err
    for status in (*get_args(TaskStatus), "running"):
        assert status in err


def test_the_cli_statuses_are_the_ir_statuses() -> None:  # the CLI list must not drift from acx.ir
    from acx.cli._results import _STATUSES

    assert set(_STATUSES) == {*get_args(TaskStatus), "running"}


def test_every_valid_status_filters(run_dir: Path, capsys) -> None:
    for status in (*get_args(TaskStatus), "running"):
        assert main(["results", "tasks", str(run_dir), "--status", status, "--format", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)["tasks"]
        assert all(r["status"] == status for r in rows)
    assert main(["results", "tasks", str(run_dir), "--status", "run_error", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"]  # the synthetic run has run errors


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["results", "tasks", "{run}", "--state", "broken"], "--state"),
        (["results", "tasks", "{run}", "--score", "great"], "--score"),
        (["results", "tasks", "{run}", "--format", "xml"], "--format"),
        (["results", "show", "{run}", "--format", "xml"], "--format"),
        (["results", "compare", "{run}", "{run}", "--format", "xml"], "--format"),
        (["results", "compare", "{run}", "{run}", "--limit", "-1"], "--limit"),
    ],
)
def test_other_enumerated_options_refuse_unknown_values(run_dir: Path, capsys, argv: list[str], flag: str) -> None:
    with pytest.raises(SystemExit) as e:
        main([a.replace("{run}", str(run_dir)) for a in argv])
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


def test_a_category_or_code_no_task_has_is_noted(run_dir: Path, capsys) -> None:  # contract R12
    assert main(["results", "tasks", str(run_dir), "--category", "cat-99"]) == 0
    out, err = capsys.readouterr()
    assert "0 of 12 task(s)" in out
    assert "no task of this run has category 'cat-99'" in err and "cat-0" in err
    assert main(["results", "tasks", str(run_dir), "--code", "E_NOPE"]) == 0
    err = capsys.readouterr().err
    assert "no task of this run has error code 'E_NOPE'" in err
    assert any(code in err for code in ("run_timeout", "harness_failed", "model_failed"))
    assert main(["results", "tasks", str(run_dir), "--category", "cat-1"]) == 0
    assert capsys.readouterr().err == ""  # a category the run has: no note


def _foreign_address() -> str:
    """A documentation address (RFC 5737) that is none of this machine's: a bind to it fails
    locally, no packet is sent (some test machines number their own interfaces from TEST-NET)."""
    import errno
    import socket

    for candidate in ("203.0.113.77", "198.51.100.77", "192.0.2.77"):
        with socket.socket() as s:
            try:
                s.bind((candidate, 0))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    return candidate
    raise AssertionError("every candidate address is this machine's")


def test_view_blames_the_host_for_an_address_not_of_this_machine(tmp_path: Path, capsys) -> None:  # R12
    assert main(["view", str(tmp_path), "--host", _foreign_address(), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("--host: error[E0642]") and "127.0.0.1" in err
