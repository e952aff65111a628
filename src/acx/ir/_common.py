"""Shared IR building blocks: network policies, resources, setup, artifacts."""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

import msgspec

__all__ = [
    "MODEL_GATEWAY_HOST",
    "ArtifactCollectCommand",
    "ArtifactLimits",
    "ArtifactSpec",
    "EnvironmentSetup",
    "IRStruct",
    "NetworkMode",
    "NetworkPolicy",
    "ResourceRequirements",
]


class IRStruct(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every IR struct: immutable, closed (unknown fields rejected), keyword-only."""


NetworkMode = Literal["public", "no-network", "allowlist", "denylist"]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0, description="seconds; finite and positive")]

_N = TypeVar("_N", int, float)
#: A count or amount that cannot be negative (0 keeps the field's documented meaning).
NonNegative = Annotated[_N, msgspec.Meta(ge=0)]


#: The allowlist entry a plan gives an in-sandbox agent that calls models: the run's model gateway.
#: The interpreter replaces it with the gateway's real ``address:port`` when the policy is applied
#: (the port is chosen when the run starts, after planning). Never the real model host.
MODEL_GATEWAY_HOST = "acx-model-gateway"


class NetworkPolicy(IRStruct, frozen=True):
    """Egress policy of one phase. Entries: hostname, ``*.wildcard``, IP, CIDR, optional ``:port``."""

    network_mode: Annotated[NetworkMode, msgspec.Meta(description="public | no-network | allowlist | denylist")] = (
        "public"
    )
    allowed_hosts: Annotated[list[str], msgspec.Meta(description="egress destinations allowed under `allowlist`")] = []
    denied_hosts: Annotated[list[str], msgspec.Meta(description="egress destinations denied under `denylist`")] = []


class ResourceRequirements(IRStruct, frozen=True):
    cpu: Annotated[NonNegative[float] | None, msgspec.Meta(description="CPU cores")] = None
    memory_mb: Annotated[NonNegative[int] | None, msgspec.Meta(description="memory limit in MiB")] = None
    storage_mb: Annotated[NonNegative[int] | None, msgspec.Meta(description="disk size in MiB")] = None
    gpu: Annotated[NonNegative[int] | None, msgspec.Meta(description="number of GPUs; 0 = no GPU")] = None
    gpu_type: Annotated[str | None, msgspec.Meta(description="GPU model; implies gpu=1")] = None
    ignore_gpu_type: Annotated[bool, msgspec.Meta(description="accept any GPU type")] = False


class EnvironmentSetup(IRStruct, frozen=True):
    """Generic sandbox set-up. The image lives only here (contract H3)."""

    image: Annotated[str | None, msgspec.Meta(description="container image (the only image field)")] = None
    build_timeout_seconds: Annotated[
        PositiveSeconds | None,
        msgspec.Meta(description="bound on building and starting the environment (not queueing)"),
    ] = None
    workdir: Annotated[
        str | None, msgspec.Meta(description="absolute POSIX path used when a command has no cwd (H5)")
    ] = None
    os: Annotated[Literal["linux", "windows"] | None, msgspec.Meta(description="linux | windows")] = None


class ArtifactSpec(IRStruct, frozen=True):
    """A path collected from the sandbox after the run phase (contract A4)."""

    source: Annotated[str, msgspec.Meta(description="absolute path in the sandbox")]
    destination: Annotated[
        str | None, msgspec.Meta(description="relative store path; default = source without leading /")
    ] = None
    exclude: Annotated[list[str], msgspec.Meta(description="GNU tar exclude patterns")] = []
    service: Annotated[str, msgspec.Meta(description="only `main` is supported")] = "main"


class ArtifactCollectCommand(IRStruct, frozen=True):
    """A command run with ``bash -c`` before artifacts are downloaded (contract A5)."""

    command: Annotated[str, msgspec.Meta(description="shell command run with bash -c")]
    timeout_seconds: Annotated[PositiveSeconds, msgspec.Meta(description="per-command deadline")] = 60.0
    service: Annotated[str, msgspec.Meta(description="only `main` is supported")] = "main"


class ArtifactLimits(IRStruct, frozen=True):
    max_mb: Annotated[int, msgspec.Meta(gt=0, description="total downloaded size in MiB")] = 16384
    max_files: Annotated[int, msgspec.Meta(gt=0, description="total downloaded entries")] = 100000
    timeout_seconds: Annotated[PositiveSeconds, msgspec.Meta(description="bound on artifact download/restore (T4)")] = (
        600.0
    )
