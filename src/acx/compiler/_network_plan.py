"""Network and capability planning: the model-endpoint allowance and the P7 capability check.

P7: after planning, every policy, resource, OS, image and env requirement the plan demands is
checked against what the selected driver can enforce; a plan needing more is refused with a
:class:`acx.errors.CapabilityError` naming the field, the task, the driver and the fix. Nothing is
ever downgraded.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from msgspec.structs import replace

from acx.drivers import DriverCapabilities
from acx.errors import AcxPlanError, CapabilityError
from acx.ir import EnvironmentSpec, ExecutionPlan, NetworkPolicy, ResourceRequirements

__all__ = [
    "MODEL_ENDPOINT_SOURCE",
    "allow_model_endpoint",
    "check_capabilities",
    "drop_unenforced_storage",
    "model_endpoint_host",
]

MODEL_ENDPOINT_SOURCE = "model gateway (the agent in the sandbox calls the model through it)"
_RESOURCE_FIELDS = ("cpu", "memory_mb", "storage_mb", "gpu")


def model_endpoint_host(base_url: str | None, task_id: str) -> str:
    """``host`` or ``host:port`` of the model endpoint; an unusable URL is a planning error."""
    if not base_url or base_url.startswith("${"):
        raise AcxPlanError(
            f"task {task_id!r}: the run network policy restricts egress and the harness calls the model, "
            "but the model endpoint is unknown at planning time",
            code="E0427",
            path="model.base_url",
            help="give model.base_url as a literal URL (or a whole-field ${VAR} resolved at compile time) "
            "so its host can be allowed",
        )
    parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
    if not parts.hostname:
        raise AcxPlanError(
            f"model.base_url {base_url!r} has no host",
            code="E0427",
            path="model.base_url",
            help="write a URL such as https://api.example.com/v1",
        )
    host = parts.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def allow_model_endpoint(policy: NetworkPolicy, host: str) -> NetworkPolicy:
    """no-network → allowlist of the model host; allowlist → plus the model host."""
    if policy.network_mode == "no-network":
        return NetworkPolicy(network_mode="allowlist", allowed_hosts=[host])
    if policy.network_mode == "allowlist" and host not in policy.allowed_hosts:
        return NetworkPolicy(network_mode="allowlist", allowed_hosts=[*policy.allowed_hosts, host])
    return policy


def drop_unenforced_storage(plan: ExecutionPlan, caps: DriverCapabilities, warnings: list[str]) -> ExecutionPlan:
    """``storage_mb`` a driver cannot enforce is dropped with a warning, not refused.

    Disk size is a sizing hint (Harbor task templates declare ``storage_mb = 10240``), unlike
    egress or memory limits that tasks and graders rely on; AgentCompass ignores it with a
    warning too. The plan then states what will actually be enforced.
    """
    if "storage_mb" in caps.resources:
        return plan
    changes: dict[str, EnvironmentSpec] = {}
    for key, env in _environments(plan):
        if env.resources is None or env.resources.storage_mb is None:
            continue
        warnings.append(
            f"task {plan.task_id!r}: driver {env.id!r} cannot limit disk size; "
            f"{key}.resources.storage_mb = {env.resources.storage_mb} is ignored"
        )
        resources = replace(env.resources, storage_mb=None)
        changes[key] = replace(env, resources=None if resources == ResourceRequirements() else resources)
    return replace(plan, **changes) if changes else plan


def _refuse(message: str, *, code: str, path: str, help: str) -> CapabilityError:
    return CapabilityError(message, code=code, path=path, help=help)


def check_capabilities(
    plan: ExecutionPlan, caps: DriverCapabilities, *, requires_isolated_filesystem: bool, benchmark_id: str
) -> None:
    """Refuse what the driver cannot enforce (P7). Cheap: called for every plan."""
    driver = plan.environment.id
    task = plan.task_id
    if requires_isolated_filesystem and not caps.isolated_filesystem:
        raise _refuse(
            f"task {task!r}: benchmark {benchmark_id!r} needs a sandboxed filesystem "
            f"(it writes /logs, /tests, …), which driver {driver!r} does not provide",
            code="E0457",
            path="environment.id",
            help="run it with `--env docker` (or `environment docker` in the spec)",
        )
    _check_policies(plan, caps, driver, task)
    _check_resources(plan, caps, driver, task)
    _check_setup(plan, caps, driver, task)
    _check_env(plan, caps, driver, task)
    _check_users(plan, caps, driver, task)
    _check_install_cache(plan, caps, driver, task)


def _check_install_cache(plan: ExecutionPlan, caps: DriverCapabilities, driver: str, task: str) -> None:
    """``install_cache = true`` is honoured or refused; unset, a driver without it installs per attempt."""
    if plan.harness_plan.install_cache_required and not caps.install_cache:
        raise _refuse(
            f"task {task!r}: the harness requires the install cache (install_cache = true), but driver "
            f"{driver!r} cannot cache an installed agent (it installs in every attempt's sandbox)",
            code="E0459",
            path="harness.params.install_cache",
            help="drop install_cache (each attempt installs) or use a driver that caches installs (--env docker)",
        )


def _check_users(plan: ExecutionPlan, caps: DriverCapabilities, driver: str, task: str) -> None:
    """A stage user (Harbor's ``[agent].user``) is run as that user or refused, never ignored."""
    stages = [(field, getattr(plan, field)) for field in ("run_user", "evaluation_user")]
    for i, step in enumerate(plan.steps):  # a multi-step task's own step users
        stages += [(f"steps.{i}.run_user", step.run_user), (f"steps.{i}.evaluation_user", step.evaluation_user)]
    for field, user in stages:
        if user is not None and not caps.exec_user:
            raise _refuse(
                f"task {task!r}: {field} is {user!r}, but driver {driver!r} cannot run commands as another user",
                code="E0458",
                path=field,
                help="use a driver that runs commands as a sandbox user (--env docker)",
            )


def _phase_policies(plan: ExecutionPlan) -> list[tuple[str, NetworkPolicy | None]]:
    env = plan.environment
    out = [
        ("environment.baseline_network_policy", env.baseline_network_policy),
        ("run_network_policy", plan.run_network_policy),
        ("evaluation_network_policy", plan.evaluation_network_policy),
    ]
    if plan.evaluation_environment is not None:
        out.append(
            (
                "evaluation_environment.baseline_network_policy",
                plan.evaluation_environment.baseline_network_policy,
            )
        )
    for i, step in enumerate(plan.steps):  # a multi-step task's own phase policies
        out += [
            (f"steps.{i}.run_network_policy", step.run_network_policy),
            (f"steps.{i}.evaluation_network_policy", step.evaluation_network_policy),
        ]
    return out


def _check_policies(plan: ExecutionPlan, caps: DriverCapabilities, driver: str, task: str) -> None:
    for field, policy in _phase_policies(plan):
        if policy is None or policy.network_mode in caps.network_modes:
            continue
        reason = caps.unsupported_reasons.get(policy.network_mode, "")
        raise _refuse(
            f"task {task!r}: {field} is {policy.network_mode!r}, which driver {driver!r} cannot enforce"
            + (f" ({reason})" if reason else ""),
            code="E0451",
            path=field,
            help=f"use a driver that enforces {policy.network_mode!r} (e.g. --env docker), or choose one of: "
            + ", ".join(caps.network_modes),
        )
    if caps.dynamic_network_policy:
        return
    # Without live switching a session must keep one policy from start to end.
    env = plan.environment
    sequences = [("run environment", [env.baseline_network_policy, plan.run_network_policy])]
    if plan.evaluation_environment_mode == "reuse":
        sequences[0][1].append(plan.evaluation_network_policy)
    if plan.evaluation_environment is not None:
        sequences.append(
            (
                "fresh verifier",
                [plan.evaluation_environment.baseline_network_policy, plan.evaluation_network_policy],
            )
        )
    for where, seq in sequences:
        if all(p == seq[0] for p in seq):
            continue
        distinct = {(p.network_mode, tuple(p.allowed_hosts), tuple(p.denied_hosts)) for p in seq if p is not None}
        if len(distinct) > 1:
            modes = " → ".join(p.network_mode if p else "public" for p in seq)
            raise _refuse(
                f"task {task!r}: the {where} must switch network policy ({modes}), "
                f"but driver {driver!r} cannot switch the policy of a live session",
                code="E0452",
                path="run_network_policy",
                help="give every phase the same policy (set baseline_network_policy to the run policy), "
                "or use a driver with dynamic network policies (--env docker)",
            )


def _environments(plan: ExecutionPlan) -> list[tuple[str, EnvironmentSpec]]:
    """The plan's environments with their field names: the run one, then a fresh verifier's."""
    envs = [("environment", plan.environment)]
    if plan.evaluation_environment is not None:
        envs.append(("evaluation_environment", plan.evaluation_environment))
    return envs


def _check_resources(plan: ExecutionPlan, caps: DriverCapabilities, driver: str, task: str) -> None:
    for key, env in _environments(plan):
        field = f"{key}.resources"
        res = env.resources
        if res is None:
            continue
        wanted = [f for f in _RESOURCE_FIELDS if getattr(res, f) is not None]
        if res.gpu == 0:  # zero GPUs is no GPU request (its gpu_type is moot)
            wanted.remove("gpu")
        elif res.gpu_type is not None and "gpu" not in wanted:
            wanted.append("gpu")
        missing = [f for f in wanted if f not in caps.resources]
        if missing:
            raise _refuse(
                f"task {task!r}: {field} requests {', '.join(missing)}, which driver {driver!r} cannot enforce",
                code="E0453",
                path=f"{field}.{missing[0]}",
                help=f"driver {driver!r} enforces "
                + (", ".join(caps.resources) if caps.resources else "no resource limits")
                + "; use a driver that enforces the request, or remove it from the task/environment",
            )


def _check_setup(plan: ExecutionPlan, caps: DriverCapabilities, driver: str, task: str) -> None:
    for key, env in _environments(plan):
        field = f"{key}.setup"
        setup = env.setup
        if setup.os is not None and setup.os not in caps.os:
            raise _refuse(
                f"task {task!r}: {field}.os is {setup.os!r}; driver {driver!r} runs " + ", ".join(caps.os),
                code="E0454",
                path=f"{field}.os",
                help="run the task on a driver for that operating system",
            )
        if setup.image is not None and not caps.setup_image:
            raise _refuse(
                f"task {task!r}: {field}.image is {setup.image!r}, but driver {driver!r} cannot run images",
                code="E0455",
                path=f"{field}.image",
                help="use `--env docker` (or `environment docker`), or drop setup.image",
            )


def _check_env(plan: ExecutionPlan, caps: DriverCapabilities, driver: str, task: str) -> None:
    env = plan.environment
    if not caps.task_env and (env.env_variables or env.run_env_variables or env.evaluation_env_variables):
        raise _refuse(
            f"task {task!r}: the plan sets environment variables, which driver {driver!r} cannot inject",
            code="E0456",
            path="environment.env_variables",
            help="use a driver with task env support (host_process, docker)",
        )
    if env.require_startup_env and env.env_variables and not caps.startup_env:
        raise _refuse(
            f"task {task!r}: public variables must reach sandbox start-up, which driver {driver!r} cannot do",
            code="E0456",
            path="environment.require_startup_env",
            help="use a driver that injects start-up variables (docker)",
        )
