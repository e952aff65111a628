"""What a task declares that acx does not honour is said in every attempt's result, not only at
load (contract H6; issue 22: `mcp_servers` and other declarations acx cannot honour)."""

from __future__ import annotations

from pathlib import Path

import msgspec
from interp_helpers import FakeBench, PyHarness, program, read_results, run, run_dir, tasks


def test_load_warnings_reach_each_attempts_issues(tmp_path: Path) -> None:
    # contract H6
    warning = "tasks/a/task.toml:7: unmapped declaration `environment.mcp_servers` is not mapped; ignored"
    first, second = tasks(2)
    first = msgspec.structs.replace(first, load_warnings=[warning])
    result = run([program(FakeBench(), PyHarness(), [first, second])], tmp_path)
    results = read_results(run_dir(result))
    (a,) = results["t0"]
    issues = [i for i in a["issues"] if i["code"] == "task_declaration_ignored"]
    assert [(i["severity"], i["phase"], i["message"]) for i in issues] == [("warning", "setup", warning)]
    assert a["status"] == "completed"  # a warning, never an error of the attempt
    assert not any(i["code"] == "task_declaration_ignored" for i in results["t1"][0]["issues"])
