"""Harbor task directories → :class:`acx.ir.TaskSpec` (contracts H1–H6, B1, B4).

``load_harbor_task(task_dir)`` reads ``task.toml`` with :mod:`tomllib` and maps every Harbor
declaration it understands onto the generic TaskSpec fields; what it does not map goes to
``TaskSpec.load_warnings`` (printed only for selected tasks), and invalid values raise
:class:`acx.errors.AcxPlanError` naming ``task.toml`` and the line of the offending key.

Pure: reads the task directory, never opens an environment or resolves an env-variable value
(``${VAR}`` references stay references, V1). The tests directory is evaluation-only (B1): only its
path is recorded, never its content.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acx.components._toml_spans import TomlLocator
from acx.diagnostics import Span
from acx.errors import AcxPlanError
from acx.inputs import (
    MAX_INT_DIGITS,
    MAX_NESTING_DEPTH,
    MAX_TASK_FILE_BYTES,
    InputFileError,
    file_kind,
    input_file_error,
    read_regular_file,
)
from acx.ir import (
    ArtifactCollectCommand,
    ArtifactSpec,
    EnvironmentSetup,
    NetworkPolicy,
    ResourceRequirements,
    TaskSpec,
    TaskStep,
)

__all__ = ["TomlLocator", "dockerfile_workdir", "is_task_dir", "load_harbor_task", "parse_size_mib"]

_NETWORK_MODES = ("public", "no-network", "allowlist")
_PACKAGE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


# ---------------------------------------------------------------------------------------------
# The loader.
# ---------------------------------------------------------------------------------------------
class _Ctx:
    """Per-file state: where errors point, and the warnings collected so far."""

    def __init__(self, toml_path: Path, text: str) -> None:
        self.file = str(toml_path)
        self.text = text
        self._loc: TomlLocator | None = None
        self.warnings: list[str] = []

    @property
    def loc(self) -> TomlLocator:
        """Built on first use: only a task with a warning or an error pays for positions."""
        if self._loc is None:
            self._loc = TomlLocator(self.text)
        return self._loc

    def span(self, path: str) -> Span:
        pos = self.loc.position_of(path)
        if pos is None:
            return Span(self.file, 1, 1)
        line, col, end_line, end_col = pos
        # Underline the key (and its value when it fits on the line).
        return Span(self.file, line, col, *((end_line, end_col) if end_line == line else (None, None)))

    def error(self, path: str, message: str, help: str, code: str = "E0412") -> AcxPlanError:
        return AcxPlanError(f"{message} (`{path}`)", code=code, span=self.span(path), help=help)

    def warn(self, path: str, what: str) -> None:
        self.warnings.append(f"{self.file}:{self.loc.line_of(path)}: {what} `{path}` is not mapped; ignored")


def load_harbor_task(task_dir: str | Path, *, solution_env_for_agent: bool = False) -> TaskSpec:
    """Load one Harbor task directory (H1–H6). Invalid input raises AcxPlanError with file:line."""
    root = Path(task_dir)
    toml_path = root / "task.toml"
    _check_layout(root)
    text = _read_text(toml_path)
    _check_toml_nesting(text, toml_path)
    try:
        raw = tomllib.loads(text)
    except RecursionError:  # nested tables/arrays the bracket scan could not see (dotted keys)
        raise _toml_limit(toml_path, 1, 1, f"task.toml nests more than {MAX_NESTING_DEPTH} levels deep") from None
    except ValueError as exc:
        if isinstance(exc, tomllib.TOMLDecodeError):
            raise _toml_syntax_error(exc, toml_path) from None
        # Python refuses to convert integers of more than 4,300 digits.
        m = re.search(rf"[0-9_]{{{MAX_INT_DIGITS + 1},}}", text)
        line, col = _line_col(text, m.start() if m else 0)
        raise _toml_limit(toml_path, line, col, f"an integer of more than {MAX_INT_DIGITS} digits") from None
    _check_toml_values(raw, toml_path, text)
    return _mapped(root, raw, toml_path, text, solution_env_for_agent)


def _toml_syntax_error(exc: Exception, toml_path: Path) -> AcxPlanError:
    line, col = _toml_error_pos(str(exc))
    return AcxPlanError(
        f"task.toml is not valid TOML: {_strip_pos(str(exc))}",
        code="E0411",
        span=Span(str(toml_path), line, col),
        help="fix the TOML syntax (https://toml.io), or move the task directory out of the dataset",
    )


def _toml_limit(toml_path: Path, line: int, col: int, what: str) -> AcxPlanError:
    return AcxPlanError(
        what,
        code="E0219",
        span=Span(str(toml_path), line, col),
        help="task files have input limits (docs/errors.md#E0219); no Harbor field needs this",
    )


def _line_col(text: str, offset: int) -> tuple[int, int]:
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


#: Brackets outside strings and comments (multi-line strings first, so their brackets are skipped).
_TOML_TOKENS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]')


def _check_toml_nesting(text: str, toml_path: Path) -> None:
    """tomllib recurses per nesting level: refuse deep arrays/inline tables first, with a place."""
    depth = 0
    for m in _TOML_TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                line, col = _line_col(text, m.start())
                raise _toml_limit(toml_path, line, col, f"task.toml nests more than {MAX_NESTING_DEPTH} levels deep")
        elif c in "]}":
            depth -= 1


def _check_toml_values(raw: Any, toml_path: Path, text: str) -> None:
    """Refuse what parsed but is unbounded to process: tables nested past the limit through
    dotted keys, and huge integers (hex/octal/binary literals escape Python's digit limit)."""
    stack: list[tuple[Any, int, str]] = [(raw, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            raise _toml_limit(
                toml_path, 1, 1, f"task.toml nests more than {MAX_NESTING_DEPTH} levels deep (`{path[:80]}`)"
            )
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * MAX_INT_DIGITS:
            pos = TomlLocator(text).position_of(path)
            line, col = (pos[0], pos[1]) if pos is not None else (1, 1)
            raise _toml_limit(toml_path, line, col, f"an integer of more than {MAX_INT_DIGITS} digits (`{path}`)")
        if isinstance(value, dict):
            stack.extend((v, depth + 1, f"{path}.{k}" if path else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, f"{path}.{i}" if path else str(i)) for i, v in enumerate(value))


def _mapped(root: Path, raw: dict[str, Any], toml_path: Path, text: str, solution_env_for_agent: bool) -> TaskSpec:
    ctx = _Ctx(toml_path, text)
    return _map_task(root, raw, ctx, solution_env_for_agent=solution_env_for_agent)


def _read_text(path: Path) -> str:
    """A task file as UTF-8 text (a leading BOM dropped); unreadable → E0410 naming the file,
    not a regular file → E0218, above MAX_TASK_FILE_BYTES → E0219."""
    try:
        data = read_regular_file(path, max_bytes=MAX_TASK_FILE_BYTES)
    except InputFileError as exc:
        raise input_file_error(AcxPlanError, exc) from None
    except OSError as exc:
        raise AcxPlanError(
            f"cannot read {path}: {exc.strerror}", code="E0410", path=str(path), help="make the file readable"
        ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise AcxPlanError(
            f"{path.name} is not UTF-8 text (byte {data[exc.start]:#04x})",
            code="E0410",
            span=Span(str(path), line, col),
            help="save the file as UTF-8",
        ) from None


_COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")


def _check_layout(root: Path) -> None:
    if not root.is_dir():
        raise AcxPlanError(
            f"Harbor task directory {root} does not exist",
            code="E0410",
            path=str(root),
            help="point `benchmark.path` at a task directory or a directory of task directories",
        )
    _check_confined(root)
    for name in _TASK_FILES:
        path = root / name
        if path.exists() and not path.is_file():  # a FIFO would hang the read: refuse it first
            kind = file_kind(path.stat().st_mode)
            raise AcxPlanError(
                f"{path} is {kind}, not a regular file",
                code="E0218",
                path=str(path),
                help="name a regular file; acx never reads directories, FIFOs, sockets or devices as input",
            )
    if not (root / "task.toml").is_file():
        raise _not_a_task(root, ["task.toml"])
    compose = next((root / "environment" / n for n in _COMPOSE_FILES if (root / "environment" / n).is_file()), None)
    if compose is not None:  # H6: sidecar services are load errors, never silently dropped
        raise AcxPlanError(
            f"{compose}: multi-container (docker compose) task environments are not supported",
            code="E0413",
            path=str(compose),
            help="give the task a single-container environment/Dockerfile or docker_image, "
            "or leave it out (task_names, sample_ids or --tasks)",
        )


def _missing_files(root: Path) -> list[str]:
    """What a single-step task needs and ``root`` lacks."""
    missing = [] if (root / "instruction.md").is_file() else ["instruction.md"]
    if not (root / "tests" / "test.sh").is_file() and not (root / "tests" / "test.bat").is_file():
        missing.append("tests/test.sh")
    return missing


def _not_a_task(root: Path, missing: list[str]) -> AcxPlanError:
    steps_hint = (
        "; its steps/ directory is used only when task.toml declares them ([[steps]] with a name each)"
        if (root / "steps").is_dir()
        else ""
    )
    return AcxPlanError(
        f"{root} is not a Harbor task directory: missing {', '.join(missing)}{steps_hint}",
        code="E0410",
        path=str(root),
        help="a Harbor task has task.toml, instruction.md, environment/ and tests/test.sh "
        "(a multi-step task: [[steps]] in task.toml and steps/<name>/instruction.md)",
    )


#: The files and directories of a task acx reads, uploads or builds from.
_TASK_FILES = ("task.toml", "instruction.md")
_TASK_DIRS = ("tests", "environment", "solution", "steps")


def _check_confined(root: Path) -> None:
    """Everything a task uses must resolve inside its directory (issue 11 item 10): a symlinked
    ``instruction.md`` would put a host file into the prompt and the results, a symlinked
    ``tests/`` (or a link inside it) would upload host files into the verifier, a symlinked
    ``task.toml`` would echo host file lines in error frames. Checked before any file is read."""
    base = os.path.realpath(root)

    def inside(real: str) -> bool:
        return real == base or real.startswith(base.rstrip(os.sep) + os.sep)

    def refuse(path: Path | str) -> AcxPlanError:
        return AcxPlanError(
            f"{path} is a symbolic link that resolves outside the task directory {root}",
            code="E0414",
            path=str(path),
            help="a Harbor task may only use files inside its own directory: copy the file into "
            "the task instead of linking to it",
        )

    for name in (*_TASK_FILES, *_TASK_DIRS):
        used = root / name
        if os.path.lexists(used) and not inside(os.path.realpath(used)):
            raise refuse(used)
    for name in _TASK_DIRS:
        top = root / name
        if not top.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for entry in (*dirnames, *filenames):
                full = os.path.join(dirpath, entry)
                if os.path.islink(full) and not inside(os.path.realpath(full)):
                    raise refuse(full)


def _toml_error_pos(message: str) -> tuple[int, int]:
    m = re.search(r"at line (\d+), column (\d+)", message)
    return (int(m.group(1)), int(m.group(2))) if m else (1, 1)


def _strip_pos(message: str) -> str:
    return re.sub(r"\s*\(at line \d+, column \d+\)", "", message)


_ROOT_KEYS = frozenset(
    {
        "schema_version",
        "version",
        "source",
        "multi_step_reward_strategy",
        "artifacts",
        "steps",
        "task",
        "metadata",
        "verifier",
        "agent",
        "environment",
        "solution",
    }
)


def _map_task(root: Path, raw: dict[str, Any], ctx: _Ctx, *, solution_env_for_agent: bool) -> TaskSpec:
    for key in raw:
        if key not in _ROOT_KEYS:
            ctx.warn(key, "unknown declaration")
    schema_version = _schema_version(raw, ctx)
    agent = _table(raw, "agent", ctx)
    verifier = _table(raw, "verifier", ctx)
    env = _table(raw, "environment", ctx)
    solution = _table(raw, "solution", ctx)

    setup = _setup(env, "environment", ctx)
    resources = _resources(env, "environment", ctx)
    baseline = _env_network(env, "environment", ctx)
    env_vars = _str_map(env.get("env"), "environment.env", ctx)
    mcp_servers = _mcp_servers(env.get("mcp_servers"), "environment.mcp_servers", ctx)
    _warn_env_extras(env, "environment", ctx)

    run_policy = _network(agent, "agent", ctx)
    run_timeout = _timeout(agent, "agent.timeout_sec", ctx)
    run_user = _user(agent, "agent", ctx)
    for key in agent:
        if key not in ("timeout_sec", "network_mode", "allowed_hosts", "user"):
            ctx.warn(f"agent.{key}", "unknown declaration")

    v = _verifier(verifier, ctx)
    solution_env = _str_map(solution.get("env"), "solution.env", ctx)
    for key in solution:
        if key != "env":
            ctx.warn(f"solution.{key}", "unknown declaration")

    artifacts = _artifacts(raw, ctx)
    metadata = _metadata(root, raw, ctx, schema_version, solution_env)
    healthcheck = _healthcheck(env.get("healthcheck"), "environment.healthcheck", ctx)
    if healthcheck is not None:
        metadata["healthcheck"] = healthcheck
    if mcp_servers:
        metadata["mcp_servers"] = mcp_servers
    dockerfile = root / "environment" / "Dockerfile"
    if dockerfile.is_file():
        workdir = dockerfile_workdir(dockerfile.read_text(encoding="utf-8", errors="replace"))
        if workdir:
            metadata["dockerfile_workdir"] = workdir
    steps = _steps(root, raw, ctx, v)
    trajectory = root / "steps" / steps[0].name / "trajectory.json" if steps else root / "trajectory.json"
    if trajectory.is_file():  # Harbor seeds the agent's session with it (not the oracle's)
        ctx.warnings.append(
            f"{trajectory}: prior agent context (an ATIF trajectory Harbor seeds the agent's session with) "
            "is not given to the agent; ignored"
        )
    if steps:
        metadata["multi_step_reward_strategy"] = raw.get("multi_step_reward_strategy") or "mean"
    else:
        missing = _missing_files(root)
        if missing:
            raise _not_a_task(root, missing)
        if "multi_step_reward_strategy" in raw:
            ctx.warn("multi_step_reward_strategy", "multi-step declaration in a single-step task:")

    category = raw.get("metadata", {}).get("category") if isinstance(raw.get("metadata"), dict) else None
    return TaskSpec(
        task_id=root.name,
        # Harbor: a multi-step task's instruction is its steps' (a top-level instruction.md is unused).
        question="" if steps else _instruction(root / "instruction.md"),
        category=category if isinstance(category, str) and category else "all",
        ground_truth=None,
        metadata=metadata,
        resources=resources,
        evaluation_resources=v["resources"],
        baseline_network_policy=baseline,
        evaluation_baseline_network_policy=v["baseline"],
        run_network_policy=run_policy,
        evaluation_network_policy=v["policy"],
        evaluation_environment_mode=v["mode"],
        env_variables=env_vars,
        # Harbor injects `[environment].env` when the container starts (V2: start-up vars).
        require_startup_env=bool(env_vars),
        run_env_variables=dict(solution_env) if solution_env_for_agent else {},
        evaluation_env_variables=v["env"],
        evaluation_environment_env_variables=v["startup_env"],
        artifacts=artifacts,
        artifact_collect=v["collect"],
        environment_setup=setup,
        evaluation_environment_setup=v["setup"],
        run_timeout_seconds=run_timeout,
        evaluation_timeout_seconds=v["timeout"],
        run_user=run_user,
        evaluation_user=v["user"],
        load_warnings=ctx.warnings,
        steps=steps,
    )


#: Harbor's ``VerifierConfig.timeout_sec`` default: a step's verifier table always has its own
#: timeout (``step.verifier.timeout_sec`` is never None), so the task's is not inherited.
HARBOR_VERIFIER_TIMEOUT = 600.0
_STEP_NAME_BAD = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_WINDOWS_DEVICE = re.compile(r"^(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(?:COM|LPT)[1-9\u00b9\u00b2\u00b3])$", re.IGNORECASE)
_STEP_KEYS = frozenset({"name", "agent", "verifier", "min_reward", "healthcheck", "artifacts"})


def _refuse(ctx: _Ctx, path: str, what: str, help: str) -> AcxPlanError:
    return ctx.error(path, f"{what} is not supported in a multi-step task", help, code="E0413")


def _steps(
    root: Path,
    raw: Mapping[str, Any],
    ctx: _Ctx,
    task_verifier: Mapping[str, Any],
) -> list[TaskStep]:
    """``[[steps]]`` (Harbor's multi-step tasks) → TaskStep list; [] when the task has none."""
    value = raw.get("steps")
    if value is None or value == []:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ctx.error("steps", "steps must be an array of tables", 'write each step as [[steps]] with name = "..."')
    if task_verifier["mode"] == "fresh":
        where = "verifier.environment" if "environment" in _table(raw, "verifier", ctx) else "verifier.environment_mode"
        raise _refuse(
            ctx,
            where,
            "a separate verifier environment",
            "acx runs a multi-step task's verifiers in the agent's environment (environment_mode = "
            '"shared"); remove the separate verifier, or leave the task out (task_names, sample_ids, --tasks)',
        )
    strategy = raw.get("multi_step_reward_strategy")
    if strategy is not None and strategy not in ("mean", "final"):
        raise ctx.error(
            "multi_step_reward_strategy", f"unknown multi_step_reward_strategy {strategy!r}", 'use "mean" or "final"'
        )
    seen: dict[str, int] = {}
    steps = []
    for i, item in enumerate(value):
        step = _step(root, item, f"steps.{i}", ctx, task_verifier)
        key = unicodedata.normalize("NFC", step.name).casefold()
        if key in seen:
            raise ctx.error(
                f"steps.{i}.name",
                f"step name {step.name!r} repeats step {seen[key] + 1}'s (names are compared ignoring case)",
                "give every step its own directory name under steps/",
            )
        seen[key] = i
        steps.append(step)
    return steps


def _step_name(item: Mapping[str, Any], path: str, ctx: _Ctx) -> str:
    name = item.get("name")
    if (
        not isinstance(name, str)
        or not name.strip()
        or name in (".", "..")
        or name.endswith((".", " "))
        or _STEP_NAME_BAD.search(name)
        or _WINDOWS_DEVICE.fullmatch(name.partition(".")[0].rstrip(" "))
        or len(name.encode("utf-8")) > 255
    ):
        raise ctx.error(
            f"{path}.name",
            f"a step needs a name that is a portable directory name, got {name!r}",
            'e.g. name = "setup-db": no path separators, control or reserved characters, trailing dots or spaces',
        )
    return name


def _step(root: Path, item: Mapping[str, Any], path: str, ctx: _Ctx, task_verifier: Mapping[str, Any]) -> TaskStep:
    name = _step_name(item, path, ctx)
    for key in item:
        if key not in _STEP_KEYS:
            ctx.warn(f"{path}.{key}", "unknown declaration")
    agent = _table(item, "agent", ctx) if "agent" in item else {}
    verifier = _table(item, "verifier", ctx) if "verifier" in item else {}
    for key in agent:
        if key not in ("timeout_sec", "user", "network_mode", "allowed_hosts"):
            ctx.warn(f"{path}.agent.{key}", "unknown declaration")
    if verifier.get("environment_mode") not in (None, "shared", "separate"):
        raise ctx.error(
            f"{path}.verifier.environment_mode",
            f"unknown environment_mode {verifier['environment_mode']!r}",
            'use "shared" (evaluate in the agent environment) or "separate" (fresh verifier)',
        )
    if verifier.get("environment_mode") == "separate" or "environment" in verifier:
        key = "environment" if "environment" in verifier else "environment_mode"
        raise _refuse(
            ctx,
            f"{path}.verifier.{key}",
            "a separate verifier environment",
            "acx runs each step's verifier in the agent's environment: remove it (environment_mode = "
            '"shared" is the default), or leave the task out',
        )
    for key in verifier:
        if key not in ("timeout_sec", "user", "env", "environment_mode", "collect", "network_mode", "allowed_hosts"):
            ctx.warn(f"{path}.verifier.{key}", "unknown declaration")
    step_env = _str_map(verifier.get("env"), f"{path}.verifier.env", ctx)
    return TaskStep(
        name=name,
        question=_instruction(_step_file(root, name, "instruction.md", path, ctx)),
        run_timeout_seconds=_timeout(agent, f"{path}.agent.timeout_sec", ctx),
        evaluation_timeout_seconds=(
            _seconds(verifier["timeout_sec"], f"{path}.verifier.timeout_sec", ctx)
            if "timeout_sec" in verifier
            else HARBOR_VERIFIER_TIMEOUT
        ),
        run_user=_user(agent, f"{path}.agent", ctx),
        evaluation_user=_user(verifier, f"{path}.verifier", ctx),
        # Harbor's _explicit_phase_policy: the step's own phase policy, else the task's.
        run_network_policy=_network(agent, f"{path}.agent", ctx),
        evaluation_network_policy=_network(verifier, f"{path}.verifier", ctx),
        # Harbor merges the step's verifier.env over the task's.
        evaluation_env_variables={**task_verifier["env"], **step_env} if step_env else None,
        min_reward=_min_reward(item.get("min_reward"), f"{path}.min_reward", ctx),
        # Collected after the step's agent with the task's (Harbor's _collect_step_artifacts).
        artifacts=_artifacts(item, ctx, f"{path}.artifacts") or [],
        artifact_collect=_collect(verifier.get("collect"), ctx, f"{path}.verifier.collect") or [],
        metadata=_step_paths(root, name, path, ctx, _healthcheck(item.get("healthcheck"), f"{path}.healthcheck", ctx)),
    )


def _step_file(root: Path, name: str, rel: str, path: str, ctx: _Ctx) -> Path:
    file = root / "steps" / name / rel
    if not file.is_file():
        raise ctx.error(
            f"{path}.name",
            f"step {name!r} has no steps/{name}/{rel}",
            f"add {root / 'steps' / name / rel}, or fix the step's name",
            code="E0410",
        )
    return file


def _step_paths(root: Path, name: str, path: str, ctx: _Ctx, healthcheck: dict[str, Any] | None) -> dict[str, Any]:
    """The step's tests (over the task's), solution and workdir, as Harbor's TaskPaths finds them."""
    step_dir = root / "steps" / name
    has_step_test = (step_dir / "tests" / "test.sh").is_file()
    if not has_step_test and not (root / "tests" / "test.sh").is_file():
        raise ctx.error(
            f"{path}.name",
            f"step {name!r} has no test script: neither steps/{name}/tests/test.sh nor tests/test.sh",
            f"add {step_dir / 'tests' / 'test.sh'} (or a tests/test.sh shared by the steps)",
            code="E0410",
        )
    meta: dict[str, Any] = {"step_dir": str(step_dir.resolve())}
    if (step_dir / "tests").is_dir():
        meta["tests_dir"] = str((step_dir / "tests").resolve())
    # The step's own tests/test.sh, else the task's (Harbor's Verifier._resolve_tests).
    meta["test_script"] = f"steps/{name}/tests/test.sh" if has_step_test else "tests/test.sh"
    if (step_dir / "solution").is_dir():  # the oracle uses it instead of solution/ (it must hold solve.sh)
        meta["solve_script"] = f"steps/{name}/solution/solve.sh"
    if (step_dir / "workdir").is_dir():
        meta["workdir_dir"] = str((step_dir / "workdir").resolve())
    if healthcheck is not None:  # run after the step's set-up, before its agent
        meta["healthcheck"] = healthcheck
    return meta


#: Harbor's HealthcheckConfig fields and defaults (Docker HEALTHCHECK semantics).
_HEALTHCHECK_DEFAULTS = {
    "interval_sec": 5.0,
    "timeout_sec": 30.0,
    "start_period_sec": 0.0,
    "start_interval_sec": 5.0,
    "retries": 3,
}


def _healthcheck(value: Any, path: str, ctx: _Ctx) -> dict[str, Any] | None:
    """A ``healthcheck`` table → its fields with Harbor's defaults (run by the Harbor runtime)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ctx.error(
            path, "healthcheck must be a table", 'e.g. [environment.healthcheck] command = "test -f /ready"'
        )
    command = value.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ctx.error(
            f"{path}.command", "a healthcheck needs a non-empty `command`", 'e.g. command = "test -f /ready"'
        )
    out: dict[str, Any] = {"command": command}
    for key, default in _HEALTHCHECK_DEFAULTS.items():
        v = value.get(key, default)
        if key == "retries":
            if isinstance(v, bool) or not isinstance(v, int):
                raise ctx.error(f"{path}.{key}", f"retries must be an integer, got {v!r}", "e.g. retries = 3")
        elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise ctx.error(
                f"{path}.{key}", f"{key} must be a non-negative number of seconds, got {v!r}", f"e.g. {key} = 5"
            )
        out[key] = v
    for key in value:
        if key != "command" and key not in _HEALTHCHECK_DEFAULTS:
            ctx.warn(f"{path}.{key}", "unknown declaration")
    return out


def _min_reward(value: Any, path: str, ctx: _Ctx) -> dict[str, float] | None:
    """A number gates the ``reward`` key, a table each key it names (Harbor's StepConfig)."""
    if value is None:
        return None

    def number(v: Any, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ctx.error(where, f"min_reward must be a finite number, got {v!r}", "e.g. min_reward = 1.0")
        return float(v)

    if isinstance(value, dict):
        return {str(k): number(v, f"{path}.{k}") for k, v in value.items()}
    return {"reward": number(value, path)}


def _schema_version(raw: dict[str, Any], ctx: _Ctx) -> str | None:
    """Legacy top-level ``version`` aliases ``schema_version`` (H6); a conflict is an error."""
    new, old = raw.get("schema_version"), raw.get("version")
    for key, value in (("schema_version", new), ("version", old)):
        if value is not None and not isinstance(value, str):
            raise ctx.error(key, f"{key} must be a string, got {value!r}", 'write it quoted, e.g. "1.4"')
    if new is not None and old is not None and new != old:
        raise ctx.error(
            "version",
            f"legacy `version` ({old!r}) conflicts with `schema_version` ({new!r})",
            "remove the legacy top-level `version`; it is an alias of `schema_version`",
        )
    return new if new is not None else old


def _table(raw: Mapping[str, Any], key: str, ctx: _Ctx) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ctx.error(key, f"`{key}` must be a table", f"write it as [{key}]")
    return value


def _instruction(path: Path) -> str:
    """An instruction.md with leading canary comment lines stripped (as Harbor does)."""
    lines = _read_text(path).splitlines()
    while lines and ("canary" in lines[0].lower() and lines[0].lstrip().startswith(("<!--", "#"))):
        lines.pop(0)
    return "\n".join(lines).strip("\n")


def _user(table: Mapping[str, Any], path: str, ctx: _Ctx) -> str | None:
    """``user`` (Harbor: a name or a uid) → the stage user commands run as; None = the image's."""
    value = table.get("user")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int) or (isinstance(value, int) and value < 0):
        raise ctx.error(f"{path}.user", f"user must be a user name or a uid, got {value!r}", 'e.g. user = "agent"')
    text = str(value).strip()
    if not text or any(c.isspace() or c == "\0" for c in text):
        raise ctx.error(f"{path}.user", f"user must be a user name or a uid, got {value!r}", 'e.g. user = "agent"')
    return text


def _timeout(table: Mapping[str, Any], path: str, ctx: _Ctx) -> float | Any:
    """Only explicit timeouts are mapped (T1); absent → UNSET so the next source applies."""
    from msgspec import UNSET

    key = path.rsplit(".", 1)[-1]
    if key not in table:
        return UNSET
    return _seconds(table[key], path, ctx)


def _seconds(value: Any, path: str, ctx: _Ctx) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.error(path, f"expected a number of seconds, got {value!r}", "write e.g. 600 or 600.0")
    if not math.isfinite(value) or value <= 0:
        raise ctx.error(
            path,
            f"a timeout must be finite and positive, got {value!r}",
            "remove the key for no deadline, or give a positive number of seconds",
        )
    return float(value)


def _str_map(value: Any, path: str, ctx: _Ctx) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ctx.error(path, f"`{path}` must be a table of strings", f'write it as [{path}] with NAME = "value"')
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(v, str):
            raise ctx.error(
                f"{path}.{k}",
                f"environment value must be a string, got {v!r}",
                'quote it, e.g. NAME = "1"; use "${VAR}" to read the launching environment',
            )
        out[str(k)] = v
    return out


def _network(table: Mapping[str, Any], path: str, ctx: _Ctx) -> NetworkPolicy | None:
    mode = table.get("network_mode")
    hosts = table.get("allowed_hosts")
    if mode is None:
        if hosts is not None:
            raise ctx.error(
                f"{path}.allowed_hosts",
                "allowed_hosts without network_mode",
                'add network_mode = "allowlist"',
            )
        return None
    if mode not in _NETWORK_MODES:
        raise ctx.error(
            f"{path}.network_mode",
            f"unknown network_mode {mode!r}",
            "use one of: " + ", ".join(_NETWORK_MODES),
        )
    if hosts is not None and mode != "allowlist":
        raise ctx.error(
            f"{path}.allowed_hosts",
            f"allowed_hosts is only valid with allowlist, not {mode!r}",
            'set network_mode = "allowlist" or remove allowed_hosts',
        )
    if hosts is not None and (not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts)):
        raise ctx.error(
            f"{path}.allowed_hosts",
            "allowed_hosts must be a list of non-empty strings",
            'e.g. allowed_hosts = ["pypi.org", "*.github.com:443"]',
        )
    if mode == "allowlist" and not hosts:
        # Harbor: an allowlist with no hosts denies all egress, which is exactly no-network (and
        # no-network is enforceable by more drivers than allowlist).
        return NetworkPolicy(network_mode="no-network")
    return NetworkPolicy(network_mode=mode, allowed_hosts=list(hosts or []))


def _env_network(env: Mapping[str, Any], path: str, ctx: _Ctx) -> NetworkPolicy | None:
    """``network_mode`` or the deprecated ``allow_internet`` (only when network_mode is unset)."""
    policy = _network(env, path, ctx)
    allow = env.get("allow_internet")
    if allow is None:
        return policy
    if not isinstance(allow, bool):
        raise ctx.error(
            f"{path}.allow_internet",
            f"allow_internet must be true or false, got {allow!r}",
            'prefer network_mode = "public" | "no-network"',
        )
    if policy is not None:
        ctx.warn(f"{path}.allow_internet", "deprecated declaration shadowed by network_mode:")
        return policy
    return NetworkPolicy(network_mode="public" if allow else "no-network")


def _setup(env: Mapping[str, Any], path: str, ctx: _Ctx) -> EnvironmentSetup:
    image = env.get("docker_image")
    if image is not None and (not isinstance(image, str) or not image):
        raise ctx.error(
            f"{path}.docker_image",
            "docker_image must be a non-empty string",
            'e.g. docker_image = "python:3.12-slim"',
        )
    workdir = env.get("workdir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/") or "\\" in workdir):
        raise ctx.error(
            f"{path}.workdir",
            f"workdir must be an absolute POSIX path, got {workdir!r}",
            'e.g. workdir = "/app" (H5)',
        )
    os_name = env.get("os")
    if os_name is not None:
        if not isinstance(os_name, str) or os_name.lower() not in ("linux", "windows"):
            raise ctx.error(f"{path}.os", f"unknown os {os_name!r}", 'use "linux" or "windows"')
        os_name = os_name.lower()
    build = _seconds(env["build_timeout_sec"], f"{path}.build_timeout_sec", ctx) if "build_timeout_sec" in env else None
    return EnvironmentSetup(
        image=image,
        workdir=workdir,
        os=os_name,  # type: ignore[arg-type]
        build_timeout_seconds=build,
    )


def parse_size_mib(text: str) -> int | None:
    """Harbor's legacy size strings (``"2G"``, ``"512M"``, ``"1024K"``) → MiB; None if unparsable."""
    m = _SIZE.match(text)
    if not m:
        return None
    number, unit = float(m.group(1)), m.group(2).upper()
    factor = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return max(1, round(number * factor))


def _int_field(env: Mapping[str, Any], key: str, path: str, ctx: _Ctx) -> int | None:
    value = env.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ctx.error(f"{path}.{key}", f"{key} must be a non-negative integer, got {value!r}", f"e.g. {key} = 2048")
    return value


def _resources(env: Mapping[str, Any], path: str, ctx: _Ctx) -> ResourceRequirements | None:
    cpus = env.get("cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0):
        raise ctx.error(f"{path}.cpus", f"cpus must be a positive number, got {cpus!r}", "e.g. cpus = 2")
    memory = _legacy_size(env, "memory", "memory_mb", path, ctx)
    storage = _legacy_size(env, "storage", "storage_mb", path, ctx)
    gpus = _int_field(env, "gpus", path, ctx)
    gpu_type = None
    types = env.get("gpu_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise ctx.error(f"{path}.gpu_types", "gpu_types must be a list of strings", 'e.g. ["H100"]')
        if len(types) == 1:
            gpu_type = types[0]
        elif types:
            ctx.warn(f"{path}.gpu_types", "a choice of several GPU types")
    for key in ("tpu",):
        if key in env:
            ctx.warn(f"{path}.{key}", "TPU request")
    if cpus is None and memory is None and storage is None and gpus is None and gpu_type is None:
        return None
    return ResourceRequirements(
        cpu=float(cpus) if cpus is not None else None,
        memory_mb=memory,
        storage_mb=storage,
        gpu=gpus,
        gpu_type=gpu_type,
    )


def _legacy_size(env: Mapping[str, Any], old: str, new: str, path: str, ctx: _Ctx) -> int | None:
    """``memory``/``storage`` strings count as mapped only when converted to MiB (H6)."""
    value = _int_field(env, new, path, ctx)
    legacy = env.get(old)
    if legacy is None:
        return value
    converted = parse_size_mib(legacy) if isinstance(legacy, str) else None
    if converted is None:
        raise ctx.error(
            f"{path}.{old}",
            f"cannot read legacy size {legacy!r}",
            f'write {new} = <MiB> instead, or e.g. {old} = "2G"',
        )
    if value is not None and value != converted:
        raise ctx.error(
            f"{path}.{old}",
            f"legacy {old} = {legacy!r} ({converted} MiB) conflicts with {new} = {value}",
            f"remove the deprecated `{old}`",
        )
    if value is not None:  # the new field wins; the legacy string was not what got mapped
        ctx.warn(f"{path}.{old}", f"deprecated declaration (superseded by `{new}`)")
        return value
    return converted


_ENV_MAPPED = frozenset(
    {
        "docker_image",
        "workdir",
        "os",
        "build_timeout_sec",
        "cpus",
        "memory_mb",
        "storage_mb",
        "memory",
        "storage",
        "gpus",
        "gpu_types",
        "tpu",
        "network_mode",
        "allowed_hosts",
        "allow_internet",
        "env",
    }
)


def _warn_env_extras(env: Mapping[str, Any], path: str, ctx: _Ctx) -> None:
    for key, value in env.items():
        if key in _ENV_MAPPED or (key in ("healthcheck", "mcp_servers") and path == "environment"):
            continue  # healthcheck run by the runtime, mcp_servers given to the agent
        if key in ("healthcheck", "mcp_servers", "skills_dir"):
            if value not in (None, [], {}):
                ctx.warn(f"{path}.{key}", "declaration")
        else:
            ctx.warn(f"{path}.{key}", "unknown declaration")


#: Harbor's ``MCPServerConfig`` fields; ``headers``/``env`` are a fork's (MJinXiang) and honoured too.
_MCP_KEYS = frozenset({"name", "transport", "command", "args", "url", "headers", "env"})


def _mcp_servers(value: Any, path: str, ctx: _Ctx) -> list[dict[str, Any]]:
    """``[[environment.mcp_servers]]`` with Harbor's semantics: ``transport`` defaults to ``sse``
    and ``http`` means ``streamable-http``; each entry becomes an acx ``McpServerConfig`` dict
    (the agent gets the servers, E0480 for a malformed entry)."""
    from acx.components._configs import MCP_SERVER_NAME, mcp_names_problem, mcp_server_problem

    if value is None:
        return []
    if not isinstance(value, list):
        raise ctx.error(
            path, "mcp_servers must be an array of tables", "write each as [[environment.mcp_servers]]", "E0480"
        )
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"{path}.{i}"
        if not isinstance(item, dict):
            raise ctx.error(where, "an MCP server must be a table", "write it as [[environment.mcp_servers]]", "E0480")
        for key in item:
            if key not in _MCP_KEYS:
                raise ctx.error(
                    f"{where}.{key}",
                    f"unknown MCP server field `{key}`",
                    f"fields: {', '.join(sorted(_MCP_KEYS))}",
                    "E0480",
                )
        name = item.get("name")
        if not isinstance(name, str) or not re.match(MCP_SERVER_NAME, name):
            raise ctx.error(
                f"{where}.name" if "name" in item else where,
                f"an MCP server needs a name of letters, digits, _ and - (got {name!r})",
                'e.g. name = "search" (its tools are offered as search__<tool>)',
                "E0480",
            )
        transport = item.get("transport", "sse")
        transport = "streamable-http" if transport == "http" else transport
        if transport not in ("stdio", "sse", "streamable-http"):
            raise ctx.error(
                f"{where}.transport",
                f"unknown MCP transport {transport!r}",
                'use "stdio", "sse" or "streamable-http"',
                "E0480",
            )
        entry: dict[str, Any] = {"name": name, "transport": transport}
        for key in ("command", "url"):
            if item.get(key) is not None:
                if not isinstance(item[key], str):
                    raise ctx.error(f"{where}.{key}", f"{key} must be a string", f'e.g. {key} = "..."', "E0480")
                entry[key] = item[key]
        args = item.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ctx.error(
                f"{where}.args", "args must be an array of strings", 'e.g. args = ["--port", "8000"]', "E0480"
            )
        if args:
            entry["args"] = args
        for key in ("env", "headers"):
            if key in item:
                entry[key] = _str_map(item[key], f"{where}.{key}", ctx)
        problem = mcp_server_problem(
            transport,
            entry.get("command"),
            entry.get("url"),
            has_args=bool(entry.get("args")),
            has_env=bool(entry.get("env")),
            has_headers=bool(entry.get("headers")),
        )
        if problem is not None:
            raise ctx.error(where, problem, "stdio takes command (+ args); sse / streamable-http take url", "E0480")
        out.append(entry)
    problem = mcp_names_problem([e["name"] for e in out])
    if problem is not None:
        raise ctx.error(path, problem, "rename one of them", "E0480")
    return out


def _verifier(verifier: Mapping[str, Any], ctx: _Ctx) -> dict[str, Any]:
    mode_raw = verifier.get("environment_mode")
    env_decl = verifier.get("environment")
    if mode_raw is not None and mode_raw not in ("shared", "separate"):
        raise ctx.error(
            "verifier.environment_mode",
            f"unknown environment_mode {mode_raw!r}",
            'use "shared" (evaluate in the agent environment) or "separate" (fresh verifier)',
        )
    if env_decl is not None and not isinstance(env_decl, dict):
        raise ctx.error(
            "verifier.environment",
            "verifier.environment must be a table",
            "write it as [verifier.environment]",
        )
    if mode_raw == "shared" and env_decl is not None:
        raise ctx.error(
            "verifier.environment_mode",
            "a shared verifier cannot declare its own [verifier.environment]",
            'set environment_mode = "separate" or remove [verifier.environment]',
        )
    mode = None
    if mode_raw == "shared":
        mode = "reuse"
    elif mode_raw == "separate" or env_decl is not None:
        mode = "fresh"
    out: dict[str, Any] = {
        "mode": mode,
        "timeout": _timeout(verifier, "verifier.timeout_sec", ctx),
        "env": _str_map(verifier.get("env"), "verifier.env", ctx),
        "policy": _network(verifier, "verifier", ctx),
        "collect": _collect(verifier.get("collect"), ctx),
        "setup": None,
        "baseline": None,
        "startup_env": None,
        "resources": None,
        "user": _user(verifier, "verifier", ctx),
    }
    if env_decl is not None:
        # An explicit verifier environment is independent (H2, H4): its unset fields do not
        # inherit the agent's, an empty table gives the default public baseline.
        out["setup"] = _setup(env_decl, "verifier.environment", ctx)
        out["resources"] = _resources(env_decl, "verifier.environment", ctx)
        out["baseline"] = _env_network(env_decl, "verifier.environment", ctx) or NetworkPolicy()
        if "env" in env_decl:
            out["startup_env"] = _str_map(env_decl.get("env"), "verifier.environment.env", ctx)
        _warn_env_extras(env_decl, "verifier.environment", ctx)
    for key in verifier:
        if key == "user":
            continue
        if key == "continuous":
            ctx.warn("verifier.continuous", "fork-specific declaration")
        elif key not in (
            "environment_mode",
            "environment",
            "timeout_sec",
            "env",
            "network_mode",
            "allowed_hosts",
            "collect",
        ):
            ctx.warn(f"verifier.{key}", "unknown declaration")
    return out


def _collect(value: Any, ctx: _Ctx, where: str = "verifier.collect") -> list[ArtifactCollectCommand] | None:
    """``[[verifier.collect]]`` → artifact_collect; sidecars, ``user`` and unknown fields are errors (H6)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ctx.error(
            where,
            f"{where} must be an array of tables",
            "write each command as [[verifier.collect]]",
        )
    out: list[ArtifactCollectCommand] = []
    for i, item in enumerate(value):
        path = f"{where}.{i}"
        if not isinstance(item, dict):
            raise ctx.error(path, "each verifier.collect entry must be a table", "use [[verifier.collect]]")
        for key in item:
            if key == "user":
                raise ctx.error(
                    f"{path}.user",
                    "per-command `user` in verifier.collect is not supported",
                    "remove `user`; collection commands run as the session user",
                    code="E0413",
                )
            if key not in ("command", "service", "timeout_sec"):
                raise ctx.error(
                    f"{path}.{key}",
                    f"unknown verifier.collect field `{key}`",
                    "allowed fields: command, timeout_sec, service",
                    code="E0413",
                )
        command = item.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ctx.error(
                f"{path}.command",
                "verifier.collect needs a non-empty `command`",
                'e.g. command = "cp /app/out.txt /logs/artifacts/"',
            )
        service = item.get("service", "main")
        if service != "main":
            raise ctx.error(
                f"{path}.service",
                f"sidecar service {service!r} is not supported",
                'remove `service` (only "main" is supported)',
                code="E0413",
            )
        timeout = _seconds(item["timeout_sec"], f"{path}.timeout_sec", ctx) if "timeout_sec" in item else 60.0
        out.append(ArtifactCollectCommand(command=command, timeout_seconds=timeout))
    return out


def _artifacts(raw: Mapping[str, Any], ctx: _Ctx, where: str = "artifacts") -> list[ArtifactSpec] | None:
    value = raw.get("artifacts")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ctx.error(where, "artifacts must be a list", 'e.g. artifacts = ["/app/out.txt"]')
    return [_artifact(item, f"{where}.{i}", ctx) for i, item in enumerate(value)]


def _artifact(item: Any, path: str, ctx: _Ctx) -> ArtifactSpec:
    """One ``artifacts`` entry (A4): a source path, or {source, destination, exclude, service}."""
    if isinstance(item, str):
        item = {"source": item}
    if not isinstance(item, dict):
        raise ctx.error(path, "an artifact must be a path or a table", 'e.g. {source = "/app/x"}')
    unknown = sorted(set(item) - {"source", "destination", "exclude", "service"})
    if unknown:
        raise ctx.error(
            f"{path}.{unknown[0]}",
            f"unknown artifact field(s) {unknown}",
            "allowed: source, destination, exclude, service",
        )
    source = item.get("source")
    if not isinstance(source, str) or not source.startswith("/") or ".." in source.split("/"):
        raise ctx.error(
            f"{path}.source",
            f"artifact source must be an absolute path without `..`, got {source!r}",
            'e.g. "/app/result.txt"',
        )
    if item.get("service", "main") != "main":
        raise ctx.error(
            f"{path}.service",
            f"artifacts from service {item['service']!r} are not supported",
            "collect from the main service only",
            code="E0413",
        )
    dest = item.get("destination")
    if dest is not None and (not isinstance(dest, str) or dest.startswith("/") or ".." in dest.split("/")):
        raise ctx.error(
            f"{path}.destination",
            f"artifact destination must be a relative path without `..`, got {dest!r}",
            'e.g. destination = "out/result.txt"',
        )
    exclude = item.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(e, str) for e in exclude):
        raise ctx.error(f"{path}.exclude", "artifact exclude must be a list of tar patterns", 'e.g. ["*.tmp"]')
    return ArtifactSpec(source=source, destination=dest, exclude=list(exclude))


def _metadata(
    root: Path, raw: Mapping[str, Any], ctx: _Ctx, schema_version: str | None, solution_env: dict[str, str]
) -> dict[str, Any]:
    """Free-form [metadata] first, explicit declarations win (H6); paths for the run-time half."""
    free = raw.get("metadata", {})
    if not isinstance(free, dict):
        raise ctx.error("metadata", "[metadata] must be a table", "write it as [metadata]")
    meta: dict[str, Any] = dict(free)
    if "source" in raw:
        if not isinstance(raw["source"], str):
            raise ctx.error("source", "source must be a string", 'e.g. source = "terminal-bench"')
        meta["source"] = raw["source"]
    package = _package(raw, ctx)
    if package is not None:
        meta["task"] = package
    meta["schema_version"] = schema_version
    meta["task_dir"] = str(root.resolve())
    meta["tests_dir"] = str((root / "tests").resolve())
    meta["solution_dir"] = str((root / "solution").resolve())
    meta["environment_dir"] = str((root / "environment").resolve())
    meta["solution_env"] = solution_env
    meta["harbor_raw"] = raw
    return meta


def _package(raw: Mapping[str, Any], ctx: _Ctx) -> dict[str, Any] | None:
    task = raw.get("task")
    if task is None:
        return None
    if not isinstance(task, dict):
        raise ctx.error("task", "[task] must be a table", "write it as [task]")
    name = task.get("name")
    if not isinstance(name, str) or not _PACKAGE_NAME.match(name) or ".." in name:
        raise ctx.error(
            "task.name",
            f"[task] name must look like org/name, got {name!r}",
            'e.g. name = "my-org/hello-world"',
        )
    version = task.get("version")
    if version is not None and (not isinstance(version, str) or not version.strip()):
        raise ctx.error(
            "task.version",
            f"task.version must be a non-empty string, got {version!r}",
            'e.g. version = "1.0.0" (any non-empty string)',
        )
    for key in task:
        if key not in ("name", "version", "description", "authors", "keywords"):
            ctx.warn(f"task.{key}", "unknown declaration")
    return {k: task[k] for k in ("name", "version", "description", "authors", "keywords") if k in task}


_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE)
_FROM = re.compile(r"^\s*FROM\s", re.IGNORECASE)


def dockerfile_workdir(text: str) -> str | None:
    """The image's default working directory: the final stage's last ``WORKDIR``, or None.

    None also when it cannot be known without building: a ``$VAR`` in it, or a relative
    ``WORKDIR`` with no absolute one before it in the stage (it depends on the base image).
    """
    found: str | None = None
    for line in text.splitlines():
        if _FROM.match(line):  # a new build stage starts from its own base image
            found = None
            continue
        m = _WORKDIR.match(line)
        if not m:
            continue
        value = m.group(1).strip("\"'")
        if "$" in value:
            found = None
        elif value.startswith("/"):
            found = value
        elif found:
            found = found.rstrip("/") + "/" + value
    return found
