"""The acx compiler: front ends → SourceDoc → validate → resolve (with provenance) → plan.

Public entry points:

* :func:`compile_orchestration` — a spec (YAML/JSON orchestration or ``.acx``) plus config
  layers and CLI overrides → :class:`Compiled` (the resolved :class:`acx.ir.Orchestration`, a
  provenance table, sources for code frames, base directories). Pure in its declared inputs:
  files, ``environ``, ``cwd`` and the arguments; no tasks are loaded (P8).
* :func:`dry_run_payload` — the stable, versioned, redacted JSON view printed by
  ``acx compile --dry-run``.
* :func:`redact` — a redacted plain-data view of any IR value.
* :func:`validate_document` — all diagnostics of one SourceDoc (``acx validate``/``acx check``).
* :func:`deep_merge` — R5.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from acx.compiler._merge import deep_merge
from acx.compiler._redact import redact
from acx.compiler._resolve import (
    Compiled,
    ConfigDoc,
    orchestration_id,
    output_namespace,
    resolve_orchestration,
)
from acx.compiler._source import SourceDoc
from acx.compiler._validate import validate_document

if TYPE_CHECKING:
    from acx.compiler._acx_lower import enum_values
    from acx.compiler._explain import explain_field
    from acx.compiler._planner import RequestPlan, plan_request
    from acx.compiler._recipes import BaseRecipe, RecipeRegistry

#: The planner and the recipe types, imported on first use (``acx compile --dry-run`` plans nothing).
_LAZY = {
    "BaseRecipe": "acx.compiler._recipes",
    "RecipeRegistry": "acx.compiler._recipes",
    "RequestPlan": "acx.compiler._planner",
    "enum_values": "acx.compiler._acx_lower",
    "explain_field": "acx.compiler._explain",
    "plan_request": "acx.compiler._planner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'acx.compiler' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "DRY_RUN_FORMAT_VERSION",
    "BaseRecipe",
    "Compiled",
    "RecipeRegistry",
    "RequestPlan",
    "SourceDoc",
    "compile_orchestration",
    "compile_run",
    "deep_merge",
    "dry_run_payload",
    "enum_values",
    "explain_field",
    "load_config_documents",
    "orchestration_id",
    "output_namespace",
    "plan_request",
    "redact",
    "validate_document",
]

#: Version of the ``acx compile --dry-run --format json`` shape; bumped on incompatible change.
DRY_RUN_FORMAT_VERSION = 1


def _display_path(path: str, cwd: str) -> str:
    """``path`` as the user wrote it when it resolves the same from here, else joined to ``cwd``;
    absolute paths under the working directory are shown relative to it."""
    here = os.path.abspath(cwd) == os.getcwd()
    if os.path.isabs(path):
        if here:
            rel = os.path.relpath(path, cwd)
            if not rel.startswith(".."):
                return rel
        return path
    return path if here else os.path.join(cwd, path)


def load_config_documents(
    configs: Sequence[str], *, cwd: str, environ: Mapping[str, str], exclude: Sequence[str] = ()
) -> list[ConfigDoc]:
    """Discover (R4) and load the run config layers, lowest precedence first."""
    from acx.compiler._frontends import load_document
    from acx.compiler._layers import discover_config_layers

    layers = discover_config_layers(configs, cwd=cwd, environ=environ, exclude=exclude)
    return [
        ConfigDoc(layer.layer, load_document(_display_path(layer.path, cwd), expected="run_config")) for layer in layers
    ]


def compile_orchestration(
    spec_path: str,
    *,
    configs: Sequence[str] = (),
    task_concurrency: int | None = None,
    execution_params: Mapping[str, Any] | None = None,
    runtime_params: Mapping[str, Any] | None = None,
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
    environment: str | None = None,
) -> Compiled:
    """Compile ``spec_path`` with its config layers and overrides into a :class:`Compiled`.

    ``environment`` (the ``--env`` flag) switches every request's environment provider.

    Raises :class:`acx.errors.AcxConfigError` (a document is malformed or breaks the schema) or
    :class:`acx.errors.AcxResolutionError` (layers do not resolve); both carry every
    diagnostic found, each with a span or field path and a fix.
    """
    from acx.compiler._frontends import load_document
    from acx.compiler._yaml import kind_mismatch_error

    cwd = cwd or os.getcwd()
    env: Mapping[str, str] = os.environ if environ is None else environ
    spec_display = _display_path(spec_path, cwd)
    spec = load_document(spec_display)
    if spec.kind != "orchestration":
        raise kind_mismatch_error(spec, "orchestration")
    config_docs = load_config_documents(configs, cwd=cwd, environ=env, exclude=[os.path.abspath(spec_display)])
    return _check_and_resolve(
        spec,
        list(validate_document(spec)),
        config_docs,
        task_concurrency,
        execution_params,
        runtime_params,
        env,
        environment=environment,
    )


#: single-run sections → the flag (or argument) a user sets them with, for provenance and errors.
_RUN_FLAGS = {
    "benchmark": "--benchmark-params",
    "harness": "--harness-params",
    "environment": "--env-params",
    "model": "--model-params",
    "runtime": "--reuse",
    "output": "--run-name/--run-id",
}


def compile_run(
    benchmark: str,
    harness: str,
    model: str | None = None,
    *,
    environment: str = "host_process",
    benchmark_params: Mapping[str, Any] | None = None,
    harness_params: Mapping[str, Any] | None = None,
    env_params: Mapping[str, Any] | None = None,
    model_params: Mapping[str, Any] | None = None,
    execution_params: Mapping[str, Any] | None = None,
    runtime_params: Mapping[str, Any] | None = None,
    output: Mapping[str, Any] | None = None,
    reuse: bool | None = None,
    reuse_run_id: str | None = None,
    configs: Sequence[str] = (),
    task_concurrency: int | None = None,
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Compiled:
    """A single run from explicit arguments (R8), compiled as a one-request orchestration ``run``.

    Precedence (low → high): component params: config ``<section>.<id>`` → ``*_params``;
    execution: defaults → config ``execution`` → ``execution_params``; process runtime: defaults
    → config ``runtime`` → ``runtime_params``; model: the explicit ``model``/``model_params``
    only (``base_url``, ``api_key`` as value or ``${VAR}``, ``api_protocol``, ``params``,
    ``wrap_api_key``); output and reuse: explicit, reuse unset → the config's ``runtime.reuse``.
    The request (and results namespace) is named ``<model>_<benchmark>_<harness>``.
    """
    cwd = cwd or os.getcwd()
    env: Mapping[str, str] = os.environ if environ is None else environ
    name = output_namespace(f"{model or 'model'}_{benchmark}_{harness or 'none'}")
    request: dict[str, Any] = {
        "name": name,
        "benchmark": {"id": benchmark, **(benchmark_params or {})},
        "harness": {"id": harness, **(harness_params or {})},
        "environment": {"id": environment, **(env_params or {})},
        "model": {**({"id": model} if model is not None else {}), **(model_params or {})},
    }
    runtime = {k: v for k, v in (("reuse", reuse), ("reuse_run_id", reuse_run_id)) if v is not None}
    if runtime:
        request["runtime"] = runtime
    if output:
        request["output"] = dict(output)
    spec = SourceDoc(
        path="<command line>",
        kind="orchestration",
        data={"version": 1, "name": "run", "requests": [request]},
    )
    config_docs = load_config_documents(configs, cwd=cwd, environ=env)
    spec_diags = [_as_flag(d, name) for d in validate_document(spec)]
    compiled = _check_and_resolve(
        spec, spec_diags, config_docs, task_concurrency, execution_params, runtime_params, env, _RUN_FLAGS
    )
    return dataclasses.replace(compiled, base_dirs={n: os.path.abspath(cwd) for n in compiled.base_dirs})


def _check_and_resolve(
    spec: SourceDoc,
    spec_diags: list[Any],
    config_docs: Sequence[ConfigDoc],
    task_concurrency: int | None,
    execution_params: Mapping[str, Any] | None,
    runtime_params: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    cli_sections: Mapping[str, str] | None = None,
    *,
    environment: str | None = None,
) -> Compiled:
    """Validate the config layers and CLI overrides (raise on any error), then resolve; the
    warnings of validation travel with the result."""
    from acx.compiler._validate import check_cli_params
    from acx.errors import AcxConfigError
    from acx.ir import ExecutionSpec, ResolvedRuntimeOptions

    diagnostics = list(spec_diags)
    for cfg in config_docs:
        diagnostics.extend(_implicit_layer_note(d, cfg.layer) for d in validate_document(cfg.doc))
    if execution_params is not None:
        diagnostics.extend(
            check_cli_params(
                execution_params,
                ExecutionSpec,
                "--execution-params",
                forbid={"task_concurrency": "use --task-concurrency (one global limit for the orchestration)"},
            )
        )
    if runtime_params is not None:
        diagnostics.extend(check_cli_params(runtime_params, ResolvedRuntimeOptions, "--runtime-params"))
    if environment is not None:
        diagnostics.extend(_check_environment_id(environment))
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        raise AcxConfigError(diagnostics=errors)
    compiled = resolve_orchestration(
        spec,
        config_docs,
        task_concurrency=task_concurrency,
        execution_params=execution_params,
        runtime_params=runtime_params,
        environ=environ,
        cli_sections=cli_sections,
        environment=environment,
    )
    warnings = [d for d in diagnostics if d.severity != "error"]
    return dataclasses.replace(compiled, warnings=(*warnings, *compiled.warnings))


_IMPLICIT_LAYERS = {
    "user config": "this file is read as the user config ($XDG_CONFIG_HOME/acx/config.yaml)",
    "project config": "this file is read as the project config: the nearest config.yaml above the "
    "working directory; fix it, or run acx from outside that project",
}


def _implicit_layer_note(diag: Any, layer: str) -> Any:
    """Say why a file nobody named on the command line was read (R4 discovery)."""
    note = _IMPLICIT_LAYERS.get(layer)
    if note is None or diag.severity != "error":
        return diag
    return dataclasses.replace(diag, help=f"{diag.help}; {note}" if diag.help else note)


def _as_flag(diag: Any, name: str) -> Any:
    """A diagnostic on the synthesised single-run spec, re-pointed at the flag that set the value."""
    path = diag.path or ""
    prefix = "requests[0]."
    if path.startswith(prefix):
        section, _, rest = path[len(prefix) :].partition(".")
        flag = _RUN_FLAGS.get(section, section)
        path = f"{flag} {rest}".strip() if rest not in ("", "id") else section
    return dataclasses.replace(diag, span=None, related=(), path=path)


def dry_run_payload(compiled: Compiled, *, provenance: bool = False) -> dict[str, Any]:
    """The redacted, versioned dry-run view (P8) of a compiled orchestration.

    ``{"format_version": 1, "orchestration_id", "name", "task_concurrency", "runtime",
    "requests": [{"key", "index", "name", "model", "benchmark": {"id", "params"}, "harness",
    "environment", "execution", "runtime", "output", "metadata"}]}``; with ``provenance=True``
    each request also carries ``provenance`` (field path → contributions, winner last) and the
    top level ``orchestration_provenance``.
    """
    import msgspec

    orch = compiled.orchestration
    requests = []
    for run in orch.requests:
        entry: dict[str, Any] = {"key": run.key, "index": run.index, "name": run.name}
        entry.update(redact(run.request))
        if provenance:
            entry["provenance"] = {
                path: msgspec.to_builtins(chain) for path, chain in compiled.provenance.get(run.name, {}).items()
            }
        requests.append(entry)
    payload: dict[str, Any] = {
        "format_version": DRY_RUN_FORMAT_VERSION,
        "orchestration_id": orch.id,
        "name": orch.name,
        "task_concurrency": orch.task_concurrency,
        "runtime": redact(orch.runtime),
        "requests": requests,
    }
    if provenance:
        payload["orchestration_provenance"] = {
            path: msgspec.to_builtins(chain) for path, chain in compiled.orchestration_provenance.items()
        }
    return payload


def _check_environment_id(env_id: str) -> list[Any]:
    """``--env ID`` must name a registered environment provider (R12)."""
    from acx.diagnostics import Diagnostic, did_you_mean
    from acx.drivers import DRIVERS

    if env_id in DRIVERS:
        return []
    if ":" in env_id:
        return [Diagnostic(code="E0301", message=DRIVERS.why_missing(env_id), path="--env")]
    guess = did_you_mean(env_id, list(DRIVERS))
    return [
        Diagnostic(
            code="E0301",
            message=f"unknown environment id `{env_id}` given to --env",
            path="--env",
            help=(f"did you mean `{guess}`? " if guess else "")
            + "known: "
            + ", ".join(sorted(DRIVERS))
            + " (acx list env)",
        )
    ]
