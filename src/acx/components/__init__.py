"""Benchmarks and harnesses: their registries (``BENCHMARKS``, ``HARNESSES``), base classes, configs.

``HARNESS_ALIASES`` is the table of AgentCompass 1.0.1 harness ids: each maps to an acx harness
(with its AgentCompass params translated; a :class:`MappedHarness`) or is refused with the nearest
acx harness named (a :class:`RefusedHarness`); :func:`harness_alias` / :func:`mapped_harness` look
an id up in it.

Third-party components subclass :class:`BaseBenchmark` / :class:`BaseHarness`; their plan-time
half is pure (no environment, model or secret), their run-time half gets an open session.
"""

from acx.components._base import DEFAULT_ARTIFACTS_DIR as DEFAULT_ARTIFACTS_DIR
from acx.components._base import BaseBenchmark as BaseBenchmark
from acx.components._base import BaseHarness as BaseHarness
from acx.components._configs import BenchmarkConfig as BenchmarkConfig
from acx.components._configs import HarnessConfig as HarnessConfig
from acx.components._context import HarnessContext as HarnessContext
from acx.components._harness_aliases import HARNESS_ALIASES as HARNESS_ALIASES
from acx.components._harness_aliases import MappedHarness as MappedHarness
from acx.components._harness_aliases import RefusedHarness as RefusedHarness
from acx.components._harness_aliases import harness_alias as harness_alias
from acx.components._harness_aliases import mapped_harness as mapped_harness
from acx.components._registry import BENCHMARKS as BENCHMARKS
from acx.components._registry import HARNESSES as HARNESSES
from acx.components._registry import registry as registry
from acx.components.scorers import SCORERS as SCORERS
from acx.registry import ComponentInfo as ComponentInfo

__all__ = [
    "BENCHMARKS",
    "DEFAULT_ARTIFACTS_DIR",
    "HARNESSES",
    "HARNESS_ALIASES",
    "SCORERS",
    "BaseBenchmark",
    "BaseHarness",
    "BenchmarkConfig",
    "ComponentInfo",
    "HarnessConfig",
    "HarnessContext",
    "MappedHarness",
    "RefusedHarness",
    "harness_alias",
    "mapped_harness",
    "registry",
]
