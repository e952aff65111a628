"""The install cache (``DriverCapabilities.install_cache``): an installed agent's layer as an image.

``cached_install`` resolves the image a session would start from (``setup.image`` or the task's
build), adds its digest to the harness's install key, and looks for ``acx-install/<key>``. When it
is missing, one throwaway container like the session's (same network policy, resources, user
variables given per command rather than baked into its config) runs the install; only a
successful one is committed — with the base image's own config (``Env``, ``Entrypoint``, ``Cmd``,
``WorkingDir``, ``User``), so neither the start-up variables nor acx's idle loop end up in the
image. One trio lock per key serializes the concurrent attempts of a run: the first installs, the
others find the image. Images outlive the run (their key is a content hash): a later run with the
same key starts from them too; ``docker image prune -a --filter label=acx.install_key`` removes them.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

import msgspec
import trio

from acx.drivers._base import CachedInstall, Installer, OpenRequest
from acx.drivers.docker._engine import LABEL_KEEP, LABEL_MANAGED

__all__ = ["LABEL_INSTALL_BASE", "LABEL_INSTALL_KEY", "LABEL_INSTALL_RUN", "cached_install", "full_key"]

#: The full cache key on an install image (and in its tag).
LABEL_INSTALL_KEY = "acx.install_key"
#: The digest of the image the install ran on.
LABEL_INSTALL_BASE = "acx.install_base"
#: The run whose attempt installed it (provenance; the image is shared by later runs).
LABEL_INSTALL_RUN = "acx.install_run"
_REPOSITORY = "acx-install"
#: Config fields a committed image takes from its base image, not from the builder container.
_KEPT_CONFIG = ("Env", "WorkingDir", "User", "ExposedPorts", "Volumes", "StopSignal", "Healthcheck", "Shell")


#: (trio run, engine, image tag) → the lock the one install of that key holds.
_LOCKS: dict[tuple[object, str | None, str], trio.Lock] = {}


def full_key(install_key: str, base_digest: str) -> str:
    """The cache key of one install on one base image (what the image tag carries)."""
    return hashlib.sha256(f"{install_key}\0{base_digest}".encode()).hexdigest()[:32]


async def cached_install(driver: Any, request: OpenRequest, key: str, install: Installer) -> CachedInstall | None:
    """``Driver.cached_install`` for docker (``driver`` is the :class:`DockerDriver`)."""
    client = await driver.client()
    budget = request.setup.build_timeout_seconds
    with trio.fail_after(budget) if budget else contextlib.nullcontext():
        base = await driver._resolve_image(client, request, driver._labels(request))
        digest = await driver._call(_image_id, client, base)
    full = full_key(key, digest)
    tag = f"{_REPOSITORY}/{full}:latest"
    # Process-wide (per trio run and engine), not per driver: every request of a run has its own
    # driver instance, and the requests of one run can share a key.
    lock = _LOCKS.setdefault((trio.lowlevel.current_trio_token(), driver.config.docker_host, tag), trio.Lock())
    async with lock:
        if await driver._call(_image_id, client, tag, missing_ok=True):
            return CachedInstall(image=tag, key=full, cached=True)
        builder = msgspec.structs.replace(
            request,
            session_id=f"{request.session_id}-install",
            labels={k: v for k, v in request.labels.items() if k != LABEL_KEEP},
            setup=msgspec.structs.replace(request.setup, image=base),
            build_context=None,
            # Given per command (the session's public variables), not in the container's config,
            # which the commit would copy into the image.
            startup_env={},
        )
        session = await driver.open(builder)
        try:
            session.public_env = dict(request.startup_env)
            if not await install(session):
                return None
            labels = {LABEL_INSTALL_KEY: full, LABEL_INSTALL_BASE: digest}
            labels[LABEL_INSTALL_RUN] = request.labels.get("acx.run_id", "")
            await driver._call(_commit, client, session.container_id, base, tag, labels)
        finally:
            with trio.CancelScope(shield=True):
                await session.close()
    return CachedInstall(image=tag, key=full, cached=False)


def _image_id(client: Any, image: str, missing_ok: bool = False) -> str:
    from docker.errors import ImageNotFound

    try:
        return str(client.api.inspect_image(image)["Id"])
    except ImageNotFound:
        if missing_ok:
            return ""
        raise


def _commit(client: Any, container: str, base: str, tag: str, install_labels: dict[str, str]) -> None:
    """Commit ``container`` as ``tag`` with the base image's config (see the module docstring)."""
    config = dict(client.api.inspect_image(base).get("Config") or {})
    conf: dict[str, Any] = {f: config[f] for f in _KEPT_CONFIG if config.get(f) is not None}
    # Empty lists, not null: the engine fills null fields from the builder container's config
    # (its idle loop as the entrypoint).
    conf["Entrypoint"] = list(config.get("Entrypoint") or [])
    conf["Cmd"] = list(config.get("Cmd") or [])
    # The builder's own labels (its session, pid, run) would be merged in: blank each one the
    # base image does not set, so an image never looks like a session.
    container_labels = dict(client.api.inspect_container(container).get("Config", {}).get("Labels") or {})
    labels = {k: "" for k in container_labels}
    labels.update(config.get("Labels") or {})
    labels.update({LABEL_MANAGED: "docker", **install_labels})
    conf["Labels"] = labels
    repository, _, version = tag.rpartition(":")
    client.api.commit(container, repository=repository, tag=version, conf=conf, pause=True)
