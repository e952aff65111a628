"""The library API: acx.compile / acx.run (and the async forms) do what the command does.

# contract P8 (compile is side-effect free and imports no run-time library) R13 (bad input is an
# error before anything runs)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import trio

import acx
from acx.cli import main
from acx.ir import CompiledProgram, decode_program

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "examples", tmp_path / "ex")
    (tmp_path / ".git").mkdir()  # the project-config search stops here
    monkeypatch.chdir(tmp_path)
    return tmp_path / "ex" / "quickstart.acx"


def test_compile_is_the_program_acx_compile_writes(quickstart: Path) -> None:  # contract P8
    program = acx.compile(quickstart)
    assert isinstance(program, CompiledProgram) and program.content_hash == program.compute_hash()
    assert main(["compile", str(quickstart), "-o", "plan.json"]) == 0
    written = decode_program(Path("plan.json").read_bytes())
    assert written.content_hash == program.content_hash
    assert [r.name for r in program.requests] == ["quickstart"] and len(program.requests[0].tasks) == 10
    subset = acx.compile(quickstart, tasks="add-[12]")
    assert [t.task_id for t in subset.requests[0].tasks] == ["add-1", "add-2"]


def test_compile_imports_no_run_time_library(quickstart: Path) -> None:  # contract P8
    probe = (
        "import sys, acx; p = acx.compile(sys.argv[1]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'trio', 'docker', 'httpx'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(quickstart)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_a_spec_and_a_compiled_program(quickstart: Path) -> None:
    result = acx.run(quickstart, runtime={"results_dir": "r", "progress": "none"}, run_id="first")
    assert result.exit_code == 0 and result.status == "completed"
    (outcome,) = result.requests
    assert outcome.run_dir and Path(outcome.run_dir) == Path("r/quickstart/first").resolve()
    metrics = json.loads((Path(outcome.run_dir) / "metrics.json").read_text())
    assert metrics  # the run wrote its report
    program = acx.compile(quickstart, tasks="add-1")
    again = acx.run(program, runtime={"results_dir": "r", "progress": "none"}, run_id="second")
    assert again.exit_code == 0 and again.requests[0].counts.get("completed", 1) >= 1
    assert sorted(p.name for p in Path("r/quickstart").iterdir()) == ["first", "second"]


def test_run_async_for_trio_users(quickstart: Path) -> None:
    events: list[str] = []

    async def go() -> acx.interpreter.OrchestrationResult:
        return await acx.run_async(
            quickstart,
            tasks="add-*",
            runtime={"results_dir": "r", "progress": "none"},
            progress=lambda e: events.append(e.event),
        )

    result = trio.run(go)
    assert result.exit_code == 0 and events


def test_bad_input_raises_before_anything_runs(quickstart: Path) -> None:  # contract R13
    with pytest.raises(acx.AcxUserError) as exc:
        acx.run(quickstart, environment="dokcer", runtime={"results_dir": "r"})
    assert exc.value.code == "E0301" and "did you mean `docker`" in (exc.value.help or "")
    program = acx.compile(quickstart)
    with pytest.raises(acx.AcxUserError) as exc:
        acx.run(program, tasks="add-1", runtime={"results_dir": "r"})
    assert exc.value.code == "E0614"
    Path("edited.json").write_bytes(msgspec.json.encode(msgspec.structs.replace(program, content_hash="sha256:0")))
    with pytest.raises(acx.AcxUserError) as exc:
        acx.run("edited.json", runtime={"results_dir": "r"})
    assert exc.value.code == "E0613"
    assert not Path("r").exists()
