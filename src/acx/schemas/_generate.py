"""Generate the run config and orchestration JSON Schemas from the same types the validator uses.

msgspec produces the component schemas (``$defs``); this module composes the document shapes
around them: flat component sections (``{id, <params beside id>}``), network-policy and artifact
string shorthands, ``task_concurrency`` excluded from request ``execution``.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from acx.compiler._shapes import (
    NETWORK_MODES,
    NETWORK_POLICY_FIELDS,
    ConfigRuntimeOptions,
)
from acx.ir import (
    ENVIRONMENT_SPEC_FIELDS,
    EnvironmentSpec,
    ExecutionSpec,
    ModelSpec,
    OutputSpec,
    ResolvedRuntimeOptions,
    RunRuntimeSpec,
)

__all__ = ["generate"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_BASE_ID = "https://acx.invalid/schemas/"
_NULL = {"type": "null"}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, _NULL]}


def _components() -> tuple[dict[str, Any], dict[str, Any]]:
    from acx.components import BENCHMARKS, HARNESSES
    from acx.drivers import DRIVERS

    types: list[Any] = [
        ConfigRuntimeOptions,
        ResolvedRuntimeOptions,
        ExecutionSpec,
        ModelSpec,
        RunRuntimeSpec,
        OutputSpec,
        EnvironmentSpec,
    ]
    from acx.components import HARNESS_ALIASES, MappedHarness
    from acx.registry import import_ref

    infos = [*BENCHMARKS.values(), *HARNESSES.values(), *DRIVERS.values()]
    types += [import_ref(ref) for ref in _BASE_CONFIGS.values()]
    types += [i.config_class for i in infos]
    types += [a.config for a in HARNESS_ALIASES.values() if isinstance(a, MappedHarness)]
    _, defs = msgspec.json.schema_components(types, ref_template="#/$defs/{name}")
    defs = copy.deepcopy(defs)
    _shorthands(defs)
    _provider_defaults(defs)
    _allow_env_refs(defs)
    return defs, {"benchmark": BENCHMARKS, "harness": HARNESSES, "environment": DRIVERS}


def _provider_defaults(defs: dict[str, Any]) -> None:
    """Per-provider runtime defaults are each registered driver's (not the IR's empty map)."""
    from acx.compiler._shapes import field_defaults

    defaults = field_defaults(ResolvedRuntimeOptions)
    for name in ("ResolvedRuntimeOptions", "ConfigRuntimeOptions"):
        for key in ("provider_limits", "env_open_qps"):
            defs[name]["properties"][key]["default"] = defaults[key]


def _shorthands(defs: dict[str, Any]) -> None:
    """String shorthands the loader accepts: network modes and artifact source paths."""
    env_props = defs["EnvironmentSpec"]["properties"]
    for name in NETWORK_POLICY_FIELDS:
        desc = env_props[name].get("description")
        env_props[name] = {
            "anyOf": [_ref("NetworkPolicy"), {"enum": list(NETWORK_MODES)}, _NULL],
            **({"description": desc} if desc else {}),
        }
    artifacts = defs["ExecutionSpec"]["properties"]["artifacts"]
    for option in artifacts["anyOf"]:
        if option.get("type") == "array":
            option["items"] = {"anyOf": [{"type": "string"}, _ref("ArtifactSpec")]}
    defs["RequestExecution"] = copy.deepcopy(defs["ExecutionSpec"])
    defs["RequestExecution"]["title"] = "RequestExecution"
    defs["RequestExecution"]["properties"].pop("task_concurrency")


#: A whole-field ``${VAR}`` reference (R6): valid wherever a value goes, typed after substitution.
ENV_REF = {
    "type": "string",
    "pattern": r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$",
    "description": "whole-field ${VAR} reference, substituted from the environment before typing",
}


def _with_env_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` that also accepts ``${VAR}`` (unchanged when it already takes any string)."""
    options = schema.get("anyOf", [schema])
    if any(o.get("type") == "string" and not ({"enum", "pattern", "const"} & o.keys()) for o in options):
        return schema
    out: dict[str, Any] = (
        {"anyOf": [*options, _ref("EnvRef")]}
        if "anyOf" in schema
        else {
            "anyOf": [{k: v for k, v in schema.items() if k not in ("description", "title", "default")}, _ref("EnvRef")]
        }
    )
    for key in ("description", "title", "default"):
        if key in schema:
            out[key] = schema[key]
    return out


def _map_values_take_env_refs(schema: dict[str, Any]) -> None:
    """``{provider: ${VAR}}``: the values of open maps (``provider_limits``) too."""
    for option in schema.get("anyOf", [schema]):
        extra = option.get("additionalProperties")
        if isinstance(extra, dict):
            option["additionalProperties"] = _with_env_ref(extra)


def _allow_env_refs(defs: dict[str, Any]) -> None:
    """Raw files may hold ``${VAR}`` in any field, so editors validating them must accept it."""
    for schema in list(defs.values()):
        for name, prop in schema.get("properties", {}).items():
            _map_values_take_env_refs(prop)
            schema["properties"][name] = _with_env_ref(prop)
    defs["EnvRef"] = dict(ENV_REF)


#: The config class every component of a kind subclasses: its fields are one shared definition
#: (``<kind>.common``) each component's params reference, so a component adds only its own fields.
_BASE_CONFIGS = {
    "benchmark": "acx.components:BenchmarkConfig",
    "harness": "acx.components:HarnessConfig",
    "environment": "acx.drivers:EnvironmentConfig",
}


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with no properties beyond those it (or what it references) declares."""
    return {"allOf": [schema], "unevaluatedProperties": False}


def _common_defs(defs: dict[str, Any]) -> None:
    """``<kind>.common``: the fields every component of the kind takes (for environments also the
    environment fields written beside the driver's params: setup, network policies, variables…)."""
    from acx.registry import import_ref

    for kind, ref in _BASE_CONFIGS.items():
        props = copy.deepcopy(defs[import_ref(ref).__name__].get("properties", {}))
        if kind == "environment":
            env_props = defs["EnvironmentSpec"]["properties"]
            props.update({k: copy.deepcopy(v) for k, v in env_props.items() if k in ENVIRONMENT_SPEC_FIELDS})
        defs[f"{kind}.common"] = {
            "type": "object",
            "description": f"fields every {kind} takes beside its own params",
            "properties": props,
        }


def _params_schema(defs: dict[str, Any], config_name: str, kind: str) -> dict[str, Any]:
    """The params object: the kind's common fields by reference, the config's own fields here; all
    optional (required params may come from another layer). Open: each use closes it."""
    common = defs[f"{kind}.common"]["properties"]
    own = defs[config_name]["properties"]
    if any(k in common and own[k] != common[k] for k in own):  # a field the config narrows: no sharing
        props = {**copy.deepcopy(common), **copy.deepcopy(own)}
        schema: dict[str, Any] = {"type": "object", "properties": props}
    else:
        props = {k: copy.deepcopy(v) for k, v in own.items() if k not in common}
        schema = {"type": "object", "allOf": [_ref(f"{kind}.common")], "properties": props}
    desc = defs[config_name].get("description")
    if desc:
        schema["description"] = desc
    return schema


def _component_defs(defs: dict[str, Any], registries: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Adds ``<kind>.<id>`` params defs; returns kind → id → def name."""
    _common_defs(defs)
    names: dict[str, dict[str, str]] = {}
    for kind, table in registries.items():
        names[kind] = {}
        for cid, info in table.items():
            name = f"{kind}.{cid}"
            defs[name] = _params_schema(defs, info.config_class.__name__, kind)
            defs[name]["title"] = f"{kind} {cid}: {info.description}"
            names[kind][cid] = name
    # AgentCompass harness ids acx maps (issue 23 item 5) take their AgentCompass params.
    from acx.components import HARNESS_ALIASES, MappedHarness

    for cid, alias in HARNESS_ALIASES.items():
        if isinstance(alias, MappedHarness) and "harness" in names:
            name = f"harness.{cid}"
            defs[name] = _params_schema(defs, alias.config.__name__, "harness")
            defs[name]["title"] = f"harness {cid} (AgentCompass id) → {alias.summary}"
            names["harness"][cid] = name
    return names


def _section(defs: dict[str, Any], kind: str, ids: dict[str, str]) -> dict[str, Any]:
    """A request section ``{id: ..., <params beside id>}``: one alternative per component id, each
    referencing the component's params."""
    options = [
        {"allOf": [_ref(name)], "properties": {"id": {"const": cid}}, "unevaluatedProperties": False}
        for cid, name in ids.items()
    ]
    return {
        "description": f"{kind} id plus its parameters, flat (no `params:` layer)",
        "anyOf": options,
    }


def _run_config(defs: dict[str, Any], names: dict[str, dict[str, str]]) -> dict[str, Any]:
    def table(kind: str) -> dict[str, Any]:
        return _nullable(
            {
                "type": "object",
                "properties": {cid: _nullable(_closed(_ref(name))) for cid, name in names[kind].items()},
                "additionalProperties": False,
            }
        )

    return {
        "$schema": DIALECT,
        "$id": _BASE_ID + "run_config.schema.json",
        "title": "acx run config",
        "description": "User, project and --config files (AgentCompass run config format). "
        "A whole-field ${VAR} reference is accepted in place of any value (typed after substitution).",
        "type": "object",
        "properties": {
            "runtime": _nullable(_ref("ConfigRuntimeOptions")),
            "execution": _nullable(_ref("ExecutionSpec")),
            "benchmarks": table("benchmark"),
            "harnesses": table("harness"),
            "environments": table("environment"),
        },
        "additionalProperties": False,
    }


def _orchestration(defs: dict[str, Any], names: dict[str, dict[str, str]]) -> dict[str, Any]:
    sections = {
        "benchmark": _ref("BenchmarkSection"),
        "harness": _ref("HarnessSection"),
        "environment": _ref("EnvironmentSection"),
        "model": _ref("ModelSpec"),
        "execution": _ref("RequestExecution"),
        "runtime": _ref("RunRuntimeSpec"),
        "output": _ref("OutputSpec"),
    }
    defs["BenchmarkSection"] = _section(defs, "benchmark", names["benchmark"])
    defs["HarnessSection"] = _section(defs, "harness", names["harness"])
    defs["EnvironmentSection"] = _section(defs, "environment", names["environment"])
    defs["RequestDefaults"] = {"type": "object", "properties": sections, "additionalProperties": False}
    defs["Request"] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "unique request name"},
            **sections,
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    return {
        "$schema": DIALECT,
        "$id": _BASE_ID + "orchestration.schema.json",
        "title": "acx orchestration (version 1)",
        "description": "An ordered list of named runs with shared defaults (AgentCompass orchestration v1). "
        "A whole-field ${VAR} reference is accepted in place of any value (typed after substitution).",
        "type": "object",
        "properties": {
            "version": {"const": 1},
            "name": {"type": "string", "minLength": 1},
            "task_concurrency": _with_env_ref(
                {"type": "integer", "minimum": 1, "description": "global limit of concurrent attempts"}
            ),
            "runtime": _nullable(_ref("ResolvedRuntimeOptions")),
            "defaults": _ref("RequestDefaults"),
            "requests": {"type": "array", "items": _ref("Request"), "minItems": 1},
        },
        "required": ["version", "requests"],
        "additionalProperties": False,
    }


def _prune(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Attach only the ``$defs`` the schema reaches (sorted, for stable files)."""
    used: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/") :]
                if name not in used:
                    used.add(name)
                    walk(defs[name])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    out = dict(schema)
    out["$defs"] = {k: defs[k] for k in sorted(used)}
    return out


def generate() -> dict[str, dict[str, Any]]:
    defs, registries = _components()
    names = _component_defs(defs, registries)
    run_config = _run_config(defs, names)
    orchestration = _orchestration(defs, names)
    return {"run_config": _prune(run_config, defs), "orchestration": _prune(orchestration, defs)}
