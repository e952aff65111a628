"""The shapes of the two YAML document kinds, built from the IR and component config types.

One source of truth for validation (:mod:`._validate`), resolution (:mod:`._resolve`) and the
JSON Schemas (:mod:`acx.schemas`): a run config (reference §3.1) and an orchestration file
(reference §3.2). Component sections are flat: ``{id: ..., <params beside id>}``.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Literal

import msgspec

from acx.compiler._merge import deep_copy
from acx.ir import (
    ENVIRONMENT_SPEC_FIELDS,
    EnvironmentSpec,
    ExecutionSpec,
    ModelSpec,
    OutputSpec,
    ResolvedRuntimeOptions,
    RunRuntimeSpec,
)

__all__ = [
    "API_PROTOCOLS",
    "COMPONENT_SECTIONS",
    "NETWORK_MODES",
    "NETWORK_POLICY_FIELDS",
    "ORCHESTRATION_KEYS",
    "REQUEST_KEYS",
    "REQUEST_STRUCT_SECTIONS",
    "RUNTIME_REUSE_KEYS",
    "RUN_CONFIG_KEYS",
    "RUN_CONFIG_STRUCT_SECTIONS",
    "ConfigRuntimeOptions",
    "dict_value_type",
    "environment_field_types",
    "field_defaults",
    "field_descriptions",
    "field_types",
    "literal_values",
    "output_namespace",
    "required_fields",
    "struct_of",
]


class ConfigRuntimeOptions(ResolvedRuntimeOptions, frozen=True, kw_only=True):
    """A run config's ``runtime:`` section: process options plus the per-request reuse defaults."""

    reuse: Annotated[bool | None, msgspec.Meta(description="default for every request's runtime.reuse")] = None
    checkpoint_resume: Annotated[
        bool | None, msgspec.Meta(description="default for every request's runtime.checkpoint_resume")
    ] = None


#: Keys of a run config's ``runtime`` that feed the per-request RunRuntimeSpec, not the process.
RUNTIME_REUSE_KEYS = ("reuse", "checkpoint_resume")

RUN_CONFIG_KEYS = ("runtime", "execution", "benchmarks", "harnesses", "environments")
RUN_CONFIG_STRUCT_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "runtime": ConfigRuntimeOptions,
    "execution": ExecutionSpec,
}
ORCHESTRATION_KEYS = ("version", "name", "task_concurrency", "runtime", "defaults", "requests")
REQUEST_KEYS = ("name", "benchmark", "harness", "environment", "model", "execution", "runtime", "output")
REQUEST_STRUCT_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "model": ModelSpec,
    "execution": ExecutionSpec,
    "runtime": RunRuntimeSpec,
    "output": OutputSpec,
}
#: request section → (registry kind, run-config section holding per-id entries)
COMPONENT_SECTIONS = {
    "benchmark": ("benchmark", "benchmarks"),
    "harness": ("harness", "harnesses"),
    "environment": ("environment", "environments"),
}
NETWORK_POLICY_FIELDS = frozenset(
    {
        "baseline_network_policy",
        "evaluation_baseline_network_policy",
        "run_network_policy",
        "evaluation_network_policy",
    }
)
NETWORK_MODES = ("public", "no-network", "allowlist", "denylist")
API_PROTOCOLS = ("openai-chat", "openai-responses", "anthropic", "auto")

assert NETWORK_POLICY_FIELDS <= ENVIRONMENT_SPEC_FIELDS

_NAMESPACE_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]")


def output_namespace(name: str) -> str:
    """The results directory of a request: its name with characters outside ``[A-Za-z0-9._=-]`` → ``_``."""
    return _NAMESPACE_UNSAFE.sub("_", name)


_TYPES: dict[type[Any], dict[str, Any]] = {}
_DESCRIPTIONS: dict[type[Any], dict[str, str]] = {}
_DEFAULTS: dict[type[Any], dict[str, Any]] = {}
_REQUIRED: dict[type[Any], tuple[str, ...]] = {}


def field_types(cls: type[Any]) -> dict[str, Any]:
    """Field name → annotation (``Annotated`` kept, so constraints apply when converting)."""
    if cls not in _TYPES:
        hints = typing.get_type_hints(cls, include_extras=True)
        _TYPES[cls] = {f.name: hints[f.name] for f in msgspec.structs.fields(cls)}
    return _TYPES[cls]


def field_descriptions(cls: type[Any]) -> dict[str, str]:
    if cls not in _DESCRIPTIONS:
        _DESCRIPTIONS[cls] = {name: _description(tp) or "" for name, tp in field_types(cls).items()}
    return _DESCRIPTIONS[cls]


def _provider_defaults() -> dict[str, Any]:
    """Per-provider runtime defaults come from the driver registry (each driver's entry)."""
    from acx.drivers import default_env_open_qps, default_provider_limits

    return {"provider_limits": default_provider_limits(), "env_open_qps": default_env_open_qps()}


def field_defaults(cls: type[Any]) -> dict[str, Any]:
    """Field name → default as plain data (a fresh copy per call); required fields are absent."""
    if cls not in _DEFAULTS:
        out: dict[str, Any] = {}
        for f in msgspec.structs.fields(cls):
            if f.default is not msgspec.NODEFAULT:
                out[f.name] = msgspec.to_builtins(f.default, order="deterministic")
            elif f.default_factory is not msgspec.NODEFAULT:
                out[f.name] = msgspec.to_builtins(f.default_factory(), order="deterministic")
        _DEFAULTS[cls] = out
    fresh: dict[str, Any] = deep_copy(_DEFAULTS[cls])
    if issubclass(cls, ResolvedRuntimeOptions):
        # Not cached: the drivers registered now (a plugin loaded after the first call counts).
        fresh.update(_provider_defaults())
    return fresh


def required_fields(cls: type[Any]) -> tuple[str, ...]:
    if cls not in _REQUIRED:
        _REQUIRED[cls] = tuple(f.name for f in msgspec.structs.fields(cls) if f.required)
    return _REQUIRED[cls]


def _description(tp: Any) -> str | None:
    if typing.get_origin(tp) is Annotated:
        for meta in reversed(typing.get_args(tp)[1:]):
            if isinstance(meta, msgspec.Meta) and meta.description:
                return meta.description
    return None


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _union_members(tp: Any) -> list[Any]:
    tp = _strip(tp)
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return [_strip(a) for a in typing.get_args(tp)]
    return [tp]


def struct_of(tp: Any) -> type[msgspec.Struct] | None:
    """The Struct class of ``tp`` when it is ``S``, ``S | None`` (Annotated or not)."""
    members = [m for m in _union_members(tp) if m is not type(None)]
    if len(members) == 1 and isinstance(members[0], type) and issubclass(members[0], msgspec.Struct):
        return members[0]
    return None


def dict_value_type(tp: Any) -> Any | None:
    """``V`` when ``tp`` is ``dict[str, V]`` (optionally ``| None``) with a constrained or typed ``V``."""
    members = [m for m in _union_members(tp) if m is not type(None)]
    if len(members) != 1 or typing.get_origin(members[0]) is not dict:
        return None
    args = typing.get_args(members[0])
    if len(args) != 2 or args[1] is Any:
        return None
    return args[1]


def literal_values(tp: Any) -> tuple[Any, ...] | None:
    """The allowed values when ``tp`` is a ``Literal[...]`` (optionally ``| None``)."""
    members = [m for m in _union_members(tp) if m is not type(None)]
    if len(members) == 1 and typing.get_origin(members[0]) is Literal:
        return typing.get_args(members[0])
    return None


def environment_field_types() -> dict[str, Any]:
    return {k: v for k, v in field_types(EnvironmentSpec).items() if k in ENVIRONMENT_SPEC_FIELDS}
