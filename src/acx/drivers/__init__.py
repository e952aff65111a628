"""Environment drivers: the driver API, built-in drivers and their capabilities.

Driver classes are imported lazily (``acx.drivers.HostProcessDriver`` imports trio on first use),
so importing this package stays cheap for the compiler.
"""

from __future__ import annotations

import importlib
from typing import Any

from acx.drivers._specs import DriverCapabilities, EnvironmentConfig, probe_capabilities

__all__ = [
    "Driver",
    "DriverCapabilities",
    "EnvironmentConfig",
    "ExecResult",
    "FakeDriver",
    "HostProcessDriver",
    "OpenRequest",
    "Session",
    "create_driver",
    "probe_capabilities",
]

_LAZY = {
    "Driver": "acx.drivers._base",
    "ExecResult": "acx.drivers._base",
    "OpenRequest": "acx.drivers._base",
    "Session": "acx.drivers._base",
    "HostProcessDriver": "acx.drivers.host_process",
    "FakeDriver": "acx.drivers.fake",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'acx.drivers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def create_driver(env_id: str, params: dict[str, Any] | None = None) -> Any:
    """Instantiate the registered driver ``env_id`` with its validated provider params."""
    import msgspec

    from acx.components._registry import ENVIRONMENTS

    info = ENVIRONMENTS[env_id]
    cls = info.load()
    config = msgspec.convert(params or {}, type=info.config_class)
    return cls(config)
