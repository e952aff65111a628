"""Every field of Harbor's task.toml schema is handled by acx's loader (issue 22, contract H6).

``data/harbor_task_fields.txt`` lists the fields of Harbor's pydantic models (``TaskConfig`` and
everything under it), extracted from the real package by ``scripts/harbor_task_fields.py``
(Harbor needs Python 3.12, acx's test environment cannot install it). Each field is set, alone,
in a task.toml of its own and loaded:

* **mapped** — it loads with no warning about it, and the TaskSpec differs from the one without
  it (so it is not silently dropped);
* **warning** — it loads with a ``task.toml:LINE`` load warning naming it (or its table);
* **refused** — E0413 naming it, with a remedy.

docs/harbor.md's field table must list every field (a ``prefix.*`` row covers a whole table) and
say which of the three acx does; the test holds the table to the loader's actual behaviour.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from acx.components.harbor_task import load_harbor_task
from acx.errors import AcxPlanError

DATA = Path(__file__).parent / "data" / "harbor_task_fields.txt"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "harbor.md"


def _fields() -> list[str]:
    lines = DATA.read_text().splitlines()
    assert lines[0].startswith("# harbor 0.26"), lines[0]
    return [line.split("\t")[0] for line in lines[1:] if line.strip()]


FIELDS = _fields()

#: Samples by a field's last name: valid, and not Harbor's default (so a mapping shows).
LEAF: dict[str, Any] = {
    "network_mode": "no-network",
    "timeout_sec": 17.0,
    "build_timeout_sec": 123.0,
    "user": "agent",
    "env": {"K": "v"},
    "docker_image": "img:1",
    "os": "windows",
    "cpus": 2,
    "memory_mb": 1024,
    "storage_mb": 2048,
    "gpus": 1,
    "gpu_types": ["H100"],
    "skills_dir": "/skills",
    "workdir": "/work",
    "allow_internet": False,
    "memory": "2G",
    "storage": "10G",
    "name": "org/thing",
    "version": "7",
    "description": "what it is",
    "keywords": ["k"],
    "email": "a@example.org",
    "schema_version": "1.3",
    "source": "somewhere",
    "metadata": {"difficulty": "hard"},
    "command": "true",
    "interval_sec": 3.0,
    "start_period_sec": 1.0,
    "start_interval_sec": 2.0,
    "retries": 5,
    "type": "v6e",
    "topology": "2x2",
    "transport": "stdio",
    "url": "http://mcp.example.org/sse",
    "args": ["--x"],
    "headers": {"X-Team": "acx"},
    "min_reward": 0.5,
    "destination": "out/x",
    "exclude": ["*.tmp"],
    "source_path": "/app/x",
    "multi_step_reward_strategy": "final",
}

#: Whole samples by Harbor path (tables, lists of tables, fields whose value needs context).
WHOLE: dict[str, Any] = {
    "task": {"name": "org/thing"},
    "task.authors": [{"name": "Ada"}],
    "verifier": {"timeout_sec": 17.0},
    "agent": {"timeout_sec": 17.0},
    "environment": {"cpus": 2},
    "solution": {"env": {"K": "v"}},
    "verifier.environment": {},
    "verifier.collect": [{"command": "true"}],
    "verifier.collect[].service": "main",  # the only service acx has (others are refused)
    "verifier.collect[].user": "root",
    "environment.tpu": {"type": "v6e", "topology": "2x2"},
    "environment.healthcheck": {"command": "true"},
    "environment.mcp_servers": [{"name": "m", "transport": "stdio", "command": "mcp"}],
    "environment.mcp_servers[].name": "m2",  # a name prefixes the tools: letters, digits, _ and -
    "steps": [{"name": "s"}],
    "steps[].name": "s",
    "steps[].agent": {"timeout_sec": 17.0},
    "steps[].verifier": {"timeout_sec": 17.0},
    "steps[].verifier.environment_mode": "shared",  # the default acx runs; `separate` is refused
    "steps[].verifier.environment": {},
    "steps[].healthcheck": {"command": "true"},
    "steps[].artifacts": ["/app/x"],
    "artifacts": ["/app/x"],
    "artifacts[].service": "main",  # the only service acx has (others are refused)
    "verifier.environment_mode": "separate",
}

#: Mapped fields whose only accepted value is Harbor's default: the TaskSpec cannot differ.
DEFAULT_ONLY = {
    "verifier.collect[].service",
    "artifacts[].service",
    "steps[].verifier.collect[].service",
    "steps[].artifacts[].service",
    "steps[].verifier.environment_mode",
}


def _sample(path: str) -> Any:
    for candidate in (
        path,
        re.sub(r"^steps\[\]\.", "", path),  # a step's agent/verifier tables are the task's
        re.sub(r"^(steps\[\]\.)?verifier\.environment\.", "environment.", path),
    ):
        if candidate in WHOLE:
            return WHOLE[candidate]
    leaf = path.rsplit(".", 1)[-1]
    if leaf == "source" and "artifacts" in path:
        return LEAF["source_path"]
    if leaf == "allowed_hosts":
        return ["example.org"]
    return LEAF[leaf]


#: What a table (or a list element) of each name needs beside the field under test.
REQUIRED: dict[str, dict[str, Any]] = {
    "steps": {"name": "s"},
    "task": {"name": "org/thing"},
    "authors": {"name": "Ada"},
    "collect": {"command": "true"},
    "artifacts": {"source": "/app/x"},
    "mcp_servers": {"name": "m", "transport": "stdio", "command": "mcp"},
    "healthcheck": {"command": "true"},
    "tpu": {"type": "v6e", "topology": "2x2"},
}

#: ... where it depends on the field: an HTTP server for the fields only HTTP servers have.
REQUIRED_FOR: dict[tuple[str, str], dict[str, Any]] = {
    ("mcp_servers", "url"): {"name": "m", "transport": "sse"},
    ("mcp_servers", "headers"): {"name": "m", "transport": "sse", "url": "http://mcp.example.org/sse"},
}


def _nest(path: str, value: Any) -> dict[str, Any]:
    """The task.toml data that sets ``path`` (and what it needs beside it) to ``value``."""
    parts = path.split(".")
    key = parts[0].removesuffix("[]")
    if len(parts) == 1:
        return {key: value}
    inner = _nest(".".join(parts[1:]), value)
    if parts[1] == "allowed_hosts":
        inner["network_mode"] = "allowlist"
    table = {**REQUIRED_FOR.get((key, parts[-1]), REQUIRED.get(key, {})), **inner}
    return {key: [table] if parts[0].endswith("[]") else table}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"


def _toml(data: dict[str, Any]) -> str:
    return "".join(f"{k} = {_toml_value(v)}\n" for k, v in data.items())


def _write_task(root: Path, data: dict[str, Any]) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM scratch\n")
    (root / "instruction.md").write_text("Do it.\n")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (root / "steps" / "s").mkdir(parents=True)
    (root / "steps" / "s" / "instruction.md").write_text("Step.\n")
    (root / "task.toml").write_text(_toml(data))
    return root


def _multi_step(path: str) -> bool:
    return path.startswith("steps") or path == "multi_step_reward_strategy"


def _acx_path(path: str) -> str:
    return path.replace("[]", ".0")


def _spec(root: Path, data: dict[str, Any]) -> dict[str, Any]:
    t = load_harbor_task(_write_task(root, data))
    out = msgspec.to_builtins(t)
    out["metadata"].pop("harbor_raw")
    for key in ("task_dir", "tests_dir", "solution_dir", "environment_dir"):
        out["metadata"].pop(key)
    for step in out["steps"]:
        step["metadata"] = {k: v for k, v in step["metadata"].items() if not k.endswith("_dir")}
    out["load_warnings"] = t.load_warnings
    return out


def behaviour(path: str, tmp_path: Path) -> str:
    """What acx's loader does with ``path`` set alone: mapped, warning or refused."""
    base = {"steps": [{"name": "s"}]} if _multi_step(path) else {}
    data = _nest(path, _sample(path))
    if "steps" in data and "steps" in base:
        data["steps"] = [{**base["steps"][0], **data["steps"][0]}]
    data = {**base, **data}
    acx_path = _acx_path(path)
    parents = [acx_path.rsplit(".", n)[0] for n in range(acx_path.count(".") + 1)]
    try:
        got = _spec(tmp_path / "with", data)
    except AcxPlanError as exc:
        assert exc.code == "E0413", f"{path}: {exc}"
        assert any(f"`{p}`" in str(exc) for p in parents), f"{path}: {exc}"
        assert exc.help, path
        return "refused"
    warned = [w for w in got["load_warnings"] if any(f"`{p}`" in w for p in parents)]
    if warned:
        assert all(re.search(r"task\.toml:\d+: ", w) for w in warned), warned
        return "warning"
    assert not got["load_warnings"], f"{path}: {got['load_warnings']}"
    if path not in DEFAULT_ONLY and not path.endswith(("agent", "verifier", "environment", "solution")):
        without = _spec(tmp_path / "without", base)
        assert got != without, f"{path} loads without a warning but changes nothing: silently ignored"
    return "mapped"


def _docs_table() -> dict[str, str]:
    """docs/harbor.md's field table: `path` → mapped | warning | refused."""
    rows: dict[str, str] = {}
    for line in DOCS.read_text().splitlines():
        m = re.match(r"^\| `([^`]+)` \| \*\*(mapped|warning|refused)\*\*", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def _documented(path: str, table: dict[str, str]) -> str | None:
    if path in table:
        return table[path]
    parts = path.split(".")
    for n in range(len(parts) - 1, 0, -1):
        row = ".".join(parts[:n]) + ".*"
        if row in table:
            return table[row]
    return None


@pytest.mark.parametrize("path", FIELDS)
def test_every_harbor_field_is_handled_as_docs_harbor_md_says(path: str, tmp_path: Path) -> None:
    documented = _documented(path, _docs_table())
    assert documented is not None, f"docs/harbor.md's field table does not list `{path}`"
    assert behaviour(path, tmp_path) == documented, path


def test_the_field_list_is_harbors_whole_schema() -> None:
    # a spot check that the committed list is the full walk, nested models included
    for path in (
        "steps[].verifier.environment.healthcheck.retries",
        "environment.mcp_servers[].headers",
        "verifier.collect[].user",
        "task.authors[].email",
        "version",
    ):
        assert path in FIELDS, path
    assert len(FIELDS) == len(set(FIELDS)) > 150
