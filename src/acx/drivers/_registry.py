"""The environment-driver registry: one :class:`DriverInfo` per driver id.

Adding a driver is one module plus one ``DRIVERS.register(DriverInfo(...))`` entry below (or,
outside acx, one entry point in the ``acx.drivers`` group). The entry names, lazily as
``"module:attr"`` strings, everything the rest of acx needs:

* ``config``: the driver's params class (an :class:`acx.drivers.EnvironmentConfig` subclass),
  validated, documented (``acx config docs``), schema-generated and explained like any other;
* ``impl``: the :class:`acx.drivers.Driver` subclass, imported only to run;
* ``probe``: a zero-argument function returning the :class:`DriverCapabilities` on this machine,
  called at planning time (keep it in a module without trio/SDK imports so ``acx compile``
  stays light); ``None`` asks the driver class (:meth:`Driver.probe`);
* ``default_concurrency`` / ``default_open_qps``: the defaults of ``runtime.provider_limits`` and
  ``runtime.env_open_qps`` for this provider (0 disables the limit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from acx.drivers._specs import DriverCapabilities
from acx.registry import ComponentInfo, Registry, import_ref

__all__ = ["DRIVERS", "DriverInfo", "default_env_open_qps", "default_provider_limits", "probe_capabilities"]


@dataclass(frozen=True)
class DriverInfo(ComponentInfo):
    """A driver's registry entry (see the module docstring for the fields)."""

    probe: Callable[[], DriverCapabilities] | str | None = None
    default_concurrency: int = 128
    default_open_qps: float = 0.0

    def capabilities(self) -> DriverCapabilities:
        """What the driver enforces on this machine (probed once per process)."""
        if "caps" not in self._cache:
            probe: Any = self.probe
            if probe is None:
                probe = self.load().probe
            elif isinstance(probe, str):
                probe = import_ref(probe)
            caps = probe()
            if not isinstance(caps, DriverCapabilities):
                raise TypeError(f"capability probe of driver {self.id!r} returned {type(caps).__name__}")
            self._cache["caps"] = caps
        return self._cache["caps"]  # type: ignore[no-any-return]


def _from_driver_class(cls: type[Any]) -> Mapping[str, Any]:
    """A plugin Driver class's ``default_concurrency`` / ``default_open_qps`` (declared on
    :class:`acx.drivers.Driver`; the registry has checked ``cls`` subclasses it)."""
    return {
        "probe": None,
        "default_concurrency": int(cls.default_concurrency),
        "default_open_qps": float(cls.default_open_qps),
    }


DRIVERS = Registry(
    "environment",
    group="acx.drivers",
    base="acx.drivers._base:Driver",
    info_class=DriverInfo,
    from_class=_from_driver_class,
)

DRIVERS.register(
    DriverInfo(
        kind="environment",
        id="host_process",
        description="Host processes in a per-session work directory (absolute paths are host paths).",
        config="acx.drivers._specs:HostProcessConfig",
        impl="acx.drivers.host_process:HostProcessDriver",
        probe="acx.drivers._specs:probe_host_process",
        default_concurrency=128,
    )
)
DRIVERS.register(
    DriverInfo(
        kind="environment",
        id="docker",
        description="Containers on a local Docker engine, with network policies and resource limits.",
        config="acx.drivers._specs:DockerConfig",
        impl="acx.drivers.docker:DockerDriver",
        probe="acx.drivers._specs:probe_docker",
        default_concurrency=128,
    )
)
DRIVERS.register(
    DriverInfo(
        kind="environment",
        id="bwrap",
        description="Bubblewrap sandboxes from a root filesystem or a cached image export; no daemon at run time.",
        config="acx.drivers.bwrap:BwrapConfig",
        impl="acx.drivers.bwrap:BwrapDriver",
        probe="acx.drivers.bwrap:probe_bwrap",
        default_concurrency=128,
    )
)


def probe_capabilities(env_id: str) -> DriverCapabilities:
    """Capabilities of the registered driver ``env_id`` on this machine (probed once per process).

    This is the edge where the compiler learns machine facts; the planner receives the result as
    an explicit input so it stays a pure function. Raises ``ComponentLookupError`` (a KeyError)
    for an unknown id.
    """
    info = DRIVERS[env_id]
    assert isinstance(info, DriverInfo)
    return info.capabilities()


def _driver_infos() -> list[DriverInfo]:
    return [info for info in (DRIVERS[cid] for cid in DRIVERS) if isinstance(info, DriverInfo)]


def default_provider_limits() -> dict[str, int]:
    """``runtime.provider_limits`` defaults: every registered driver's ``default_concurrency``."""
    return {info.id: info.default_concurrency for info in _driver_infos()}


def default_env_open_qps() -> dict[str, float]:
    """``runtime.env_open_qps`` defaults: every registered driver's ``default_open_qps``."""
    return {info.id: info.default_open_qps for info in _driver_infos()}
