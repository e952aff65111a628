"""``acx compile SPEC --plans`` / ``-o plan.json`` and ``acx explain … --task ID`` for plan fields.

The config engineer's ``compile``/``explain`` commands call :func:`run_plans` and
:func:`explain_plan_field` with the parsed ``args`` and the resolver's ``Compiled``. This module is
the CLI edge of the planner: it probes driver capabilities, plans every selected task × attempt,
prints a Terraform-style text plan or the versioned JSON form, and writes the compiled program
atomically.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from acx.api import PlannedRequest

__all__ = ["build_program", "explain_plan_field", "format_seconds", "plan_compiled", "run_plans"]


def plan_compiled(compiled: Any, *, task_glob: str | None = None, provenance: bool = False) -> list[PlannedRequest]:
    """Plan every request of ``compiled`` (:func:`acx.api.plan_compiled`)."""
    from acx.api import plan_compiled as plan

    return plan(compiled, task_glob=task_glob, provenance=provenance)


def _printed_with_the_plan(warning: Any) -> None:
    """Warnings are part of the printed plan (text and JSON); nothing to log besides."""


# ---------------------------------------------------------------------------------------------
# run_plans
# ---------------------------------------------------------------------------------------------
def run_plans(args: Any, compiled: Any) -> int:
    """``--plans`` prints the plans (text, JSON or YAML); ``-o FILE`` writes the compiled program."""
    output = getattr(args, "output", None)
    fmt = getattr(args, "format", "text")
    full = bool(getattr(args, "full", False))
    # Provenance for the program file, and for JSON/YAML --full (as `--dry-run --full` does).
    with_prov = bool(output) or (full and fmt != "text")
    if output:
        refuse_literal_secrets(compiled)
    planned = plan_compiled(compiled, task_glob=getattr(args, "tasks", None), provenance=with_prov)
    if output:
        program = build_program(compiled, planned)
        write_program(Path(output), program)
        if not getattr(args, "plans", False):
            n = sum(len(p.rows) * len(p.rp.attempts()) for p in planned)
            sys.stderr.write(f"acx: wrote {output}: {len(planned)} request(s), {n} plan(s), {program.content_hash}\n")
    if getattr(args, "plans", False) or not output:
        if fmt == "json":
            _write_json(sys.stdout, planned, provenance=full)
        elif fmt == "yaml":
            from acx.cli._output import to_yaml

            sys.stdout.write(to_yaml(_payload(planned, provenance=full)))
        else:
            render_text(sys.stdout, planned, full=full)
    return 0


_ENV_MAPS = (
    "env_variables",
    "run_env_variables",
    "evaluation_env_variables",
    "evaluation_environment_env_variables",
)


def redacted_plan(plan: Any) -> dict[str, Any]:
    """A printable view of a plan: literal env values and secret-looking params masked.

    Targeted at the places a plan can hold secrets (env maps, provider/component params,
    analysis params) so 30,000 plans print in seconds; ``${VAR}`` references stay visible.
    """
    import msgspec

    from acx.compiler._redact import redact, redact_value

    d: dict[str, Any] = msgspec.to_builtins(plan)
    for key in ("environment", "evaluation_environment"):
        env = d.get(key)
        if env is None:
            continue
        for name in _ENV_MAPS:
            if env.get(name):
                env[name] = redact_value(env[name])
        if env.get("params"):
            env["params"] = redact(env["params"])
    for key in ("benchmark_plan", "harness_plan"):
        if d[key].get("params"):
            d[key]["params"] = redact(d[key]["params"])
    if d["execution"].get("analysis_params"):
        d["execution"]["analysis_params"] = redact(d["execution"]["analysis_params"])
    return d


def _request_head(p: PlannedRequest) -> dict[str, Any]:
    req = p.rp.request
    return {
        "name": p.name,
        "benchmark": req.benchmark.id,
        "harness": req.harness.id,
        "environment": req.environment.id,
        "total_tasks": p.rp.total_tasks,
    }


def _task_entry(task: Any, plans: dict[int, Any], warnings: list[str], prov: Any = None) -> dict[str, Any]:
    entry = {
        "task_id": task.task_id,
        "load_warnings": list(task.load_warnings),
        "warnings": warnings,
        "attempts": {str(a): redacted_plan(plan) for a, plan in plans.items()},
    }
    if prov is not None:  # --full: the first attempt's field provenance, values redacted
        entry["provenance"] = _redacted_provenance(prov)
    return entry


def _redacted_provenance(prov: dict[str, Any]) -> dict[str, Any]:
    return {path: [_redacted_contribution(path, c) for c in chain] for path, chain in prov.items()}


def _redacted_contribution(path: str, contribution: Any) -> dict[str, Any]:
    """A Contribution as JSON data; values of sensitive paths (env maps, keys) masked."""
    import msgspec

    from acx.compiler._redact import is_sensitive_path, redact, redact_value

    entry: dict[str, Any] = msgspec.to_builtins(contribution)
    if is_sensitive_path(tuple(path.split("."))):
        entry["value"] = redact_value(entry.get("value"))
    out: dict[str, Any] = redact(entry)
    return out


def _payload(planned: list[PlannedRequest], *, provenance: bool = False) -> dict[str, Any]:
    return {
        "format_version": 1,
        "requests": [
            {
                **_request_head(p),
                "tasks": [_task_entry(t, plans, w, pv if provenance else None) for t, plans, w, pv in p.rows],
            }
            for p in planned
        ],
    }


def _write_json(out: TextIO, planned: list[PlannedRequest], *, provenance: bool = False) -> None:
    """Streamed, one task at a time, so memory stays flat for large datasets."""
    import msgspec

    def block(value: Any, indent: int) -> str:
        text = msgspec.json.format(msgspec.json.encode(value), indent=2).decode()
        pad = " " * indent
        return "\n".join(pad + line if i else line for i, line in enumerate(text.splitlines()))

    out.write('{\n  "format_version": 1,\n  "requests": [')
    for ri, p in enumerate(planned):
        head = block(_request_head(p), 4)
        out.write(("," if ri else "") + "\n    " + head[:-1].rstrip() + ',\n      "tasks": [')
        for ti, (task, plans, warnings, prov) in enumerate(p.rows):
            entry = _task_entry(task, plans, warnings, prov if provenance else None)
            out.write(("," if ti else "") + "\n        " + block(entry, 8))
        out.write("\n      ]\n    }")
    out.write("\n  ]\n}\n")


# ---------------------------------------------------------------------------------------------
# The compiled program
# ---------------------------------------------------------------------------------------------
def build_program(compiled: Any, planned: list[PlannedRequest]) -> Any:
    """The sealed compiled program (:func:`acx.api.program_from_plans`)."""
    from acx.api import program_from_plans

    return program_from_plans(compiled, planned)


def refuse_literal_secrets(compiled: Any) -> None:
    """E0230 when a request holds a literal secret: a saved plan keeps references, never values (V1)."""
    import msgspec

    from acx.compiler._interpolate import format_path
    from acx.compiler._redact import literal_secret_paths
    from acx.errors import AcxConfigError

    found: list[tuple[str, str]] = []
    for run in compiled.orchestration.requests:
        for path in literal_secret_paths(msgspec.to_builtins(run.request)):
            field = format_path(path)
            chain = compiled.provenance.get(run.name, {}).get(field) or []
            found.append((f"request {run.name!r}: {field}", chain[-1].source if chain else ""))
    if not found:
        return
    where = "; ".join(f"{f} ({src})" if src else f for f, src in found)
    raise AcxConfigError(
        f"a saved plan holds references, never secret values, but {len(found)} field(s) hold a literal secret: {where}",
        code="E0230",
        path=found[0][0].split(": ", 1)[1],
        help="move each value into an environment variable and write it as a reference, e.g. "
        "`OPENAI_API_KEY: ${OPENAI_API_KEY}` or `postgres://user:${DB_PASSWORD}@db/x`; `acx run SPEC` "
        "without -o accepts literal values",
    )


def write_program(path: Path, program: Any) -> None:
    """Atomically (temp file, fsync, rename; symlinks followed, devices written in place): see
    :func:`acx.cli._output.write_output`. Missing parent directories are created."""
    import msgspec

    from acx.cli._output import write_output

    data = msgspec.json.encode(program, order="deterministic")
    # Owner-only (0600): the file is a full program (docs/planning.md), whatever the umask or the
    # mode of a file it replaces.
    write_output(str(path), data + b"\n", flag="-o", make_parents=True, mode=0o600)


# ---------------------------------------------------------------------------------------------
# Text rendering
# ---------------------------------------------------------------------------------------------
def format_seconds(value: float | None) -> str:
    """``None`` → ``none``; whole minutes/hours compact (``90m`` → ``1h30m``); else seconds."""
    if value is None:
        return "none"
    if value != int(value) or value < 60 or int(value) % 60:
        return f"{value:g}s"
    minutes = int(value) // 60
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours}h{minutes}m"
    return f"{hours}h" if hours else f"{minutes}m"


def _policy(p: Any) -> str:
    if p is None:
        return "public"
    if p.network_mode == "allowlist":
        return f"allowlist[{', '.join(p.allowed_hosts)}]"
    if p.network_mode == "denylist":
        return f"denylist[{', '.join(p.denied_hosts)}]"
    return str(p.network_mode)


def _setup_text(setup: Any, full: bool) -> str:
    parts = []
    for name, value in (("image", setup.image), ("workdir", setup.workdir), ("os", setup.os)):
        if value is not None or full:
            parts.append(f"{name} {value if value is not None else '(driver default)'}")
    if setup.build_timeout_seconds is not None or full:
        parts.append(f"build {format_seconds(setup.build_timeout_seconds)}")
    return " · ".join(parts)


def _budget_line(plan: Any, harness_free: bool, full: bool = False) -> str:
    run = plan.run_timeout_seconds
    if harness_free:
        watchdog = "run_task gets T"
    elif run is None:
        watchdog = "watchdog none"
    else:
        watchdog = f"watchdog {format_seconds(run + plan.run_timer_compensation_seconds)}"
    parts = [f"install {format_seconds(plan.install_timeout_seconds)}"] if plan.install_timeout_seconds else []
    parts += [
        f"run {format_seconds(run)} ({watchdog})",
        f"collect {format_seconds(plan.runresult_collect_timeout_seconds)}",
        f"evaluation {format_seconds(plan.evaluation_timeout_seconds)}",
    ]
    if plan.collect_artifacts or full:
        prep = plan.artifact_collect_timeout_seconds
        parts.append(
            f"artifacts {format_seconds(plan.artifact_limits.timeout_seconds)}"
            + (f" (commands {format_seconds(prep)})" if prep is not None or full else "")
        )
    return " · ".join(parts)


def _step_text(step: Any, plan: Any) -> str:
    """One step of a multi-step plan: its name, budgets, users, verifier variables, gate."""
    parts = [
        step.name,
        f"run {format_seconds(step.run_timeout_seconds)}",
        f"evaluation {format_seconds(step.evaluation_timeout_seconds)}",
    ]
    if step.run_user != plan.run_user or step.evaluation_user != plan.evaluation_user:
        parts.append(
            f"users run {step.run_user or '(image default)'}, evaluation {step.evaluation_user or '(image default)'}"
        )
    if step.run_network_policy is not None or step.evaluation_network_policy is not None:
        run = _policy(step.run_network_policy or plan.run_network_policy)
        ev = _policy(step.evaluation_network_policy or plan.evaluation_network_policy)
        parts.append(f"network run {run} · evaluation {ev}")
    if step.evaluation_env_variables is not None:
        parts.append("evaluation env " + ", ".join(sorted(step.evaluation_env_variables)))
    if step.artifacts or step.artifact_collect:
        what = ", ".join(a.source for a in step.artifacts)
        if step.artifact_collect:
            what += (" · " if what else "") + f"{len(step.artifact_collect)} collect command(s)"
        parts.append(f"artifacts + {what}")
    if step.min_reward:
        gate = ", ".join(f"{k} >= {v:g}" for k, v in step.min_reward.items())
        parts.append(f"later steps only if {gate}")
    return " · ".join(parts)


#: How a multi-step task's reward comes from its steps' (Harbor's multi_step_reward_strategy).
_STEP_REWARD = {
    "mean": "mean: the per-key mean over the steps with a reward (a missing key counts 0)",
    "final": "final: the rewards of the last step that ran",
}


def _install_text(plan: Any) -> str:
    """Where the agent is installed: once per cache key (docker) or in every attempt, and why."""
    if plan.install_cache_key:
        return (
            f"once per base image (install cache, key {plan.install_cache_key} + the uploads' content, "
            "the install's variables and the image digest at run time)"
        )
    if plan.harness_plan.install_cache_key is None:
        return "in every attempt (install_cache = false)"
    return f"in every attempt (driver {plan.environment.id} cannot cache installs)"


def _resources_text(resources: Any) -> str:
    res = {k: v for k, v in _builtins(resources).items() if v not in (None, False)}
    return ", ".join(f"{k} {v}" for k, v in res.items())


def _verifier_text(ev: Any, full: bool) -> str:
    """The fresh verifier's own set-up, resources and start-up variable names."""
    parts = [_setup_text(ev.setup, full)]
    if ev.resources is not None:
        parts.append(_resources_text(ev.resources))
    if ev.env_variables:
        parts.append("env " + ", ".join(sorted(ev.env_variables)))
    text = " · ".join(p for p in parts if p)
    return " (verifier" + (f": {text}" if text else "") + ")"


def _artifacts_text(plan: Any, full: bool) -> str:
    if not plan.collect_artifacts:
        return "off (benchmark does not collect)" if not plan.artifact_collection_supported else "off"
    text = ", ".join(a.source for a in plan.artifacts) or "(none)"
    if plan.artifact_collect:
        text += f" · {len(plan.artifact_collect)} collect command(s)"
    text += " · saved" if plan.save_artifacts else " · not saved"
    limits = plan.artifact_limits
    if full or (limits.max_mb, limits.max_files) != (16384, 100000):
        text += f" · limits {limits.max_mb} MiB, {limits.max_files} files"
    return text


def _task_lines(plan: Any, *, full: bool, harness_free: bool) -> list[str]:
    env = plan.environment
    lines: list[tuple[str, str]] = []
    setup = _setup_text(env.setup, full)
    lines.append(("environment", env.id + (f" · {setup}" if setup else "")))
    if env.resources is not None:
        lines.append(("resources", _resources_text(env.resources)))
    ev = plan.evaluation_environment
    mode = plan.evaluation_environment_mode
    policies = [env.baseline_network_policy, plan.run_network_policy]
    if mode != "none":
        policies.append(plan.evaluation_network_policy)
    if ev is not None:
        policies.append(ev.baseline_network_policy)
    if full or any(p is not None and p.network_mode != "public" for p in policies):
        net = f"baseline {_policy(env.baseline_network_policy)} · run {_policy(plan.run_network_policy)}"
        if full or mode != "none":  # mode none evaluates outside any environment: no policy applies
            net += f" · evaluation {_policy(plan.evaluation_network_policy)}"
        if ev is not None:
            net += f" · verifier baseline {_policy(ev.baseline_network_policy)}"
        lines.append(("network", net))
    if full or mode != "none":
        lines.append(("evaluation", mode + (_verifier_text(ev, full) if ev is not None else "")))
    if full or plan.run_user is not None or plan.evaluation_user is not None:
        lines.append(
            (
                "users",
                f"run {plan.run_user or '(image default)'} · evaluation {plan.evaluation_user or '(image default)'}",
            )
        )
    lines.append(("budgets", _budget_line(plan, harness_free, full)))
    if plan.steps:
        lines.append(("steps", f"{len(plan.steps)}, in order in one environment (each: agent run, then verifier)"))
        lines += [(f"  {i}", _step_text(step, plan)) for i, step in enumerate(plan.steps, start=1)]
    if plan.install_timeout_seconds:
        lines.append(("install", _install_text(plan)))
    if plan.collect_artifacts or full:
        lines.append(("artifacts", _artifacts_text(plan, full)))
    names = sorted(set(env.env_variables) | set(env.run_env_variables) | set(env.evaluation_env_variables))
    if names:
        lines.append(("env vars", ", ".join(names)))
    if plan.required_env:
        lines.append(("requires", ", ".join(f"${{{n}}}" for n in plan.required_env)))
    if plan.applied_recipes or full:
        lines.append(("recipes", ", ".join(plan.applied_recipes) or "(none)"))
    return [f"      {label:<12} {text}" for label, text in lines]


def _builtins(value: Any) -> dict[str, Any]:
    import msgspec

    out: dict[str, Any] = msgspec.to_builtins(value)
    return out


def _same_but_attempt(a: Any, b: Any) -> bool:
    from msgspec.structs import replace

    return bool(replace(b, attempt=a.attempt) == a)


def render_text(out: TextIO, planned: Iterable[PlannedRequest], *, full: bool) -> None:
    for p in planned:
        req = p.rp.request
        k = len(p.rp.attempts())
        n_plans = len(p.rows) * k
        recipes: dict[str, int] = {}
        for _task, plans, _w, _p in p.rows:
            for plan in plans.values():
                for rid in plan.applied_recipes:
                    recipes[rid] = recipes.get(rid, 0) + 1
        out.write(
            f"request {p.name!r}: {req.benchmark.id} × {req.harness.id} on {req.environment.id} — "
            f"{len(p.rows)} of {p.rp.total_tasks} task(s) × {k} attempt(s) = {n_plans} plan(s)"
            + (f"; recipes: {', '.join(f'{r} ({c})' for r, c in recipes.items())}" if recipes else "")
            + "\n"
        )
        harness_free = bool(p.rp.benchmark.harness_free)
        for task, plans, warnings, _prov in p.rows:
            first = plans[1]
            out.write(f"\n  + {task.task_id}" + (f"  [{task.category}]" if task.category != "all" else "") + "\n")
            out.write("\n".join(_task_lines(first, full=full, harness_free=harness_free)) + "\n")
            rest = [a for a in plans if a != 1]
            differing = [a for a in rest if not _same_but_attempt(first, plans[a])]
            if rest and not differing:
                out.write(f"      {'attempts':<12} {k} (identical plans)\n")
            for a in differing:
                out.write(f"    attempt {a}:\n")
                out.write("\n".join(_task_lines(plans[a], full=full, harness_free=harness_free)) + "\n")
            if task.steps:
                strategy = task.metadata.get("multi_step_reward_strategy", "mean")
                out.write(f"      {'reward':<12} {_STEP_REWARD.get(strategy, strategy)}\n")
            for w in [*task.load_warnings, *warnings]:
                out.write(f"      warning: {w}\n")
        out.write("\n")


# ---------------------------------------------------------------------------------------------
# explain for plan fields
# ---------------------------------------------------------------------------------------------
def _paths(value: Any, prefix: str = "") -> Iterable[str]:
    if isinstance(value, dict):
        for key, sub in value.items():
            path = f"{prefix}{key}"
            yield path
            yield from _paths(sub, f"{path}.")


def _lookup(data: Any, path: str) -> tuple[bool, Any]:
    cur = data
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def explain_plan_field(args: Any, compiled: Any) -> int:
    """``acx explain SPEC REQUEST FIELD --task ID [--attempt N]``: a plan field and its provenance."""
    import json

    import msgspec

    from acx.api import plan_one
    from acx.compiler._redact import is_sensitive_path, redact
    from acx.diagnostics import did_you_mean
    from acx.errors import AcxPlanError

    names = [r.name for r in compiled.orchestration.requests]
    run = next((r for r in compiled.orchestration.requests if r.name == args.request), None)
    if run is None:
        hint = did_you_mean(args.request, names)
        raise AcxPlanError(
            f"no request named {args.request!r}",
            code="E0460",
            path="REQUEST",
            help=(f"did you mean {hint!r}? " if hint else "") + "requests: " + ", ".join(names),
        )
    if not getattr(args, "task", None):
        raise AcxPlanError(
            f"plan field {args.field!r} needs a task",
            code="E0460",
            path="--task",
            help="add --task ID (`acx compile SPEC --plans` lists the task ids)",
        )
    rp = plan_one(compiled, run)
    rp.on_warning = _printed_with_the_plan
    task = rp.task(args.task)
    attempt = int(getattr(args, "attempt", None) or 1)
    detailed = rp.plan_attempt_detailed(task, attempt)
    data = msgspec.to_builtins(detailed.plan)
    field = args.field.removeprefix("plan.")
    found, value = _lookup(data, field)
    if not found:
        candidates = list(_paths(data))
        hint = did_you_mean(field, candidates)
        raise AcxPlanError(
            f"ExecutionPlan has no field {field!r}",
            code="E0460",
            path="FIELD",
            help=(f"did you mean {hint!r}? " if hint else "")
            + "plan fields: "
            + ", ".join(k for k in data if not k.startswith("_")),
        )
    parts = tuple(field.split("."))
    if is_sensitive_path(parts):
        value = redact({parts[-1]: value})[parts[-1]]
    contributions = [_redacted_contribution(p, c) | {"path": p} for p, c in _chain_for(detailed.provenance, field)]
    if getattr(args, "format", "text") == "json":
        payload = {
            "format_version": 1,
            "request": run.name,
            "task_id": task.task_id,
            "attempt": attempt,
            "field": field,
            "value": value,
            "contributions": contributions,
        }
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        return 0
    out = sys.stdout
    out.write(f"{run.name} / {task.task_id} / attempt {attempt}: {field} = {_short(value)}\n")
    if not contributions:
        out.write("  (no recorded contributions: the ExecutionPlan default applies)\n")
    for i, c in enumerate(contributions):
        mark = "  ← wins" if i == len(contributions) - 1 else ""
        where = f" [{c['path']}]" if c["path"] != field else ""
        out.write(f"  {c['layer']:<34} {c['source']}{where}\n      = {_short(c.get('value'))}{mark}\n")
    return 0


def _chain_for(provenance: dict[str, Any], field: str) -> list[tuple[str, Any]]:
    """Contributions to ``field``, its ancestors (a whole struct replaced) and its descendants."""
    out: list[tuple[str, Any]] = []
    for path, chain in provenance.items():
        if path == field or field.startswith(path + ".") or path.startswith(field + "."):
            out.extend((path, c) for c in chain)
    return out


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:197] + "..."
