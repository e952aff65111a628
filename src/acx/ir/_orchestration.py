"""Orchestration (R10–R13) and the per-process runtime options (R3)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from acx.ir._common import IRStruct, NonNegative
from acx.ir._request import RunRequest

__all__ = [
    "ClusterOptions",
    "OrchestratedRun",
    "Orchestration",
    "ResolvedRuntimeOptions",
]


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
#: ``ray`` or ``ray://HOST:PORT`` (the head's GCS address, port 1-65535), as acx.cluster.parse_address.
CLUSTER_ADDRESS = rf"^ray(://[^\s/:]+:{_PORT})?$"


class ClusterOptions(IRStruct, frozen=True):
    """Where sandboxes open: this machine, or the nodes of a Ray cluster (docs/cluster.md). A
    process option like the rest of ``runtime``: in no request's hash (``--cluster`` overrides it)."""

    address: Annotated[
        Annotated[str, msgspec.Meta(pattern=CLUSTER_ADDRESS)] | None,
        _d("`ray` (the cluster Ray finds) or `ray://HEAD_HOST:GCS_PORT`; null: no cluster"),
    ] = None
    max_node_losses: Annotated[
        NonNegative[int],
        _d(
            "per attempt: how often a sandbox lost with its node runs again on another node, without "
            "consuming execution.max_retries; one more loss fails it (infrastructure_losses_exhausted)"
        ),
    ] = 2
    provider_limits: Annotated[
        dict[str, NonNegative[int]],
        _d(
            "max concurrent sessions per provider on EACH node; absent: runtime.provider_limits' value "
            "(which still bounds the whole run); 0 disables"
        ),
    ] = {}
    env_open_qps: Annotated[
        dict[str, NonNegative[float]],
        _d(
            "max environment opens per second per provider on EACH node; absent: runtime.env_open_qps' "
            "value (which still bounds the whole run); 0 disables"
        ),
    ] = {}


class ResolvedRuntimeOptions(IRStruct, frozen=True):
    """Process-wide options shared by every request of a run (R3)."""

    results_dir: Annotated[str, _d("results root")] = "results"
    data_dir: Annotated[str, _d("AgentCompass dataset cache root; not supported by acx (E0311)")] = "data"
    timeout_seconds: Annotated[
        float, msgspec.Meta(ge=0, description="overall deadline after preflight; 0 disables")
    ] = 360000.0
    cleanup_grace_seconds: Annotated[
        float, msgspec.Meta(ge=0, description="time to release sandboxes after cancel")
    ] = 30.0
    progress: Annotated[Literal["auto", "plain", "none"], _d("auto: live view on a TTY")] = "auto"
    log_level: Annotated[str, _d("console log level")] = "INFO"
    file_log_level: Annotated[str, _d("run.log level")] = "DEBUG"
    log_file: Annotated[str | None, _d("extra log file; not supported by acx, see run.log (E0311)")] = None
    auto_install_dependencies: Annotated[
        bool, _d("install missing benchmark extras; not supported by acx (only false, E0311)")
    ] = False
    provider_limits: Annotated[
        dict[str, NonNegative[int]],
        _d(
            "max concurrent sessions per provider; 0 or absent disables the limit "
            "(the resolver fills the default of each provider the requests use, 128 for the built-ins)"
        ),
    ] = {}
    env_open_qps: Annotated[
        dict[str, NonNegative[float]],
        _d(
            "max environment opens per second per provider; 0 or absent disables "
            "(the resolver fills the default of each provider the requests use)"
        ),
    ] = {}
    recipe_dirs: Annotated[list[str], _d("trusted external recipe directories")] = []
    cluster: Annotated[ClusterOptions, _d("open sandboxes on a Ray cluster's nodes (docs/cluster.md)")] = msgspec.field(
        default_factory=ClusterOptions
    )


class OrchestratedRun(IRStruct, frozen=True):
    key: Annotated[str, _d("stable key `<orchestration id>/<index>`")]
    index: int
    name: str
    request: RunRequest


class Orchestration(IRStruct, frozen=True):
    id: Annotated[str, _d("content-derived id (stable for equal inputs)")]
    name: str
    task_concurrency: Annotated[int, msgspec.Meta(ge=1)]
    runtime: ResolvedRuntimeOptions
    requests: list[OrchestratedRun]
