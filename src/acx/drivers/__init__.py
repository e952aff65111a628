"""Environment drivers: the driver API, built-in drivers and their capabilities.

Driver classes are imported lazily (``acx.drivers.HostProcessDriver`` imports trio on first use),
so importing this package stays cheap for the compiler. The registry of driver ids is
:data:`DRIVERS` (see :mod:`acx.drivers._registry` for how a driver registers).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acx.drivers._registry import (
    DRIVERS,
    DriverInfo,
    default_env_open_qps,
    default_provider_limits,
    probe_capabilities,
)
from acx.drivers._specs import DriverCapabilities, EnvironmentConfig

__all__ = [
    "DRIVERS",
    "CachedInstall",
    "Driver",
    "DriverCapabilities",
    "DriverInfo",
    "EnvironmentConfig",
    "ExecResult",
    "FakeDriver",
    "HostProcessDriver",
    "OpenRequest",
    "Session",
    "SessionRecord",
    "create_driver",
    "default_env_open_qps",
    "default_provider_limits",
    "probe_capabilities",
]

if TYPE_CHECKING:
    from acx.drivers._base import CachedInstall, Driver, ExecResult, OpenRequest, Session, SessionRecord
    from acx.drivers.fake import FakeDriver
    from acx.drivers.host_process import HostProcessDriver

_LAZY = {
    "CachedInstall": "acx.drivers._base",
    "Driver": "acx.drivers._base",
    "ExecResult": "acx.drivers._base",
    "OpenRequest": "acx.drivers._base",
    "Session": "acx.drivers._base",
    "SessionRecord": "acx.drivers._base",
    "HostProcessDriver": "acx.drivers.host_process",
    "FakeDriver": "acx.drivers.fake",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'acx.drivers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def create_driver(env_id: str, params: dict[str, Any] | None = None) -> Driver:
    """Instantiate the registered driver ``env_id`` with its validated provider params."""
    import msgspec

    info = DRIVERS[env_id]
    cls = info.load()
    config = msgspec.convert(params or {}, type=info.config_class)
    return cls(config)  # type: ignore[no-any-return]
