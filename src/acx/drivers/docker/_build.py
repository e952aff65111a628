"""Images for a session: a configured image (pulled only with ``pull: missing``) or a build.

A Harbor task's ``environment/Dockerfile`` is built once per content hash. With ``pull: never``
the images the Dockerfile names (``FROM``, ``COPY --from``) must be local first
(:mod:`acx.drivers.docker._dockerfile`): the engine would otherwise pull them during the build.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from acx.drivers._base import OpenRequest
from acx.drivers._specs import DockerConfig
from acx.drivers.docker._dockerfile import external_images
from acx.drivers.docker._engine import LABEL_MANAGED, EngineDriver
from acx.errors import EnvironmentSetupError


class ImageBuilder(EngineDriver):
    """The image half of :class:`DockerDriver` (one build per context digest at a time)."""

    def __init__(self, config: DockerConfig | None = None) -> None:
        super().__init__(config)
        self._build_locks: dict[str, trio.Lock] = {}

    async def missing_images(self, images: Sequence[str]) -> list[str]:
        """With ``pull: never``, the images this engine does not have (with ``pull: missing`` it
        fetches them: none is missing). For cluster placement (docs/cluster.md)."""
        if self.config.pull != "never" or not images:
            return []
        from docker.errors import ImageNotFound

        client = await self.client()
        missing = []
        for image in images:
            try:
                await self._call(client.images.get, image)
            except ImageNotFound:
                missing.append(image)
        return missing

    async def _resolve_image(self, client: Any, request: OpenRequest, labels: Mapping[str, str]) -> str:
        from docker.errors import ImageNotFound

        image = request.setup.image
        if image is None:
            if request.build_context is None:
                raise EnvironmentSetupError(
                    f"environment {request.session_id} has no image: set environment.setup.image "
                    "or give the task an environment/Dockerfile",
                    code="environment_no_image",
                )
            return await self._build(client, Path(request.build_context))
        if self.config.pull == "missing":
            try:
                await self._call(client.images.get, image)
            except ImageNotFound:
                await self._call(client.images.pull, image, platform=self.config.platform)
        # With pull=never a missing image surfaces from create_container (one API call saved).
        return image

    async def _build(self, client: Any, context: Path) -> str:
        dockerfile = context / "Dockerfile"
        if not dockerfile.is_file():
            raise EnvironmentSetupError(f"build context {context} has no Dockerfile", code="environment_no_image")
        tag = f"acx-build/{_context_digest(context)}:latest"
        lock = self._build_locks.setdefault(tag, trio.Lock())
        async with lock:
            from docker.errors import ImageNotFound

            try:
                await self._call(client.images.get, tag)
                return tag
            except ImageNotFound:
                pass
            if self.config.pull == "never":
                await self._check_build_images(client, dockerfile)

            def build() -> None:
                stream = client.api.build(
                    path=str(context),
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    pull=False,
                    decode=True,
                    labels={LABEL_MANAGED: "docker"},
                    platform=self.config.platform,
                )
                for chunk in stream:
                    if "error" in chunk:
                        raise EnvironmentSetupError(
                            f"building {context} failed: {str(chunk['error']).strip()[:500]}",
                            code="environment_build_failed",
                        )

            await self._stream(build)
        return tag

    async def _check_build_images(self, client: Any, dockerfile: Path) -> None:
        """``pull: never``: the images a build would fetch (``FROM``, ``COPY --from``) must be local.

        The engine pulls an absent base image even with ``pull=False``; refusing first keeps the
        promise that acx never contacts a registry unless ``pull: missing``.
        """
        from docker.errors import APIError, ImageNotFound

        text = await trio.to_thread.run_sync(functools.partial(dockerfile.read_text, "utf-8", "replace"))
        images, _unresolved = external_images(text)  # unresolved ones fail the build or are local
        missing: list[str] = []
        for image in images:
            try:
                await self._call(client.images.get, image)
            except ImageNotFound:
                missing.append(image)
            except APIError:
                pass  # e.g. an invalid reference: the build reports it precisely
        if missing:
            names = ", ".join(repr(m) for m in missing)
            raise EnvironmentSetupError(
                f"{dockerfile} needs image(s) {names}, not present on the Docker engine; "
                "acx does not pull (docker param `pull` is `never`)",
                code="image_not_found",
                help="build or load the image(s) first (e.g. `docker load`), or set environment params `pull: missing`",
            )


def _context_digest(context: Path) -> str:
    """Content hash of a build context (paths, modes, bytes) → a stable, cacheable image tag."""
    digest = hashlib.sha256()
    for path in sorted(context.rglob("*")):
        rel = path.relative_to(context).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(oct(path.stat().st_mode & 0o777).encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]
