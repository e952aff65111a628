"""Start-up stays light: `acx --help` and `acx compile --dry-run` import no heavy edge library."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("trio", "docker", "lark", "jsonschema", "rich", "httpx", "requests")

PROBE = """
import json, sys
from acx.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
sys.stderr.write("HEAVY=" + json.dumps(heavy) + "\\n")
"""


def _heavy(argv: list[str], cwd) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *argv], capture_output=True, text=True, cwd=cwd, timeout=60
    )
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY="))
    return json.loads(line[len("HEAVY=") :])


def test_help_imports_nothing_heavy(tmp_path) -> None:
    assert _heavy(["--help"], tmp_path) == []


def test_dry_run_imports_nothing_heavy(project, write) -> None:  # contract P8: side-effect free and fast
    write(
        "orch.yaml",
        "version: 1\nrequests:\n  - name: a\n    benchmark: {id: exact_match, dataset: q.jsonl}\n"
        "    harness: {id: none}\n",
    )
    assert _heavy(["compile", "orch.yaml", "--dry-run", "--format", "json"], project) == []


def test_compile_with_plans_imports_no_run_time_library(project, write) -> None:  # contract P8
    # plan time only: capabilities are probed and every plan made, yet trio, the docker SDK and
    # the HTTP client stay unimported (acx.api.plan_one is the edge)
    write("q.jsonl", '{"id": "1", "question": "2+2?", "answer": "4"}\n')
    write(
        "orch.yaml",
        "version: 1\nrequests:\n  - name: a\n    benchmark: {id: exact_match, dataset: q.jsonl}\n"
        "    harness: {id: command, command: 'echo 4'}\n    environment: {id: docker}\n",
    )
    heavy = _heavy(["compile", "orch.yaml", "-o", "plan.json"], project)
    assert not {"trio", "docker", "httpx"} & set(heavy), heavy
    assert (project / "plan.json").is_file()
