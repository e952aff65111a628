"""examples/plugin is pip-installed (a real build, into its own target directory) and run end to
end: its benchmark and harness are listed, documented, validated, schema'd, explained and run like
built-ins. The test venv itself stays clean (the committed-schema test must not see the plugin).

# contract B2 (typed, documented component configs) R12 (unknown ids are located errors)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "examples" / "plugin"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed with pip (its own build) into a directory put on PYTHONPATH."""
    target = tmp_path_factory.mktemp("plugin-site")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(PLUGIN)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (target / "acx_example_plugin-0.1.0.dist-info" / "entry_points.txt").is_file()
    return target


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    shutil.copy(PLUGIN / "eval.acx", tmp_path / "eval.acx")
    (tmp_path / ".git").mkdir()  # the project-config search stops here
    return tmp_path


def _acx(site: Path | None, *args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    path = pythonpath or site
    if path is not None:
        env["PYTHONPATH"] = str(path)
    env["XDG_CONFIG_HOME"] = str(cwd / "xdg")
    return subprocess.run(
        [sys.executable, "-m", "acx", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_listed_and_documented_like_builtins(site: Path, workdir: Path) -> None:  # contract B2
    res = _acx(site, "list", "harness", cwd=workdir)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("word_counter"))
    assert "Counts words with a shell command" in line and "[plugin acx-example-plugin]" in line
    res = _acx(site, "list", "benchmark", "--format", "json", cwd=workdir)
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert rows["word_count"]["origin"] == "plugin acx-example-plugin"
    res = _acx(site, "config", "docs", "benchmark", "word_count", cwd=workdir)
    assert res.returncode == 0 and "sentences" in res.stdout and "one task per sentence" in res.stdout
    # without the plugin installed the ids are unknown (nothing leaks in from elsewhere)
    res = _acx(None, "list", "harness", cwd=workdir)
    assert "word_counter" not in res.stdout


def test_validated_schema_and_explained_like_builtins(site: Path, workdir: Path) -> None:  # contract B2 R12
    bad = workdir / "bad.acx"
    bad.write_text((workdir / "eval.acx").read_text().replace('"hello"]', '"hello"]\n    category = 3'))
    res = _acx(site, "validate", "bad.acx", cwd=workdir)
    assert res.returncode == 2 and "error[E0204]" in res.stderr and "bad.acx:" in res.stderr, res.stderr
    res = _acx(site, "schema", "--out", "schemas", cwd=workdir)
    assert res.returncode == 0, res.stderr
    schema = json.loads((workdir / "schemas" / "run_config.schema.json").read_text())
    assert "word_count" in schema["properties"]["benchmarks"]["anyOf"][0]["properties"]
    assert "sentences" in schema["$defs"]["benchmark.word_count"]["properties"]
    assert "command" in schema["$defs"]["harness.word_counter"]["properties"]
    res = _acx(site, "explain", "eval.acx", "word_count_demo", "harness.params.command", cwd=workdir)
    assert res.returncode == 0 and "wc -w" in res.stdout and "default" in res.stdout, res.stdout + res.stderr


def test_example_spec_is_fmt_clean_and_valid(site: Path, workdir: Path) -> None:
    res = _acx(site, "fmt", "--check", "eval.acx", cwd=workdir)
    assert res.returncode == 0, res.stdout + res.stderr
    res = _acx(site, "check", "eval.acx", cwd=workdir)
    assert res.returncode == 0, res.stdout + res.stderr


def test_runs_end_to_end(site: Path, workdir: Path) -> None:
    res = _acx(site, "run", "eval.acx", "--results-dir", "r", "--progress", "none", cwd=workdir)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "word_count_demo: completed — correct.avg@1 = 1.000 — 3 task(s)" in res.stdout
    (run_dir,) = (workdir / "r" / "word_count_demo").iterdir()
    results = [json.loads(p.read_text()) for p in run_dir.glob("details/*/*/attempt-1/result.json")]
    assert sorted((r["task_id"], r["final_answer"], r["metrics"]["correct"]) for r in results) == [
        ("s-1", "4", True),
        ("s-2", "5", True),
        ("s-3", "1", True),
    ]


def test_module_class_ids_without_installing(workdir: Path) -> None:  # contract R12
    spec = workdir / "byref.yaml"
    spec.write_text(
        "version: 1\nrequests:\n  - name: byref\n"
        "    benchmark: {id: 'acx_example_plugin.benchmark:WordCountBenchmark', sentences: ['a b c']}\n"
        "    harness: {id: 'acx_example_plugin.harness:WordCounterHarness'}\n"
        "    environment: {id: host_process, evaluation_environment_mode: none}\n"
    )
    src = PLUGIN / "src"
    res = _acx(None, "run", "byref.yaml", "--results-dir", "r", "--progress", "none", cwd=workdir, pythonpath=src)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "correct.avg@1 = 1.000" in res.stdout
    res = _acx(None, "validate", "byref.yaml", cwd=workdir)  # not importable here: located E0301
    assert res.returncode == 2 and "error[E0301]" in res.stderr
    assert "cannot import module `acx_example_plugin.benchmark`" in res.stderr and "byref.yaml:4:" in res.stderr
