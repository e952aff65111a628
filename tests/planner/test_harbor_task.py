"""Harbor task.toml → TaskSpec (contracts H1–H6, B1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec import UNSET

import acx.ir as ir
from acx.components.benchmarks.harbor import load_harbor_dataset
from acx.components.harbor_task import dockerfile_workdir, load_harbor_task, parse_size_mib
from acx.errors import AcxPlanError

FULL = """
schema_version = "1.4"
source = "terminal-bench"
artifacts = ["/app/out.txt", {source = "/app/dir", destination = "dir", exclude = ["*.tmp"]}]

[task]
name = "acx/hello"
version = "2024-01"
description = "Say hello"
authors = [{name = "Ada"}]
keywords = ["demo"]

[metadata]
category = "demo"
difficulty = "easy"
source = "free-form loses"

[agent]
timeout_sec = 300.0
network_mode = "allowlist"
allowed_hosts = ["pypi.org"]

[verifier]
timeout_sec = 120
env = { GRADER_KEY = "${GRADER_KEY}" }
network_mode = "no-network"

[verifier.environment]
docker_image = "verifier:1"
workdir = "/grade"
network_mode = "no-network"
env = { MODE = "strict" }
cpus = 1

[[verifier.collect]]
command = "cp /app/out.txt /logs/artifacts/"
timeout_sec = 30

[solution]
env = { SOLUTION_TOKEN = "${SOLUTION_TOKEN}" }

[environment]
docker_image = "runner:1"
workdir = "/app"
build_timeout_sec = 900
os = "Linux"
cpus = 2
memory_mb = 4096
storage = "10G"
gpus = 0
network_mode = "public"
env = { HF_HOME = "/cache", TOKEN = "${HF_TOKEN:-anon}" }
"""


def test_full_mapping(harbor_task) -> None:  # contract H1
    t = load_harbor_task(harbor_task("hello", FULL))
    assert t.task_id == "hello"
    assert t.question == "Say hello."
    assert t.run_timeout_seconds == 300.0
    assert t.evaluation_timeout_seconds == 120.0
    assert t.environment_setup == ir.EnvironmentSetup(
        image="runner:1", workdir="/app", build_timeout_seconds=900.0, os="linux"
    )
    assert t.resources == ir.ResourceRequirements(cpu=2.0, memory_mb=4096, storage_mb=10240, gpu=0)
    assert t.baseline_network_policy == ir.NetworkPolicy(network_mode="public")
    assert t.run_network_policy == ir.NetworkPolicy(network_mode="allowlist", allowed_hosts=["pypi.org"])
    assert t.evaluation_network_policy == ir.NetworkPolicy(network_mode="no-network")
    assert t.env_variables == {"HF_HOME": "/cache", "TOKEN": "${HF_TOKEN:-anon}"}
    assert t.require_startup_env is True
    assert t.evaluation_env_variables == {"GRADER_KEY": "${GRADER_KEY}"}
    assert t.evaluation_environment_env_variables == {"MODE": "strict"}
    assert t.evaluation_environment_mode == "fresh"
    assert t.evaluation_environment_setup == ir.EnvironmentSetup(image="verifier:1", workdir="/grade")
    assert t.evaluation_baseline_network_policy == ir.NetworkPolicy(network_mode="no-network")
    assert t.evaluation_resources == ir.ResourceRequirements(cpu=1.0)
    assert t.artifacts == [
        ir.ArtifactSpec(source="/app/out.txt"),
        ir.ArtifactSpec(source="/app/dir", destination="dir", exclude=["*.tmp"]),
    ]
    assert t.artifact_collect == [
        ir.ArtifactCollectCommand(command="cp /app/out.txt /logs/artifacts/", timeout_seconds=30.0)
    ]
    assert t.category == "demo"
    assert t.load_warnings == []


def test_metadata_source_package_raw(harbor_task) -> None:  # contract H6
    d = harbor_task("hello", FULL)
    t = load_harbor_task(d)
    assert t.metadata["source"] == "terminal-bench"  # explicit declaration beats [metadata]
    assert t.metadata["task"]["version"] == "2024-01"  # not semver, still accepted
    assert t.metadata["task"]["name"] == "acx/hello"
    assert t.metadata["difficulty"] == "easy"
    assert t.metadata["harbor_raw"]["environment"]["storage"] == "10G"  # raw kept unchanged
    assert t.metadata["task_dir"] == str(d.resolve())
    assert t.metadata["tests_dir"] == str((d / "tests").resolve())
    assert t.metadata["solution_env"] == {"SOLUTION_TOKEN": "${SOLUTION_TOKEN}"}
    assert t.metadata["dockerfile_workdir"] == "/app"


def test_tests_are_evaluation_only(harbor_task) -> None:  # contract B1
    t = load_harbor_task(harbor_task("hello", FULL))
    assert t.ground_truth is None
    assert "reward.txt" not in t.question
    assert all("reward" not in str(v) for k, v in t.metadata.items() if k != "harbor_raw")


def test_solution_env_only_when_enabled(harbor_task) -> None:  # contract H6
    d = harbor_task("hello", FULL)
    assert load_harbor_task(d).run_env_variables == {}
    assert load_harbor_task(d, solution_env_for_agent=True).run_env_variables == {"SOLUTION_TOKEN": "${SOLUTION_TOKEN}"}


def test_minimal_task_maps_only_explicit_timeouts(harbor_task) -> None:  # contract T1
    t = load_harbor_task(harbor_task("m", ""))
    assert t.run_timeout_seconds is UNSET
    assert t.evaluation_timeout_seconds is UNSET
    assert t.evaluation_environment_mode is None
    assert t.artifacts is None and t.artifact_collect is None
    assert t.evaluation_environment_setup is None  # no verifier env declared → inherits (H2)
    assert t.metadata["schema_version"] is None


def test_verifier_modes(harbor_task) -> None:  # contract H2
    assert (
        load_harbor_task(harbor_task("a", '[verifier]\nenvironment_mode = "shared"\n')).evaluation_environment_mode
        == "reuse"
    )
    sep = load_harbor_task(harbor_task("b", '[verifier]\nenvironment_mode = "separate"\n'))
    assert sep.evaluation_environment_mode == "fresh"
    assert sep.evaluation_environment_setup is None  # separate without a table: inherits
    empty = load_harbor_task(harbor_task("c", "[verifier.environment]\n"))
    assert empty.evaluation_environment_mode == "fresh"
    assert empty.evaluation_environment_setup == ir.EnvironmentSetup()  # explicit empty: independent
    assert empty.evaluation_baseline_network_policy == ir.NetworkPolicy()  # H4: own default public
    assert empty.evaluation_environment_env_variables is None


def test_shared_with_environment_is_error(harbor_task) -> None:  # contract H2
    d = harbor_task("a", '[verifier]\nenvironment_mode = "shared"\n\n[verifier.environment]\nworkdir = "/x"\n')
    with pytest.raises(AcxPlanError) as e:
        load_harbor_task(d)
    assert e.value.span is not None and e.value.span.line == 2


def test_legacy_version_aliases_schema_version(harbor_task) -> None:  # contract H6
    assert load_harbor_task(harbor_task("a", 'version = "1.0"\n')).metadata["schema_version"] == "1.0"
    with pytest.raises(AcxPlanError, match="conflicts"):
        load_harbor_task(harbor_task("b", 'version = "1.0"\nschema_version = "1.4"\n'))


def test_legacy_sizes(harbor_task) -> None:  # contract H6
    t = load_harbor_task(harbor_task("a", '[environment]\nmemory = "2G"\nstorage = "512M"\n'))
    assert t.resources == ir.ResourceRequirements(memory_mb=2048, storage_mb=512)
    assert t.load_warnings == []  # converted → counts as mapped
    same = load_harbor_task(harbor_task("b", '[environment]\nmemory = "2G"\nmemory_mb = 2048\n'))
    assert same.resources is not None and same.resources.memory_mb == 2048
    with pytest.raises(AcxPlanError, match="conflicts") as e:
        load_harbor_task(harbor_task("c", '[environment]\nmemory_mb = 1024\nmemory = "2G"\n'))
    assert e.value.span is not None and e.value.span.line == 3


def test_unmapped_declarations_warn(harbor_task) -> None:  # contract H6
    toml = """
    typo_key = 1
    [agent]
    user = "agent"
    [environment]
    mcp_servers = [{ name = "m", transport = "stdio", command = "mcp" }]
    gpu_types = ["H100", "A100"]
    """
    t = load_harbor_task(harbor_task("a", toml))
    text = "\n".join(t.load_warnings)
    for key in ("typo_key", "environment.gpu_types"):
        assert f"`{key}`" in text
    assert "mcp_servers" not in text  # mapped: given to the agent (issue 28)
    assert t.metadata["mcp_servers"] == [{"name": "m", "transport": "stdio", "command": "mcp"}]
    assert "task.toml:2:" in text  # warnings carry the line
    assert "agent.user" not in text and t.run_user == "agent"  # mapped (issue 22 item 3)


def test_steps_dir_without_steps_declared_is_a_missing_file_error(tmp_path) -> None:
    # Harbor uses steps/ only when task.toml declares [[steps]]: otherwise a single-step task
    root = tmp_path / "steps-only"
    (root / "steps" / "one" / "tests").mkdir(parents=True)
    (root / "task.toml").write_text("")
    (root / "steps" / "one" / "instruction.md").write_text("do it\n")
    with pytest.raises(AcxPlanError) as e:
        load_harbor_task(root)
    assert e.value.code == "E0410" and "missing instruction.md, tests/test.sh" in str(e.value)
    assert "[[steps]]" in str(e.value)


@pytest.mark.parametrize(
    ("toml", "run_user", "evaluation_user"),
    [
        ('[agent]\nuser = "agent"\n', "agent", None),
        ("[agent]\nuser = 1000\n[verifier]\nuser = 0\n", "1000", "0"),
        ('[verifier]\nuser = "grader"\n', None, "grader"),
        ("", None, None),
    ],
)
def test_stage_users_are_mapped(harbor_task, toml: str, run_user: str | None, evaluation_user: str | None) -> None:
    # issue 22 item 3: Harbor's `[agent].user` / `[verifier].user` (a name or a uid) are the users
    # the agent and the verifier run as, never a warning and a silent root
    t = load_harbor_task(harbor_task("u", toml))
    assert (t.run_user, t.evaluation_user) == (run_user, evaluation_user)
    assert not any("user" in w for w in t.load_warnings)


@pytest.mark.parametrize("value", ['""', "-1", "true", '"a b"', "[1]"])
def test_invalid_stage_user_is_located(harbor_task, value: str) -> None:
    with pytest.raises(AcxPlanError) as info:
        load_harbor_task(harbor_task("u", f"[agent]\nuser = {value}\n"))
    assert "user name or a uid" in str(info.value) and info.value.span.line == 2


@pytest.mark.parametrize(
    ("toml", "line", "message"),
    [
        ("[agent]\ntimeout_sec = -1\n", 2, "finite and positive"),
        ('[agent]\ntimeout_sec = "10"\n', 2, "expected a number"),
        ('\n[environment]\nworkdir = "app"\n', 3, "absolute POSIX"),
        ('[environment]\nos = "plan9"\n', 2, "unknown os"),
        ('[verifier]\nnetwork_mode = "offline"\n', 2, "unknown network_mode"),
        ('[agent]\nnetwork_mode = "public"\nallowed_hosts = ["x"]\n', 3, "only valid with allowlist"),
        ('[[verifier.collect]]\ncommand = "x"\nuser = "root"\n', 3, "per-command `user`"),
        ('[[verifier.collect]]\ncommand = "x"\nservice = "db"\n', 3, "sidecar"),
        ('[[verifier.collect]]\ncommand = "x"\nretries = 2\n', 3, "unknown verifier.collect field"),
        ('[task]\nname = "nope"\n', 2, "org/name"),
        ('[task]\nname = "a/b"\nversion = ""\n', 3, "non-empty string"),
        ("[environment.env]\nX = 1\n", 2, "must be a string"),
    ],
)
def test_invalid_values_name_file_and_line(harbor_task, toml: str, line: int, message: str) -> None:  # contract H6
    d = harbor_task("bad", toml)
    with pytest.raises(AcxPlanError, match=message) as e:
        load_harbor_task(d)
    assert e.value.span is not None
    assert e.value.span.file == str(d / "task.toml")
    assert e.value.span.line == line
    assert e.value.help


def test_malformed_toml_names_file_and_line(harbor_task) -> None:
    d = harbor_task("bad", "[agent]\ntimeout_sec = 10\n[agent\n")
    with pytest.raises(AcxPlanError, match="not valid TOML") as e:
        load_harbor_task(d)
    assert e.value.code == "E0411"
    assert e.value.span is not None and (e.value.span.file, e.value.span.line) == (str(d / "task.toml"), 3)


def test_missing_files(tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "task.toml").write_text("")
    with pytest.raises(AcxPlanError, match=r"missing instruction.md, tests/test.sh"):
        load_harbor_task(d)


def test_dataset_dir_sorted_and_invalid_dir_named(harbor_task, tmp_path: Path) -> None:  # contract B4
    root = tmp_path / "ds"
    root.mkdir()
    for name in ("b-task", "a-task", "c-task"):
        harbor_task(name, "", root=root)
    assert [t.task_id for t in load_harbor_dataset(root)] == ["a-task", "b-task", "c-task"]
    assert [t.task_id for t in load_harbor_dataset(root / "b-task")] == ["b-task"]
    (root / "zz-broken").mkdir()
    with pytest.raises(AcxPlanError, match="zz-broken"):
        load_harbor_dataset(root)


def test_size_and_workdir_helpers() -> None:
    assert parse_size_mib("1024K") == 1
    assert parse_size_mib("1.5G") == 1536
    assert parse_size_mib("lots") is None
    assert dockerfile_workdir("FROM x\nWORKDIR /app\nWORKDIR sub\n") == "/app/sub"
    assert dockerfile_workdir("FROM x\n") is None
    # the final stage's WORKDIR; unknown (None) when it depends on a variable or the base image
    assert dockerfile_workdir("FROM a AS b\nWORKDIR /build\nFROM c\nCOPY --from=b /x /x\n") is None
    assert dockerfile_workdir("FROM a AS b\nWORKDIR /build\nFROM c\nWORKDIR /final\n") == "/final"
    assert dockerfile_workdir("FROM a\nWORKDIR $HOME/x\n") is None


def test_allowlist_without_hosts_is_no_network(harbor_task) -> None:  # contract H1
    t = load_harbor_task(
        harbor_task(
            "a", '[agent]\nnetwork_mode = "allowlist"\n[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = []\n'
        )
    )
    assert t.run_network_policy == ir.NetworkPolicy(network_mode="no-network")
    assert t.evaluation_network_policy == ir.NetworkPolicy(network_mode="no-network")
    kept = load_harbor_task(harbor_task("b", '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'))
    assert kept.run_network_policy == ir.NetworkPolicy(network_mode="allowlist", allowed_hosts=["pypi.org"])


def test_legacy_size_equal_to_new_field_still_warns(harbor_task) -> None:  # contract H6
    t = load_harbor_task(harbor_task("a", '[environment]\nmemory_mb = 2048\nmemory = "2G"\n'))
    assert t.resources == ir.ResourceRequirements(memory_mb=2048)
    assert len(t.load_warnings) == 1 and "`environment.memory`" in t.load_warnings[0]
    assert "task.toml:3:" in t.load_warnings[0] and "superseded by `memory_mb`" in t.load_warnings[0]


def test_non_utf8_task_files_are_clear_errors(harbor_task) -> None:  # contract H6
    d = harbor_task("bad", "")
    (d / "task.toml").write_bytes(b'[agent]\ntimeout_sec = 10\nname = "caf\xe9"\n')
    with pytest.raises(AcxPlanError, match=r"task.toml is not UTF-8 text \(byte 0xe9\)") as e:
        load_harbor_task(d)
    assert e.value.span is not None and (e.value.span.line, e.value.span.col) == (3, 12)
    (d / "task.toml").write_bytes("\ufeff[agent]\ntimeout_sec = 10\n".encode())  # a BOM is fine
    (d / "instruction.md").write_bytes(b"\xff\xfe")
    with pytest.raises(AcxPlanError, match=r"instruction\.md is not UTF-8"):
        load_harbor_task(d)
    (d / "instruction.md").write_text("Hi")
    assert load_harbor_task(d).run_timeout_seconds == 10.0


def test_compose_environments_are_load_errors(harbor_task) -> None:  # contract H6 (sidecar services)
    d = harbor_task("multi", "")
    (d / "environment" / "docker-compose.yaml").write_text("services:\n  main: {build: .}\n  db: {image: pg}\n")
    with pytest.raises(AcxPlanError, match="docker compose") as e:
        load_harbor_task(d)
    assert e.value.code == "E0413" and "--tasks" in (e.value.help or "")
