"""``acx explain``: the provenance chain of a resolved field (like ``git config --show-origin``).

A query names a request (or ``-`` for orchestration-level fields such as ``task_concurrency``
and ``runtime.*``) and a dotted field path. A leaf path gives one chain; a prefix
(``execution``, ``environment.setup``) gives the chain of every leaf under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acx.compiler._redact import redact
from acx.compiler._resolve import Compiled
from acx.diagnostics import did_you_mean
from acx.errors import AcxResolutionError
from acx.ir import Contribution

__all__ = ["ORCHESTRATION_SCOPE", "ExplainedField", "explain_field", "flat_leaves"]

#: The REQUEST argument that selects orchestration-level fields.
ORCHESTRATION_SCOPE = "-"


@dataclass(frozen=True)
class ExplainedField:
    path: str
    #: the resolved value (redacted view)
    value: Any
    #: contributions, lowest precedence first; the last one won.
    chain: list[Contribution]


def explain_field(compiled: Compiled, request: str, field: str) -> list[ExplainedField]:
    """The provenance of ``field`` in ``request``; AcxResolutionError (E0307) for unknown names."""
    field = field.strip().strip(".")
    if request == ORCHESTRATION_SCOPE:
        table = compiled.orchestration_provenance
        orch = compiled.orchestration
        values = flat_leaves({"task_concurrency": orch.task_concurrency, "runtime": redact(orch.runtime)})
    else:
        names = [r.name for r in compiled.orchestration.requests]
        if request not in compiled.provenance:
            guess = did_you_mean(request, names)
            raise AcxResolutionError(
                f"no request named `{request}`",
                code="E0307",
                path="REQUEST",
                help=(f"did you mean `{guess}`? " if guess else "")
                + f"requests: {', '.join(names)}; use `-` for orchestration-level fields",
            )
        table = compiled.provenance[request]
        run = next(r for r in compiled.orchestration.requests if r.name == request)
        values = flat_leaves(redact(run.request))
    matches = [p for p in table if p == field or p.startswith(field + ".")]
    if not matches:
        guess = did_you_mean(field, list(table))
        sections = sorted({p.split(".")[0] for p in table})
        raise AcxResolutionError(
            f"unknown field path `{field}`" + (f" in request `{request}`" if request != ORCHESTRATION_SCOPE else ""),
            code="E0307",
            path="FIELD_PATH",
            help=(f"did you mean `{guess}`? " if guess else "")
            + f"paths are dotted, starting with one of: {', '.join(sections)}",
        )
    return [ExplainedField(path=p, value=values.get(p), chain=list(table[p])) for p in matches]


def flat_leaves(data: Any) -> dict[str, Any]:
    """Dotted path → value for every leaf (network policies and empty containers are leaves)."""
    policy = {
        "baseline_network_policy",
        "evaluation_baseline_network_policy",
        "run_network_policy",
        "evaluation_network_policy",
    }
    out: dict[str, Any] = {}

    def walk(value: Any, path: str, key: str) -> None:
        if isinstance(value, dict) and value and key not in policy:
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k), str(k))
        else:
            out[path] = value

    walk(data, "", "")
    return out
