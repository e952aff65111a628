"""The ``docker`` environment driver: one container per session on a local Docker engine.

The docker SDK lives only here (and is imported lazily). Every blocking SDK call runs through
``trio.to_thread.run_sync`` under a :class:`trio.CapacityLimiter`; long-running command streams have
their own, larger limiter so many concurrent agents never starve short control calls.

What the driver guarantees (contracts E1, E2, H5, V2, P6, P7, T3):

* **Commands** run through a tiny POSIX ``sh`` wrapper that sets the cwd, feeds stdin from a file
  and tags the process environment with ``ACX_EXEC_ID``. A deadline (or cancellation of the caller)
  kills, from a second exec, every process carrying the tag *and their process groups* — so a
  command that ignores SIGTERM, forks children or calls ``setsid`` is gone, not just its client.
  A command that exits normally may leave background processes (harness daemons);
* **Builds** with ``pull: never`` first check that the Dockerfile's external images (``FROM``,
  ``COPY --from``) are local (:mod:`acx.drivers.docker._dockerfile`): the engine would pull them.
* **Files** move as tar archives (``put_archive`` / ``get_archive``); archives coming out of the
  container are extracted by :mod:`acx.drivers.docker._archive`, which refuses absolute, ``..``,
  escaping-link and device members.
* **Network policies**: ``public`` = a per-session bridge network; ``no-network`` = no interface but
  loopback; ``allowlist`` / ``denylist`` = the container alone on an internal network whose only
  peer is an enforcing egress proxy (:mod:`acx.drivers.docker._proxy`). All switch on the live
  container (connect / disconnect, policy file rewritten). Whatever cannot be enforced (GPUs,
  Windows) is refused — never a silent downgrade.
* **No debris**: everything created is labelled (``acx.session``, ``acx.pid``, ``acx.host``, the
  interpreter's run/task/attempt labels). :func:`sweep_orphans` removes objects whose creating
  process is gone (run automatically before a process opens its first sandbox); ``acx gc`` and
  ``acx env close`` build on the same helpers.

The modules, one concern each: ``_engine`` (SDK client, thread plumbing, labels, removals),
``_create`` (open: the container, its network, clean-up of half-made sessions), ``_build`` and
``_dockerfile`` (images), ``_session`` with ``_exec`` (commands), ``_files`` and ``_archive``
(transfers), ``_network``, ``_proxy`` and ``_firewall`` (policies, the egress proxy, the host
rules that make it the only way out), ``_gc`` (inventory and sweeps), ``_install`` (the install
cache: an installed agent's layer committed as an image once per key, ``Driver.cached_install``).
Transfer error types live in the neutral :mod:`acx.drivers.transfer`.
"""

from __future__ import annotations

from acx.drivers.docker._create import DockerDriver
from acx.drivers.docker._engine import (
    LABEL_HOST,
    LABEL_KEEP,
    LABEL_MANAGED,
    LABEL_PID,
    LABEL_SESSION,
    docker_client,
    engine_available,
)
from acx.drivers.docker._gc import close_objects, is_orphan, list_objects, sweep_orphans
from acx.drivers.docker._session import DockerSession

__all__ = [
    "LABEL_HOST",
    "LABEL_KEEP",
    "LABEL_MANAGED",
    "LABEL_PID",
    "LABEL_SESSION",
    "DockerDriver",
    "DockerSession",
    "close_objects",
    "docker_client",
    "engine_available",
    "is_orphan",
    "list_objects",
    "sweep_orphans",
]
