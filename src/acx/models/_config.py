"""From a RunRequest's ``model`` section to the gateway's roles and limits (pure but for reading
the environment values the request's ``${VAR}`` references name, at run time only).

``model.api_protocol``: unset, ``""`` or ``auto`` = the harness's default protocol; a string = that
protocol; a list = the protocols the endpoint speaks: the harness's default when listed, else the
first listed. Any protocol is usable by host-side harnesses (the client translates).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from acx.envref import substitute
from acx.errors import AcxPlanError
from acx.models._accounting import Limits, Price
from acx.models._types import PROTOCOLS, Endpoint, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator

    from acx.ir import ModelRoleSpec, RunRequest
    from acx.models._gateway import GatewaySession, Role

__all__ = [
    "cache_modes",
    "current_session",
    "limits_for",
    "resolve_protocol",
    "roles_for",
    "use_session",
    "uses_models",
]

_CURRENT: ContextVar[GatewaySession | None] = ContextVar("acx_model_session", default=None)


def current_session() -> GatewaySession | None:
    """The model gateway session of the attempt running in this context (set by the
    interpreter around the harness); ``None`` when the run has no model."""
    return _CURRENT.get()


@contextmanager
def use_session(session: GatewaySession | None) -> Iterator[None]:
    token = _CURRENT.set(session)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def resolve_protocol(value: str | list[str] | None, default: Protocol, *, path: str = "model.api_protocol") -> Protocol:
    """The protocol to speak, from ``model.api_protocol`` and the harness's default."""
    if value is None or value in ("", "auto"):
        return default
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item not in (*PROTOCOLS, "auto", ""):
            raise AcxPlanError(
                f"{path} {item!r} is not a protocol acx speaks",
                code="E0470",
                path=path,
                help="use one of: " + ", ".join(PROTOCOLS) + " (or auto)",
            )
    if default in items:
        return default
    return next(p for p in PROTOCOLS if p == items[0]) if items[0] in PROTOCOLS else default


def _resolve(value: str | None, environ: Mapping[str, str], path: str) -> str | None:
    if value is None:
        return None
    out, missing = substitute(value, environ)
    if missing:
        raise AcxPlanError(
            f"{path} names environment variable(s) {', '.join(sorted(missing))}, which are not set",
            code="E0310",
            path=path,
            help="export the variable(s) before `acx run`",
        )
    return out


def default_connections(concurrency: int) -> int:
    """An endpoint's ``max_connections`` when the request leaves it unset: twice the run's
    concurrent attempts (an agent may call the model in parallel), at least 8 — a fixed 8 queued
    three quarters of a 32-attempt run's calls behind each other."""
    return max(8, 2 * concurrency)


def _endpoint(
    spec: ModelRoleSpec,
    path: str,
    environ: Mapping[str, str],
    default_protocol: Protocol,
    run_dir: str | None,
    concurrency: int,
) -> Endpoint:
    if not spec.id:
        raise AcxPlanError(f"{path}.id is not set", code="E0471", path=f"{path}.id", help="name the model id")
    base_url = _resolve(spec.base_url, environ, f"{path}.base_url")
    if not base_url:
        raise AcxPlanError(
            f"{path}.base_url is not set: acx cannot reach model {spec.id!r}",
            code="E0471",
            path=f"{path}.base_url",
            help="give the endpoint's base URL, e.g. https://api.openai.com/v1",
        )
    _refuse_userinfo(base_url, f"{path}.base_url")
    return Endpoint(
        base_url=base_url,
        model=spec.id,
        protocol=resolve_protocol(spec.api_protocol, default_protocol, path=f"{path}.api_protocol"),
        api_key=_resolve(spec.api_key, environ, f"{path}.api_key"),
        params=dict(spec.params),
        connect_timeout=spec.connect_timeout_seconds,
        read_timeout=spec.request_timeout_seconds,
        total_timeout=spec.total_timeout_seconds,
        max_retries=spec.max_retries,
        max_connections=spec.max_connections or default_connections(concurrency),
        wrap_session_id=run_dir if spec.wrap_api_key else None,
    )


def _refuse_userinfo(base_url: str, path: str) -> None:
    """``https://user:pw@host`` would be sent as Basic auth (or not at all) instead of the key,
    and the password would sit in a URL that plans and messages show: refused, never echoed."""
    from urllib.parse import urlsplit

    try:
        netloc = urlsplit(base_url).netloc
    except ValueError:
        return  # not a URL at all: the client refuses it with its own message
    if "@" in netloc:
        raise AcxPlanError(
            f"{path} holds credentials (user:password@) before its host; acx sends the model key "
            "only as the API key header",
            code="E0471",
            path=path,
            help="remove user:password@ from the URL and give the key in api_key (e.g. api_key: ${OPENAI_API_KEY})",
        )


def _price(spec: ModelRoleSpec) -> Price | None:
    p = spec.price
    return None if p is None else Price(p.input_per_mtok, p.output_per_mtok, p.cached_input_per_mtok)


def roles_for(
    req: RunRequest,
    environ: Mapping[str, str],
    *,
    default_protocol: Protocol = "openai-chat",
    run_dir: str | None = None,
    concurrency: int | None = None,
) -> dict[str, Role]:
    """The run's model roles: ``agent`` from ``model`` itself (when it names a model), plus every
    ``model.roles`` entry. Keys are resolved here, at run time, and kept in memory only.
    ``concurrency`` (the run's concurrent attempts; default ``execution.task_concurrency``) sets
    the ``max_connections`` of endpoints that leave it unset (:func:`default_connections`)."""
    from acx.models._gateway import Role

    roles: dict[str, Role] = {}
    m = req.model
    concurrency = concurrency or req.execution.task_concurrency
    if m.id or m.base_url:
        roles["agent"] = Role(
            "agent", _endpoint(m, "model", environ, default_protocol, run_dir, concurrency), _price(m), cache=m.cache
        )
    for name, spec in m.roles.items():
        path = f"model.roles.{name}"
        ep = _endpoint(spec, path, environ, default_protocol, run_dir, concurrency)
        roles[name] = Role(name, ep, _price(spec), _limits(spec), cache=spec.cache)
    return roles


def cache_modes(req: RunRequest) -> dict[str, str]:
    """Each role's model-call cache mode (``acx explain``)."""
    m = req.model
    out: dict[str, str] = {}
    if m.id or m.base_url:
        out["agent"] = m.cache
    for name, spec in m.roles.items():
        out[name] = spec.cache
    return out


def _limits(spec: ModelRoleSpec) -> Limits:
    lim = spec.limits
    return Limits(lim.max_tokens_total, lim.max_model_calls, lim.max_cost_usd)


def limits_for(req: RunRequest) -> Limits:
    """The per-task limits of all roles together (``model.limits``)."""
    return _limits(req.model)


def uses_models(req: RunRequest) -> bool:
    m = req.model
    return bool(m.id or m.base_url or m.roles)
