"""Two interpreter fixes: kept sandboxes are labelled for gc; ``acx run plan.json`` shows warnings."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from interp_helpers import FakeBench, PyHarness, program, run, tasks

from acx.cli import main
from acx.drivers.docker import LABEL_KEEP, is_orphan
from acx.drivers.fake import FakeDriver
from acx.ir import ExecutionSpec
from acx.ir._program import decode_program

REPO = Path(__file__).resolve().parents[2]


def test_keep_environment_labels_the_session_for_gc(tmp_path: Path) -> None:  # contract E1
    driver = FakeDriver()
    ex = ExecutionSpec(keep_environment=True)
    run([program(FakeBench(), PyHarness(), tasks(2), driver=driver, execution=ex)], tmp_path)
    assert len(driver.opened) == 2
    for req in driver.opened:
        assert req.labels[LABEL_KEEP] == "true"
        # the docker gc honours it: a kept object of a dead run is not an orphan
        dead = {**req.labels, "acx.pid": "999999999"}
        assert not is_orphan(dead)


def test_sessions_are_not_labelled_kept_by_default(tmp_path: Path) -> None:  # contract E1
    driver = FakeDriver()
    run([program(FakeBench(), PyHarness(), tasks(1), driver=driver)], tmp_path)
    assert LABEL_KEEP not in driver.opened[0].labels


def test_run_plan_json_prints_the_programs_planner_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # contract P7
    plan = tmp_path / "plan.json"
    assert main(["compile", str(REPO / "examples" / "quickstart.acx"), "-o", str(plan)]) == 0
    program_ = decode_program(plan.read_bytes())
    req = program_.requests[0]
    warned = msgspec.structs.replace(
        req, warnings=["task 'q1': artifact '/a' is ignored", "task 'q1': artifact '/a' is ignored", "other"]
    )
    sealed = msgspec.structs.replace(program_, requests=[warned]).sealed()
    plan.write_bytes(msgspec.json.encode(sealed))
    capsys.readouterr()
    code = main(["run", str(plan), "--results-dir", str(tmp_path / "res"), "--progress", "none"])
    out = capsys.readouterr()
    assert code == 0, out.err
    name = req.name
    assert f"acx: warning: request {name!r}: task 'q1': artifact '/a' is ignored (2 tasks)\n" in out.err
    assert f"acx: warning: request {name!r}: other\n" in out.err
    assert "warning" not in out.out  # stdout stays the report


def test_run_plan_json_without_warnings_prints_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.json"
    assert main(["compile", str(REPO / "examples" / "quickstart.acx"), "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["run", str(plan), "--results-dir", str(tmp_path / "res"), "--progress", "none"]) == 0
    assert "warning" not in capsys.readouterr().err
