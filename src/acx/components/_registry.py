"""The component registry: the ids acx ships, their descriptions and typed config classes.

Implementations are imported lazily (``ComponentInfo.load``) so listing, validating and
compiling never import trio, the docker SDK or an HTTP client.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal

from acx.components._configs import (
    CommandHarnessConfig,
    ExactMatchConfig,
    HarborConfig,
    NoneHarnessConfig,
    OpenAIChatConfig,
    OracleHarnessConfig,
)
from acx.drivers._specs import DockerConfig, HostProcessConfig

__all__ = ["BENCHMARKS", "ENVIRONMENTS", "HARNESSES", "ComponentInfo", "registry"]

Kind = Literal["benchmark", "harness", "environment"]


@dataclass(frozen=True)
class ComponentInfo:
    kind: Kind
    id: str
    description: str
    config_class: type[Any]
    impl: str  # "module:attr", imported on demand

    def load(self) -> Any:
        module, _, attr = self.impl.partition(":")
        return getattr(importlib.import_module(module), attr)


BENCHMARKS: dict[str, ComponentInfo] = {
    info.id: info
    for info in (
        ComponentInfo(
            "benchmark",
            "exact_match",
            "Question answering over a JSONL dataset, scored by normalised exact match.",
            ExactMatchConfig,
            "acx.components.benchmarks.exact_match:ExactMatchBenchmark",
        ),
        ComponentInfo(
            "benchmark",
            "harbor",
            "Harbor task directories (task.toml, instruction.md, tests/), scored by the verifier's reward.",
            HarborConfig,
            "acx.components.benchmarks.harbor:HarborBenchmark",
        ),
    )
}

HARNESSES: dict[str, ComponentInfo] = {
    info.id: info
    for info in (
        ComponentInfo(
            "harness",
            "none",
            "No harness: selects a harness-free benchmark.",
            NoneHarnessConfig,
            "acx.components.harnesses.none:NoneHarness",
        ),
        ComponentInfo(
            "harness",
            "oracle",
            "Runs a Harbor task's solution/solve.sh (reference solution).",
            OracleHarnessConfig,
            "acx.components.harnesses.oracle:OracleHarness",
        ),
        ComponentInfo(
            "harness",
            "command",
            "Runs a configured command as the agent: prompt on stdin and in a file, answer from stdout or a file.",
            CommandHarnessConfig,
            "acx.components.harnesses.command:CommandHarness",
        ),
        ComponentInfo(
            "harness",
            "openai_chat",
            "One OpenAI-compatible chat completion per task.",
            OpenAIChatConfig,
            "acx.components.harnesses.openai_chat:OpenAIChatHarness",
        ),
    )
}

ENVIRONMENTS: dict[str, ComponentInfo] = {
    info.id: info
    for info in (
        ComponentInfo(
            "environment",
            "host_process",
            "Host processes in a per-session work directory (absolute paths are host paths).",
            HostProcessConfig,
            "acx.drivers.host_process:HostProcessDriver",
        ),
        ComponentInfo(
            "environment",
            "docker",
            "Containers on a local Docker engine, with network policies and resource limits.",
            DockerConfig,
            "acx.drivers.docker:DockerDriver",
        ),
    )
}


def registry(kind: str) -> dict[str, ComponentInfo]:
    """The registry of ``kind``: benchmark, harness, env/environment."""
    if kind == "benchmark":
        return BENCHMARKS
    if kind == "harness":
        return HARNESSES
    if kind in ("env", "environment"):
        return ENVIRONMENTS
    raise KeyError(kind)
