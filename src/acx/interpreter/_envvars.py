"""Environment-variable references (V1–V4): resolved from the launching process right before use.

Plans keep references — ``${NAME}``, ``${NAME:-default}``, or references embedded in longer
strings — never values. :func:`missing_names` lists every name a set of plans needs that the
process environment lacks (names only, never values), so the interpreter can refuse before any
environment opens. :func:`resolve_map` substitutes references without shell expansion: nothing
but the ``${…}`` forms is interpreted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from acx.envref import ENV_MAP_KEYS, referenced_names, substitute, whole_name
from acx.errors import AcxResolutionError
from acx.ir import ExecutionPlan, ModelSpec, RunRequest

__all__ = [
    "MissingEnvError",
    "live_request",
    "missing_names",
    "plan_env_maps",
    "referenced_names",
    "request_names",
    "required_names",
    "resolve_map",
    "resolve_value",
]


class MissingEnvError(AcxResolutionError):
    """Raised before any environment opens; lists names only."""

    def __init__(self, names: Iterable[str], *, where: str = "the plan") -> None:
        ordered = sorted(set(names))
        super().__init__(
            f"missing required environment variables: {', '.join(ordered)}",
            code="E0310",
            path=where,
            help="export them in the shell that runs acx (values are read at use time and never stored)",
        )
        self.names = ordered


def resolve_value(value: str, environ: Mapping[str, str]) -> str:
    """Substitute every reference; a missing or empty required name raises MissingEnvError."""
    out, missing = substitute(value, environ)
    if missing:
        raise MissingEnvError(missing)
    return out


def resolve_map(mapping: Mapping[str, str] | None, environ: Mapping[str, str]) -> dict[str, str]:
    missing: set[str] = set()
    out: dict[str, str] = {}
    for key, value in (mapping or {}).items():
        try:
            out[key] = resolve_value(str(value), environ)
        except MissingEnvError as exc:
            missing.update(exc.names)
    if missing:
        raise MissingEnvError(missing)
    return out


def plan_env_maps(plan: ExecutionPlan) -> list[Mapping[str, str]]:
    env = plan.environment
    maps: list[Mapping[str, str]] = [env.env_variables, env.run_env_variables, env.evaluation_env_variables]
    if env.evaluation_environment_env_variables is not None:
        maps.append(env.evaluation_environment_env_variables)
    if plan.evaluation_environment is not None:
        ev = plan.evaluation_environment
        maps += [ev.env_variables, ev.evaluation_env_variables]
        if ev.evaluation_environment_env_variables is not None:
            maps.append(ev.evaluation_environment_env_variables)
    return maps


def required_names(plan: ExecutionPlan, model: ModelSpec | None = None) -> set[str]:
    names = set(plan.required_env)
    for mapping in plan_env_maps(plan):
        for value in mapping.values():
            names |= referenced_names(str(value))[0]
    if model is not None:
        for ref in (model.api_key, model.base_url):
            if isinstance(ref, str):
                names |= referenced_names(ref)[0]
    return names


def request_names(req: RunRequest) -> set[str]:
    """The names a request needs whatever its tasks: its kept secret references, its env maps and
    the model's key and URL (a task can add more: :func:`required_names` of its plans)."""
    env = req.environment
    names = set(req.metadata.secret_refs)
    maps = [env.env_variables, env.run_env_variables, env.evaluation_env_variables]
    for mapping in [*maps, env.evaluation_environment_env_variables or {}]:
        for value in mapping.values():
            names |= referenced_names(str(value))[0]
    for ref in (req.model.api_key, req.model.base_url):
        if isinstance(ref, str):
            names |= referenced_names(ref)[0]
    return names


def missing_names(names: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    return sorted(n for n in set(names) if not environ.get(n))


def live_request(req: RunRequest, environ: Mapping[str, str]) -> tuple[RunRequest, list[str]]:
    """``req`` as it is used at run time: every whole-value ``${NAME}`` the compiler kept as a secret
    reference (``metadata.secret_refs``) replaced by its value from ``environ`` — in component and
    model params, the model id, environment params, execution lists. Env-variable maps keep their
    references (the driver resolves them, V1); ``output`` cannot hold secrets (the compiler refuses
    them: they name directories). Returns the request and the values (to scrub from results). The
    compiled request itself keeps the references: it is what gets persisted. With a name missing,
    ``req`` is returned as it is (the preflight refuses the run).
    """
    import msgspec

    names = set(req.metadata.secret_refs)
    if not names:
        return req, []
    if any(not environ.get(n) for n in names):
        # Refused before anything runs by the interpreter's preflight, which lists every missing
        # name of every request at once (these and the plans' env maps).
        return req, []
    values: list[str] = []

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            name = whole_name(value)
            if name is not None and name in names:
                values.append(environ[name])
                return environ[name]
            return value
        if isinstance(value, dict):
            # Kept as references: the driver resolves them right before use (V1).
            return {k: v if k in ENV_MAP_KEYS else walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    data = msgspec.to_builtins(req)
    data = {k: v if k in ("metadata", "output") else walk(v) for k, v in data.items()}
    return msgspec.convert(data, type(req)), values
