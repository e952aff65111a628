"""Running a compiled plan on a Ray cluster (``acx run --cluster ray[://HOST:PORT]``).

The trio interpreter stays the one scheduler and the only writer of the journal and results
store. Sandboxes live on cluster nodes: one long-lived acx worker (a Ray actor) per node that
advertises ``acx_slots`` opens them with that node's own provider (its Docker engine, bwrap,
host processes). :func:`attach` swaps each program's driver for a :class:`RemoteDriver`, whose
sessions forward every Session operation as one message of a small versioned protocol
(:mod:`acx.cluster._protocol`: msgspec structs of IR and driver-API data; no interpreter objects).

``ray`` is an optional dependency (``pip install 'acx-eval[cluster]'``) imported only in this
package, and only when a cluster is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acx.cluster._protocol import PROTOCOL_VERSION
from acx.errors import AcxConfigError

if TYPE_CHECKING:
    from acx.cluster._driver import RemoteDriver
    from acx.cluster._ray import RayCluster
    from acx.drivers import Driver
    from acx.interpreter import RequestProgram
    from acx.ir import ResolvedRuntimeOptions

__all__ = ["PROTOCOL_VERSION", "attach", "parse_address", "remote_driver", "unlisted_nodes"]


def parse_address(text: str, *, field: str = "--cluster") -> str:
    """``ray`` → ``auto`` (``RAY_ADDRESS`` or the cluster started on this machine);
    ``ray://HOST:PORT`` → the head's GCS address ``HOST:PORT`` (not Ray Client)."""
    if text == "ray":
        return "auto"
    if text.startswith("ray://"):
        rest = text[len("ray://") :]
        host, sep, port = rest.rpartition(":")
        if sep and host and port.isdigit() and 0 < int(port) < 65536:
            return rest
    raise AcxConfigError(
        f"{field}: {text!r} is not a cluster address",
        code="E0704",
        path=field,
        help="use `ray` (the cluster started on this machine) or `ray://HEAD_HOST:GCS_PORT`",
    )


def _require_ray(field: str = "--cluster") -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        raise AcxConfigError(
            f"{field} needs the Ray package, which is not installed",
            code="E0705",
            path=field,
            help="pip install 'acx-eval[cluster]'",
        ) from None


def remote_driver(
    address: str,
    env_id: str,
    params: dict[str, object] | None = None,
    *,
    field: str = "--cluster",
    **options: Any,
) -> RemoteDriver:
    """A :class:`RemoteDriver` for provider ``env_id`` on the cluster at ``address`` (parsed);
    ``options``: ``max_node_losses``, ``node_provider_limits``, ``node_open_qps``, ``images``."""
    _require_ray(field)
    from acx.cluster._driver import RemoteDriver

    return RemoteDriver(_cluster(address), env_id, params, **options)


def unlisted_nodes(driver: Driver) -> dict[str, str]:
    """Nodes whose sandboxes ``driver``'s last ``list_sessions`` could not see (name → why): a
    cluster node that did not answer. Empty for a driver that is not a cluster's."""
    from acx.cluster._driver import RemoteDriver

    return dict(driver.unlisted) if isinstance(driver, RemoteDriver) else {}


_CLUSTERS: dict[str, RayCluster] = {}


def _cluster(address: str) -> RayCluster:
    # One connection (and one node table) per address per process, shared by every request.
    from acx.cluster._ray import RayCluster

    if address not in _CLUSTERS:
        _CLUSTERS[address] = RayCluster(address)
    return _CLUSTERS[address]


def attach(
    programs: Sequence[RequestProgram],
    cluster: str | None,
    runtime: ResolvedRuntimeOptions | None = None,
    *,
    field: str = "--cluster",
) -> bool:
    """Run ``programs`` on a cluster: ``cluster`` (``ray`` / ``ray://HOST:PORT``, the ``--cluster``
    flag or ``acx.run(cluster=)``) or else ``runtime.cluster.address``; each request's driver
    becomes a :class:`RemoteDriver` for the same provider and params, with the placement options of
    ``runtime.cluster`` (per-node limits default to the run's ``provider_limits``/``env_open_qps``).
    False (nothing changed) when neither names a cluster. ``runtime`` defaults to the defaults."""
    if runtime is None:
        from acx.ir import ResolvedRuntimeOptions

        runtime = ResolvedRuntimeOptions()
    opts = runtime.cluster
    if not cluster:
        cluster, field = opts.address, "runtime.cluster.address"
    if not cluster:
        return False
    address = parse_address(cluster, field=field)
    options: dict[str, Any] = {
        "max_node_losses": opts.max_node_losses,
        "node_provider_limits": {**runtime.provider_limits, **opts.provider_limits},
        "node_open_qps": {**runtime.env_open_qps, **opts.env_open_qps},
    }
    for p in programs:
        env = (p.live_request or p.request).environment  # secret references resolved, as locally
        images = [env.setup.image] if env.setup.image else []  # a need every sandbox has
        p.driver = remote_driver(address, env.id, dict(env.params or {}), field=field, images=images, **options)
    return True
