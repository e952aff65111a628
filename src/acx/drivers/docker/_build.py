"""Images for a session: a configured image (pulled only with ``pull: missing``) or a build.

A Harbor task's ``environment/Dockerfile`` is built once per content hash. With ``pull: never``
the images the Dockerfile names (``FROM``, ``COPY --from``) must be local first
(:mod:`acx.drivers.docker._dockerfile`): the engine would otherwise pull them during the build.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from acx.diagnostics import Span
from acx.drivers._base import OpenRequest
from acx.drivers._specs import DockerConfig
from acx.drivers.docker._dockerfile import BuildFeature, BuildPlan, external_images, plan_build
from acx.drivers.docker._engine import LABEL_MANAGED, EngineDriver
from acx.errors import AcxPlanError, EnvironmentSetupError


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

    async def check_builds(self, contexts: Sequence[str]) -> None:
        """Before the run: every task Dockerfile is one this machine can build — its BuildKit-only
        syntax lowered (heredocs, a ``docker/dockerfile`` syntax directive) or built with BuildKit
        — else a located :class:`~acx.errors.AcxPlanError` (E0706: file, line, feature, remedy)."""
        client = None
        for context in dict.fromkeys(contexts):
            dockerfile = Path(context) / "Dockerfile"
            if not dockerfile.is_file():
                continue
            text = await trio.to_thread.run_sync(functools.partial(dockerfile.read_text, "utf-8", "replace"))
            try:
                plan = plan_build(text)
                if plan.needs_buildkit:
                    client = client or await self.client()
                    await self._buildkit_for(client, plan)
            except BuildFeature as feature:
                raise _located(dockerfile, feature) from None

    async def _buildkit_for(self, client: Any, plan: BuildPlan) -> tuple[list[str], dict[str, str]]:
        """The docker CLI that builds ``plan`` with BuildKit on this engine, else BuildFeature."""
        feature = plan.buildkit[0][0]
        cli = await trio.to_thread.run_sync(_buildkit_cli, self.config.docker_host)
        if cli is None:
            raise BuildFeature(
                feature.line,
                f"{feature.feature} needs BuildKit, and no docker CLI here can drive it (no `docker buildx` "
                "plugin, and the `docker` client is 23 or newer, which needs it)",
                "install the buildx plugin (Debian: `apt-get install docker-buildx`), or rewrite the line "
                "without the BuildKit-only flag",
            )
        engine = await self._engine_major(client)
        for feat, version in plan.buildkit:
            if engine < version:
                raise BuildFeature(
                    feat.line,
                    f"{feat.feature} needs a Docker engine {version} or newer (its built-in BuildKit "
                    f"frontend); this engine is {engine}",
                    "upgrade the Docker engine, or rewrite the line without the flag",
                )
        return cli

    async def _engine_major(self, client: Any) -> int:
        version = str((await self._call(client.version)).get("Version") or "0")
        m = re.match(r"(\d+)", version)
        return int(m.group(1)) if m else 0

    async def _build(self, client: Any, context: Path) -> str:
        dockerfile = context / "Dockerfile"
        if not dockerfile.is_file():
            raise EnvironmentSetupError(f"build context {context} has no Dockerfile", code="environment_no_image")
        text = await trio.to_thread.run_sync(functools.partial(dockerfile.read_text, "utf-8", "replace"))
        try:
            plan = plan_build(text)
            cli = await self._buildkit_for(client, plan) if plan.needs_buildkit else None
        except BuildFeature as feature:
            raise EnvironmentSetupError(
                f"{dockerfile}:{feature.line}: {feature.feature}",
                code="build_feature_unsupported",
                help=feature.remedy or None,
            ) from None
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
            with tempfile.TemporaryDirectory(prefix="acx-build-") as scratch:
                # The lowered Dockerfile lives outside the context: the SDK and the CLI send it
                # along without changing the context (or its digest).
                lowered = None
                if plan.text != text:
                    lowered = Path(scratch) / "Dockerfile"
                    lowered.write_text(plan.text, encoding="utf-8")
                if cli is not None:
                    await self._build_cli(cli, context, lowered or dockerfile, tag)
                else:
                    await self._build_api(client, context, lowered, tag)
        return tag

    async def _build_api(self, client: Any, context: Path, dockerfile: Path | None, tag: str) -> None:
        def build() -> None:
            stream = client.api.build(
                path=str(context),
                dockerfile=str(dockerfile) if dockerfile is not None else None,
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

    async def _build_cli(
        self, cli: tuple[list[str], dict[str, str]], context: Path, dockerfile: Path, tag: str
    ) -> None:
        """A BuildKit build through the docker CLI (the engine API needs a BuildKit session)."""
        argv, env = cli
        cmd = [*argv, "--progress=plain", "-t", tag, "--label", f"{LABEL_MANAGED}=docker", "-f", str(dockerfile)]
        if self.config.platform:
            cmd += ["--platform", self.config.platform]
        proc = await trio.run_process(
            [*cmd, str(context)], capture_stdout=True, capture_stderr=True, check=False, env=env
        )
        if proc.returncode != 0:
            output = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip()
            raise EnvironmentSetupError(
                f"building {context} with BuildKit failed: {output[-800:]}", code="environment_build_failed"
            )

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


def _located(dockerfile: Path, feature: BuildFeature) -> AcxPlanError:
    return AcxPlanError(
        f"{dockerfile}:{feature.line}: {feature.feature}",
        code="E0706",
        span=Span(str(dockerfile), feature.line, 1),
        help=feature.remedy or None,
    )


@functools.cache
def _buildkit_cli(docker_host: str | None) -> tuple[list[str], dict[str, str]] | None:
    """A docker CLI that builds with BuildKit: one with the buildx plugin (``buildx build
    --load``), else a client older than 23 (``DOCKER_BUILDKIT=1 docker build``: its BuildKit
    client is built in). Probed once per process; None when there is neither."""
    import shutil
    import subprocess

    env = dict(os.environ)
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    found: list[str] = []
    for directory in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        exe = shutil.which("docker", path=directory)
        if exe and os.path.realpath(exe) not in map(os.path.realpath, found):
            found.append(exe)

    def run(*argv: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, check=False)
        except (OSError, subprocess.SubprocessError):
            return None

    for exe in found:
        proc = run(exe, "buildx", "version")
        if proc is not None and proc.returncode == 0:
            return [exe, "buildx", "build", "--load"], env
    for exe in found:
        proc = run(exe, "--version")
        m = re.search(r"version (\d+)\.", proc.stdout) if proc is not None and proc.returncode == 0 else None
        if m and 18 <= int(m.group(1)) < 23:
            return [exe, "build"], {**env, "DOCKER_BUILDKIT": "1"}
    return None


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
