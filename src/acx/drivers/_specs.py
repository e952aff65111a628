"""Plan-time facts about environment drivers: their config classes and capabilities.

The compiler imports only this module (never the driver implementations, which pull in trio and
the docker SDK), so ``acx compile`` stays fast and side-effect free. A driver's capabilities are
what the planner checks every policy against (P7: refuse, never downgrade).
"""

from __future__ import annotations

import functools
from typing import Annotated, Literal

import msgspec

__all__ = [
    "DockerConfig",
    "DriverCapabilities",
    "EnvironmentConfig",
    "HostProcessConfig",
    "probe_docker",
    "probe_host_process",
]


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class DriverCapabilities(msgspec.Struct, frozen=True, kw_only=True):
    """What a driver can enforce. The planner refuses plans that need more (P7)."""

    #: Network modes the driver enforces, e.g. ("public", "no-network").
    network_modes: tuple[str, ...] = ("public",)
    #: Can switch the policy of a live session (reuse-mode evaluation, fresh-verifier baseline).
    dynamic_network_policy: bool = False
    #: Can scope env vars per command (run/evaluation scopes).
    task_env: bool = True
    #: Public vars can reach sandbox start-up.
    startup_env: bool = False
    #: Resource fields it enforces (subset of cpu, memory_mb, storage_mb, gpu).
    resources: tuple[str, ...] = ()
    #: Sandboxed filesystem (absolute paths are sandbox paths, not host paths).
    isolated_filesystem: bool = False
    #: Accepts `setup.image`.
    setup_image: bool = False
    #: Guest operating systems.
    os: tuple[str, ...] = ("linux",)
    #: Runs commands as a named user or uid of the sandbox (``Session.user_scope``; Harbor's
    #: ``[agent].user`` / ``[verifier].user``). A plan with a stage user needs it (P7).
    exec_user: bool = False
    #: Caches an installed agent's layer (``Driver.cached_install``): the install runs once per key
    #: (the base image's digest × the harness's install key) in a throwaway sandbox whose file
    #: system becomes an image every later sandbox with that key starts from; concurrent requests
    #: for one key wait for the one install; a failed install leaves nothing cached. Without it a
    #: plan that asks for the cache (``install_cache = true``) is refused (E0459, P7) and an
    #: installed agent installs in every attempt's own sandbox.
    install_cache: bool = False
    #: Why a mode is missing, shown in the refusal message (mode → reason).
    unsupported_reasons: dict[str, str] = {}


class EnvironmentConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of provider-native environment params."""

    def config_warnings(self) -> list[tuple[str, str]]:
        """``(field, message)`` for settings that are valid but risky; the compiler reports each
        as W0304 at the field. None by default."""
        return []


class HostProcessConfig(EnvironmentConfig, frozen=True):
    """Runs commands as host processes in a per-session work directory."""

    workdir_root: Annotated[str | None, _d("where per-session work directories are created; default a temp dir")] = None
    inherit_env: Annotated[
        bool,
        _d(
            "commands inherit acx's whole environment (every API key of the user) instead of PATH, HOME, "
            "LANG, TMPDIR and the plan's variables; warned at compile time (W0304)"
        ),
    ] = False
    keep_workdir: Annotated[bool, _d("keep the session directory after close")] = False
    containment: Annotated[
        Literal["auto", "cgroup", "process_group"],
        _d(
            "how a session's processes are found and killed at its end: a cgroup v2 per session (`cgroup`, "
            "an error where unavailable), process groups plus a sweep by marker and directory "
            "(`process_group`), or a cgroup where available (`auto`)"
        ),
    ] = "auto"

    def config_warnings(self) -> list[tuple[str, str]]:
        if not self.inherit_env:
            return []
        return [
            (
                "inherit_env",
                "host_process `inherit_env = true` passes acx's whole environment to every agent and "
                "verifier command: every API key and token of the user, evaluation-only ones included",
            )
        ]


class DockerConfig(EnvironmentConfig, frozen=True):
    """Runs each session in a container on a local Docker engine."""

    docker_host: Annotated[str | None, _d("engine URL; default from DOCKER_HOST or the local socket")] = None
    platform: Annotated[str | None, _d("image platform, e.g. linux/amd64")] = None
    command: Annotated[list[str] | None, _d("container main process; default keeps the container idle")] = None
    entrypoint: Annotated[
        Literal["image", "idle"],
        _d(
            "`image` keeps the image's ENTRYPOINT and hands it the idle loop as its command (as Harbor "
            "does: the entrypoint sees the public variables); `idle` replaces it with the idle loop"
        ),
    ] = "image"
    pull: Annotated[Literal["never", "missing"], _d("pull the image when it is missing locally")] = "never"
    cap_add: Annotated[list[str], _d("extra Linux capabilities")] = []
    labels: Annotated[dict[str, str], _d("extra labels on created objects")] = {}
    allowlist_proxy_image: Annotated[
        str | None, _d("image for the egress proxy enforcing `allowlist`; default the task image")
    ] = None


def _host_netns_available() -> bool:
    """True when an unprivileged (or root) network namespace can be created here."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        proc = subprocess.run(
            [unshare, "--net", "--map-root-user", "true"],
            capture_output=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


@functools.cache
def probe_host_process() -> DriverCapabilities:
    """What ``host_process`` enforces on this machine (its registry probe; probed once)."""
    netns = _host_netns_available()
    return DriverCapabilities(
        network_modes=("public", "no-network") if netns else ("public",),
        # Each command gets its namespace at exec time and no process outlives its exec()
        # (the process group is killed), so switching between phases is sound.
        dynamic_network_policy=True,
        task_env=True,
        startup_env=True,
        resources=(),
        isolated_filesystem=False,
        setup_image=False,
        unsupported_reasons={
            "allowlist": "host_process cannot filter egress by host; use --env docker",
            "denylist": "host_process cannot filter egress by host; use --env docker",
            **({} if netns else {"no-network": "this machine cannot create network namespaces (unshare --net failed)"}),
        },
    )


@functools.cache
def probe_docker() -> DriverCapabilities:
    """What ``docker`` enforces (its registry probe): exactly what acx.drivers.docker implements
    (allowlist/denylist: an internal network whose only way out is an enforcing egress proxy, see
    acx.drivers.docker._proxy)."""
    return DriverCapabilities(
        network_modes=("public", "no-network", "allowlist", "denylist"),
        dynamic_network_policy=True,
        task_env=True,
        startup_env=True,
        # storage_mb is passed to the engine (storage_opt size); an engine that cannot limit disk
        # size refuses, and the driver then drops it and says so when the session opens.
        resources=("cpu", "memory_mb", "storage_mb"),
        isolated_filesystem=True,
        setup_image=True,
        exec_user=True,
        # a derived image per install key (acx.drivers.docker._install), reused across runs
        install_cache=True,
        unsupported_reasons={},
    )
