"""The benchmark and harness registries, with the ids acx ships (see :mod:`acx.registry`).

Adding a built-in benchmark or harness is its module plus one ``register`` entry here; a
third-party one is an entry point in the ``acx.benchmarks`` / ``acx.harnesses`` group or a
``module:Class`` id in a spec. Implementations are imported lazily (``ComponentInfo.load``) so
listing, validating and compiling never import trio, the docker SDK or an HTTP client.
"""

from __future__ import annotations

from acx.registry import ComponentInfo, Registry

__all__ = ["BENCHMARKS", "HARNESSES", "registry"]

BENCHMARKS = Registry("benchmark", group="acx.benchmarks", base="acx.components._base:BaseBenchmark")
HARNESSES = Registry("harness", group="acx.harnesses", base="acx.components._base:BaseHarness")

_CONFIGS = "acx.components._configs"

BENCHMARKS.register(
    ComponentInfo(
        "benchmark",
        "exact_match",
        "Question answering over a JSONL dataset, scored by normalised exact match.",
        f"{_CONFIGS}:ExactMatchConfig",
        "acx.components.benchmarks.exact_match:ExactMatchBenchmark",
    )
)
BENCHMARKS.register(
    ComponentInfo(
        "benchmark",
        "harbor",
        "Harbor task directories (task.toml, instruction.md, tests/), scored by the verifier's reward.",
        f"{_CONFIGS}:HarborConfig",
        "acx.components.benchmarks.harbor:HarborBenchmark",
    )
)

BENCHMARKS.register(
    ComponentInfo(
        "benchmark",
        "dataset",
        "Question answering over a local JSONL/JSON/CSV/TSV/Parquet file with a field mapping and scorers.",
        f"{_CONFIGS}:DatasetConfig",
        "acx.components.benchmarks.dataset:DatasetBenchmark",
    )
)


def _register_presets() -> None:
    """AgentCompass ids as presets over `dataset` / `harbor` (acx.components.benchmarks.presets)."""
    from acx.components.benchmarks._preset_table import HARBOR_PRESETS, QA_PRESETS

    module = "acx.components.benchmarks.presets"
    camel = {pid: "".join(p.capitalize() for p in pid.split("_")) for pid in (*QA_PRESETS, *HARBOR_PRESETS)}
    entries = [(pid, d) for pid, (d, _) in QA_PRESETS.items()] + [(pid, d) for pid, (d, _, _) in HARBOR_PRESETS.items()]
    for pid, description in entries:
        BENCHMARKS.register(
            ComponentInfo(
                "benchmark",
                pid,
                description,
                f"{module}:{camel[pid]}PresetConfig",
                f"{module}:{camel[pid]}PresetBenchmark",
            )
        )


_register_presets()

HARNESSES.register(
    ComponentInfo(
        "harness",
        "none",
        "No harness: selects a harness-free benchmark.",
        "acx.components.harnesses.none:NoneHarnessConfig",
        "acx.components.harnesses.none:NoneHarness",
    )
)
HARNESSES.register(
    ComponentInfo(
        "harness",
        "oracle",
        "Runs a Harbor task's solution/solve.sh (reference solution).",
        "acx.components.harnesses.oracle:OracleHarnessConfig",
        "acx.components.harnesses.oracle:OracleHarness",
    )
)
HARNESSES.register(
    ComponentInfo(
        "harness",
        "command",
        "Runs a configured command as the agent: prompt on stdin and in a file, answer from stdout or a file.",
        f"{_CONFIGS}:CommandHarnessConfig",
        "acx.components.harnesses.command:CommandHarness",
    )
)
HARNESSES.register(
    ComponentInfo(
        "harness",
        "openai_chat",
        "One OpenAI-compatible chat completion per task.",
        "acx.components.harnesses.openai_chat:OpenAIChatConfig",
        "acx.components.harnesses.openai_chat:OpenAIChatHarness",
    )
)
HARNESSES.register(
    ComponentInfo(
        "harness",
        "react",
        "The built-in tool-calling agent: bash, python, a file editor and submit, through the run's model gateway.",
        f"{_CONFIGS}:ReactConfig",
        "acx.components.harnesses.react:ReactHarness",
    )
)
HARNESSES.register(
    ComponentInfo(
        "harness",
        "installed_agent",
        "Uploads, installs (phase install_agent, own budget) and runs an agent inside the sandbox.",
        f"{_CONFIGS}:InstalledAgentConfig",
        "acx.components.harnesses.installed_agent:InstalledAgentHarness",
    )
)
HARNESSES.register(
    ComponentInfo(
        "harness",
        "terminus",
        "Terminus 2 (Harbor's reference agent): keystroke batches typed into a tmux terminal in the sandbox.",
        f"{_CONFIGS}:TerminusConfig",
        "acx.components.harnesses.terminus:TerminusHarness",
    )
)


def registry(kind: str) -> Registry:
    """The registry of an extension point: benchmark, harness, scorer, env/environment."""
    if kind == "benchmark":
        return BENCHMARKS
    if kind == "harness":
        return HARNESSES
    if kind == "scorer":
        from acx.components.scorers import SCORERS

        return SCORERS
    if kind in ("env", "environment"):
        from acx.drivers import DRIVERS

        return DRIVERS
    raise KeyError(kind)
