"""The ``bwrap`` driver: each session is a bubblewrap sandbox built from a root filesystem directory.

What it enforces and what it does not (docs/bwrap.md has the long form):

* **Filesystem.** The sandbox's ``/`` is the root filesystem of ``setup.image`` (exported from the
  local Docker engine once and cached under ``image_cache``; later runs need no daemon), of the
  session's Dockerfile build context (built by the engine once, cached by content hash), of
  ``rootfs`` when set, else the host's system directories (``/usr``, ``/bin``, ``/lib*``, ``/sbin``)
  with a synthetic ``/etc`` (generated accounts and hosts, the host's linker cache, alternatives, CA
  certificates and resolver; never its shadow, keys or tool credentials). The root is **read-only**;
  the ``writable`` directories (default ``/app``, ``/logs``, ``/tests``, ``/tmp``, ``/root``,
  ``/home``, ``/run``, ``/var/tmp``) and the workdir's top directory are per-session host
  directories seeded from the root filesystem, so ``/app``, ``/logs`` and ``/tests`` are isolated
  per session. File transfers resolve paths the way the sandbox sees them (symlinks included) and
  never leave the session's directories or the root.
* **Processes.** A session is one long-lived ``bwrap --unshare-all`` (user, pid, net, ipc, uts and
  cgroup namespaces); ``exec`` enters its namespaces with ``nsenter`` in a new process group.
  A timeout or a cancellation sends SIGTERM to that group, then SIGKILL after
  ``kill_grace_seconds``. What escaped the group (``setsid``, daemons) is still in the session's
  pid namespace: :meth:`BwrapSession.kill_stray_processes` kills it between phases, and closing
  the session kills the namespace's init, so the kernel kills everything in it.
* **Network.** ``no-network`` runs commands in the session's own network namespace (only
  loopback); ``public`` runs them in the host's. The policy may change between phases; commands
  started under the old policy that are still running are killed on the switch (they would keep
  their namespace). ``allowlist``/``denylist`` are refused at planning (no egress filter here).
* **Resources.** ``cpu`` and ``memory_mb`` are enforced with a per-session cgroup (v1 ``cpu`` and
  ``memory`` hierarchies, or v2 with those controllers) when this process may create cgroups;
  otherwise they are refused at planning. Swap is limited with memory where the kernel offers it.
  ``storage_mb`` and ``gpu`` are refused. ``pids_limit`` (config) uses the ``pids`` controller.
* **Identity.** Commands run as root *of the sandbox's user namespace* (the invoking user outside).
  An image whose ``USER`` is not root is refused at open (no second uid can be mapped).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import posixpath
import shutil
import signal
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import msgspec

from acx.drivers._base import Driver, ExecResult, OpenRequest, Session, SessionRecord
from acx.drivers._specs import DriverCapabilities, EnvironmentConfig
from acx.errors import CapabilityError, DriverError, EnvironmentSetupError
from acx.ir import NetworkPolicy, ResourceRequirements

if TYPE_CHECKING:
    import trio

__all__ = ["BwrapConfig", "BwrapDriver", "BwrapSession", "probe_bwrap"]

_DEFAULT_WRITABLE = ["/app", "/logs", "/tests", "/tmp", "/root", "/home", "/run", "/var/tmp"]
#: Host directories that make up the sandbox's root when neither an image nor ``rootfs`` is given.
_HOST_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
#: What of the host's /etc a sandbox on the host's system directories sees (copied into its own
#: synthetic /etc): what programs need to start, resolve names and verify TLS — never the host's
#: accounts (shadow, passwd), keys (ssl/private, docker/, ssh/), or tool configs that may hold
#: credentials (pip.conf, npmrc, gitconfig).
_ETC_FROM_HOST = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "os-release",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "shells",
    "ssl/certs",
    "ssl/openssl.cnf",
    "timezone",
)
#: The synthetic /etc's own files: one root account (the sandbox's uid 0), nobody, localhost.
_ETC_GENERATED = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1\tlocalhost acx\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "hostname": "acx\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
    "protocols: files\nservices: files\n",
}
#: Top-level names never taken from a root filesystem (the sandbox mounts its own).
_SPECIAL = frozenset({"proc", "dev", "sys"})
#: Directories too large (or too shared) to copy per session for a workdir outside ``writable``.
_SYSTEM_DIRS = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "var", "boot", "opt"})
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SESSION_PREFIX = "acx-bwrap-"
#: A file in a session directory kept on purpose (``keep_workdir``): acx gc spares it.
_KEPT = "kept"
_MAX_LINKS = 40


def _d(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


class BwrapConfig(EnvironmentConfig, frozen=True):
    """Runs each session in a bubblewrap sandbox (no daemon at run time)."""

    rootfs: Annotated[
        str | None,
        _d(
            "root filesystem directory for sessions without an image; default the host's /usr, /bin, /lib*, /sbin "
            "(read-only) and a synthetic /etc"
        ),
    ] = None
    image_cache: Annotated[
        str | None,
        _d("where images and Dockerfile builds are exported to root filesystems; default /var/cache/acx/bwrap"),
    ] = None
    docker_host: Annotated[
        str | None, _d("Docker engine used once to export an image or build a Dockerfile; default DOCKER_HOST")
    ] = None
    writable: Annotated[
        list[str], _d("absolute sandbox directories that are writable (seeded from the root filesystem)")
    ] = msgspec.field(default_factory=lambda: list(_DEFAULT_WRITABLE))
    workdir_root: Annotated[str | None, _d("where per-session directories are created; default a temp dir")] = None
    keep_workdir: Annotated[bool, _d("keep the session directory after close")] = False
    pids_limit: Annotated[
        Annotated[int, msgspec.Meta(ge=1)] | None, _d("most processes per session (pids cgroup); default no limit")
    ] = None
    allow_root: Annotated[
        bool,
        _d(
            "run sandboxes although acx runs as root: the sandbox's uid 0 is then the host's root (every "
            "capability dropped, the host's system directories read-only); without it, root is refused"
        ),
    ] = False


# ---- capabilities (planning time: no trio, no sandbox) ------------------------------------------


@dataclass(frozen=True)
class _Cgroups:
    """Where per-session cgroups go: one directory per hierarchy (v1) or one (v2)."""

    version: int
    #: controller → parent directory (``acx-bwrap`` under the hierarchy's root).
    parents: dict[str, str]

    def supports(self, controller: str) -> bool:
        return controller in self.parents


@functools.cache
def _cgroups() -> _Cgroups | None:
    """The cgroup layout this process may use, or None (probed once)."""
    root = "/sys/fs/cgroup"
    controllers_file = os.path.join(root, "cgroup.controllers")
    if os.path.isfile(controllers_file):  # pure cgroup v2
        return _cgroups_v2(root, controllers_file)
    parents: dict[str, str] = {}
    for controller in ("memory", "cpu", "pids"):
        base = os.path.join(root, controller)
        parent = os.path.join(base, "acx-bwrap")
        if os.path.isdir(base) and _can_mkdir(parent):
            parents[controller] = parent
    return _Cgroups(1, parents) if parents else None


def _cgroups_v2(root: str, controllers_file: str) -> _Cgroups | None:
    # Needs the root of the hierarchy to be ours to write (root user, not a delegated subtree):
    # a parent of our own with the controllers enabled for its children.
    try:
        available = set(Path(controllers_file).read_text().split())
        parent = os.path.join(root, "acx-bwrap")
        if not _can_mkdir(parent):
            return None
        wanted = [c for c in ("memory", "cpu", "pids") if c in available]
        for where in (root, parent):
            with open(os.path.join(where, "cgroup.subtree_control"), "w") as fh:
                fh.write(" ".join(f"+{c}" for c in wanted))
    except OSError:
        return None
    return _Cgroups(2, {c: parent for c in wanted}) if wanted else None


def _can_mkdir(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)


@functools.cache
def _tools() -> tuple[str | None, str | None, str]:
    """(bwrap, nsenter, why not) — the executables, and a reason when the sandbox cannot start."""
    bwrap = shutil.which("bwrap")
    nsenter = shutil.which("nsenter")
    if bwrap is None:
        return None, nsenter, "bubblewrap is not installed (apt-get install bubblewrap)"
    if nsenter is None:
        return bwrap, None, "nsenter (util-linux) is not installed"
    try:
        proc = subprocess.run(
            [bwrap, "--unshare-all", "--uid", "0", "--gid", "0", "--ro-bind", "/", "/", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return bwrap, nsenter, f"bwrap cannot run here: {exc}"
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip()[:300]
        return bwrap, nsenter, f"bwrap cannot create namespaces here: {why}"
    return bwrap, nsenter, ""


@functools.cache
def probe_bwrap() -> DriverCapabilities:
    """What ``bwrap`` enforces on this machine (its registry probe; probed once per process)."""
    _bwrap, _nsenter, why = _tools()
    groups = _cgroups()
    resources = ("cpu", "memory_mb") if groups and groups.supports("cpu") and groups.supports("memory") else ()
    filter_reason = "bwrap has no egress filter; use --env docker"
    reasons = {"allowlist": filter_reason, "denylist": filter_reason}
    if why:  # nothing can run: every mode is refused at planning with the reason
        reasons.update({"public": why, "no-network": why})
    return DriverCapabilities(
        network_modes=() if why else ("public", "no-network"),
        # Commands enter the network namespace per exec; a switch kills what the old policy started.
        dynamic_network_policy=True,
        task_env=True,
        startup_env=True,
        resources=resources,
        isolated_filesystem=True,
        setup_image=True,
        unsupported_reasons=reasons,
    )


# ---- root filesystems: images and builds exported once, cached ----------------------------------


class _RootFs(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    env: dict[str, str] = {}
    workdir: str = ""
    user: str = ""


def _cache_dir(config: BwrapConfig) -> Path:
    if config.image_cache:
        return Path(config.image_cache)
    if os.getuid() == 0:
        return Path("/var/cache/acx/bwrap")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base, "acx", "bwrap")


def _docker_env(config: BwrapConfig) -> dict[str, str]:
    env = dict(os.environ)
    if config.docker_host:
        env["DOCKER_HOST"] = config.docker_host
    env["DOCKER_BUILDKIT"] = "0"  # the legacy builder needs no buildx plugin
    return env


def _docker(config: BwrapConfig, args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    docker = shutil.which("docker")
    if docker is None:
        raise _NoEngine("the docker command is not installed")
    try:
        return subprocess.run(
            [docker, *args], capture_output=True, timeout=timeout, check=False, env=_docker_env(config)
        )
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentSetupError(f"bwrap: `docker {args[0]}` did not finish within {timeout:.0f} s") from exc


class _NoEngine(Exception):
    """No Docker engine answers (the cache must do)."""


def _engine_down(stderr: str) -> bool:
    return any(s in stderr for s in ("Cannot connect", "Is the docker daemon running", "error during connect"))


def _load_rootfs(entry: Path) -> _RootFs:
    meta = json.loads((entry / "meta.json").read_text())
    return _RootFs(path=str(entry / "rootfs"), env=meta["env"], workdir=meta["workdir"], user=meta["user"])


def _image_config(info: dict[str, object]) -> dict[str, object]:
    config = info.get("Config") or {}
    assert isinstance(config, dict)
    env = dict(e.split("=", 1) for e in (config.get("Env") or []) if "=" in e)
    return {"env": env, "workdir": config.get("WorkingDir") or "", "user": config.get("User") or ""}


def _export(config: BwrapConfig, image: str, dest: Path, meta: dict[str, object], timeout: float) -> None:
    """Export ``image``'s filesystem into ``dest/rootfs`` (atomically: a temp dir renamed)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=dest.parent))
    try:
        created = _docker(config, ["create", "--label", "acx.bwrap.export=1", image, "acx-export"], timeout)
        if created.returncode != 0:
            raise EnvironmentSetupError(f"bwrap: cannot export image {image!r}: {_tail(created.stderr)}")
        cid = created.stdout.decode().strip()
        try:
            (tmp / "rootfs").mkdir()
            docker = shutil.which("docker") or "docker"
            tar = ["tar", "-x", "-C", str(tmp / "rootfs"), "-f", "-"]
            if os.getuid() == 0:
                tar.insert(1, "--numeric-owner")
            with subprocess.Popen(
                [docker, "export", cid], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_docker_env(config)
            ) as exporter:
                untar = subprocess.run(tar, stdin=exporter.stdout, capture_output=True, timeout=timeout, check=False)
                assert exporter.stderr is not None
                export_err = exporter.stderr.read()
            if exporter.returncode != 0 or untar.returncode != 0:
                raise EnvironmentSetupError(
                    f"bwrap: exporting image {image!r} failed: {_tail(export_err or untar.stderr)}"
                )
        finally:
            _docker(config, ["rm", "-f", cid], 60)
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(tmp, dest)
        except OSError:  # another process exported it meanwhile: theirs is as good
            if not (dest / "meta.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _tail(data: bytes) -> str:
    return data.decode("utf-8", "replace").strip()[-500:] or "(no output)"


def _image_rootfs(config: BwrapConfig, image: str, timeout: float) -> _RootFs:
    """The cached root filesystem of ``image``: by image id when an engine answers (exported on a
    miss), else by name from the last export (no daemon needed at run time)."""
    cache = _cache_dir(config)
    index = cache / "names" / (hashlib.sha256(image.encode()).hexdigest()[:32] + ".json")
    try:
        res = _docker(config, ["image", "inspect", image], 60)
        err = res.stderr.decode("utf-8", "replace")
        if res.returncode != 0 and _engine_down(err):
            raise _NoEngine(err.strip()[:300])
    except _NoEngine as exc:
        if index.is_file():
            return _load_rootfs(Path(json.loads(index.read_text())["dir"]))
        raise EnvironmentSetupError(
            f"bwrap: image {image!r} is not in the cache ({cache}) and no Docker engine answers to export it: {exc}",
            code="image_not_found",
            help="run once with a Docker engine available (the image is exported and cached), or set `rootfs`",
        ) from None
    if res.returncode != 0:
        raise EnvironmentSetupError(
            f"bwrap: image {image!r} is not present on the Docker engine: {_tail(res.stderr)}",
            code="image_not_found",
            help="build or load the image first (e.g. `bash scripts/setup-docker.sh` for the acx test images)",
        )
    info = json.loads(res.stdout)[0]
    entry = cache / "images" / str(info["Id"]).removeprefix("sha256:")[:32]
    if not (entry / "meta.json").is_file():
        _export(config, image, entry, _image_config(info), timeout)
    _write_atomic(index, json.dumps({"name": image, "dir": str(entry)}))
    return _load_rootfs(entry)


def _context_digest(context: Path) -> str:
    """Content hash of a build context (paths, modes, bytes): the cache key of its build."""
    digest = hashlib.sha256()
    for path in sorted(context.rglob("*")):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0")
        if path.is_symlink():
            digest.update(b"L" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(oct(path.stat().st_mode & 0o777).encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:32]


def _build_rootfs(config: BwrapConfig, context: str, timeout: float) -> _RootFs:
    """The root filesystem of a Dockerfile build context: built by the engine once, cached by the
    context's content (a later run with the same context needs no daemon)."""
    ctx = Path(context)
    if not (ctx / "Dockerfile").is_file():
        raise EnvironmentSetupError(f"bwrap: build context {context} has no Dockerfile")
    digest = _context_digest(ctx)
    entry = _cache_dir(config) / "builds" / digest
    if (entry / "meta.json").is_file():
        return _load_rootfs(entry)
    tag = f"acx-bwrap-build:{digest[:16]}"
    try:
        built = _docker(config, ["build", "-q", "--label", "acx.bwrap.build=1", "-t", tag, context], timeout)
    except _NoEngine as exc:
        raise EnvironmentSetupError(
            f"bwrap: {context}/Dockerfile has not been built yet and no Docker engine answers: {exc}",
            help="run once with a Docker engine available; the build is cached by content",
        ) from None
    if built.returncode != 0:
        if _engine_down(built.stderr.decode("utf-8", "replace")):
            raise EnvironmentSetupError(
                f"bwrap: {context}/Dockerfile has not been built yet and no Docker engine answers",
                help="run once with a Docker engine available; the build is cached by content",
            )
        raise EnvironmentSetupError(
            f"bwrap: building {context}/Dockerfile failed: {_tail(built.stdout + built.stderr)}"
        )
    try:
        inspect = _docker(config, ["image", "inspect", tag], 60)
        info = json.loads(inspect.stdout)[0]
        _export(config, tag, entry, _image_config(info), timeout)
    finally:
        _docker(config, ["rmi", tag], 60)  # the export is the cache; the engine keeps its layers
    return _load_rootfs(entry)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per writer, not per process: sessions of one run open concurrently (worker threads)
    # and may record the same cache entry at once (a shared pid-named temp file raced in CI).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---- the sandbox's filesystem as the host sees it -----------------------------------------------


@dataclass(frozen=True)
class _Mount:
    target: str  # sandbox path
    source: str  # host path
    writable: bool


class _FsView:
    """The sandbox's filesystem seen from the host through ``/proc/<init>/root``, with symlinks
    resolved the way the sandbox resolves them (an absolute link restarts at the sandbox's root,
    never at the host's)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def host(self, spath: str) -> str:
        return self.root + spath if spath != "/" else self.root

    def resolve(self, spath: str, *, follow_last: bool = True) -> str:
        """``spath`` (absolute) with every symlink resolved inside the sandbox's view."""
        parts = [p for p in spath.split("/") if p not in ("", ".")]
        parts.reverse()  # a stack: next component last
        cur, hops = "/", 0
        while parts:
            name = parts.pop()
            if name == "..":
                cur = posixpath.dirname(cur)
                continue
            nxt = posixpath.join(cur, name)
            if nxt.split("/")[1] in _SPECIAL:
                raise DriverError(f"{spath}: /{nxt.split('/')[1]} is not reachable by file transfers")
            if (parts or follow_last) and os.path.islink(self.host(nxt)):
                hops += 1
                if hops > _MAX_LINKS:
                    raise DriverError(f"{spath}: too many levels of symbolic links")
                target = os.readlink(self.host(nxt))
                if target.startswith("/"):
                    cur = "/"
                parts.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            cur = nxt
        return cur

    def open(self, spath: str, flags: int, mode: int = 0o644, *, mkdirs: bool = False) -> int:
        """Open the resolved sandbox path ``spath`` with no symlink followed (each directory opened
        with O_NOFOLLOW from the sandbox's root: a symlink swapped in meanwhile fails)."""
        parts = [p for p in spath.split("/") if p]
        if not parts:
            raise IsADirectoryError(spath)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in parts[:-1]:
                try:
                    nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except FileNotFoundError:
                    if not mkdirs:
                        raise
                    os.mkdir(name, 0o755, dir_fd=fd)
                    nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nfd
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
        finally:
            os.close(fd)

    def mkdirs(self, spath: str) -> None:
        """Create the resolved sandbox directory ``spath`` and its parents (no symlink followed)."""
        if spath != "/":
            os.close(self.open(posixpath.join(spath, "."), os.O_RDONLY | os.O_DIRECTORY, mkdirs=True))


def _check_links(top: Path, stop: str) -> None:
    """Refuse special files, and symlinks whose target leaves the downloaded sandbox directory
    ``stop`` (judged by name in the sandbox's terms, as the sandbox would resolve it)."""
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                where = posixpath.join(stop, p.parent.relative_to(top).as_posix())
                target = posixpath.normpath(posixpath.join(where, os.readlink(p)))
                if target != stop and not target.startswith(stop.rstrip("/") + "/"):
                    raise DriverError(f"refusing to download {p.name}: symlink escapes {stop}")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise DriverError(f"refusing to download {posixpath.join(stop, name)}: special file")


def _seed(src: str, dst: str) -> None:
    """A writable directory's initial content: the root filesystem's copy of it, if any."""
    if os.path.isdir(src) and not os.path.islink(src):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
        shutil.copystat(src, dst)
    else:
        os.makedirs(dst, exist_ok=True)
        if os.path.basename(dst) == "tmp":
            os.chmod(dst, 0o1777)


def _shared_etc(parent: str) -> str:
    """The synthetic /etc for this host's current /etc, built once under ``parent`` and shared
    read-only by every session (copying it per session cost ~35 ms: ~700 entries). Keyed by what
    it copies (name, size, mtime), so a changed host entry (updated CA certificates) builds anew."""
    key = hashlib.sha256()
    for name in _ETC_FROM_HOST:
        try:
            st = os.lstat(os.path.join("/etc", name))
        except OSError:
            continue
        key.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    key.update(json.dumps(_ETC_GENERATED, sort_keys=True).encode())
    final = os.path.join(parent, f".acx-bwrap-etc-{key.hexdigest()[:16]}")
    if os.path.isdir(final):
        return final
    tmp = f"{final}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    _synthetic_etc(tmp)
    try:
        os.rename(tmp, final)
    except OSError:  # another process built it first: theirs is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _synthetic_etc(dst: str) -> None:
    """A sandbox's /etc when its root is the host's system directories: generated accounts and
    hosts, plus copies of the host's harmless entries (:data:`_ETC_FROM_HOST`; symlinks kept as
    symlinks, an unreadable or missing entry left out)."""
    os.makedirs(dst, exist_ok=True)
    for name in _ETC_FROM_HOST:
        src, out = os.path.join("/etc", name), os.path.join(dst, name)
        try:
            if os.path.isdir(src) and not os.path.islink(src):
                shutil.copytree(src, out, symlinks=True, dirs_exist_ok=True)
            elif os.path.lexists(src):
                os.makedirs(os.path.dirname(out), exist_ok=True)
                shutil.copy2(src, out, follow_symlinks=name in ("resolv.conf", "localtime"))
        except OSError:
            continue  # not readable here: the sandbox goes without it
    for name, text in _ETC_GENERATED.items():
        with open(os.path.join(dst, name), "w", encoding="utf-8") as fh:
            fh.write(text)


# ---- sessions -------------------------------------------------------------------------------------

#: Runs on the host before nsenter: joins the session's cgroups (race-free: before anything forks).
_JOIN = 'p=$$; while [ "$1" != -- ]; do echo "$p" > "$1" || exit 125; shift; done; shift; exec "$@"'
#: Runs in the sandbox after nsenter: nsenter cannot change into a directory of the sandbox.
_CD = 'cd -- "$1" || exit 125; shift; exec "$@"'


class BwrapSession(Session):
    kill_grace_seconds: ClassVar[float] = 1.0

    def __init__(
        self,
        *,
        session_id: str,
        workdir: str,
        public_env: Mapping[str, str],
        driver: BwrapDriver,
        state: _State,
        network_policy: NetworkPolicy,
    ) -> None:
        super().__init__(session_id=session_id, workdir=workdir, public_env=public_env)
        self._driver = driver
        self._state = state
        self._policy = network_policy
        self._fs = _FsView(f"/proc/{state.pid1}/root")
        self._base_env = {os.fsencode(k): os.fsencode(v) for k, v in state.env.items()}
        self._live: set[int] = set()

    @property
    def directory(self) -> str:
        """The session's host directory (the overlay's upper layer, or the writable directories)."""
        return self._state.directory

    # ---- exec --------------------------------------------------------------------------------
    def _argv(self, cwd: str, argv: list[str]) -> list[str]:
        st = self._state
        enter = [st.nsenter, "-t", str(st.pid1), "-U", "--preserve-credentials", "-m", "-p", "-i", "-u", "-C"]
        if self._policy.network_mode == "no-network":
            enter.append("-n")
        cmd = [*enter, "-r", "-w", "--", "/bin/sh", "-c", _CD, "sh", cwd, *argv]
        if st.cgroup_procs:
            return ["/bin/sh", "-c", _JOIN, "acx-cgroup", *st.cgroup_procs, "--", *cmd]
        return cmd

    def _sandbox_path(self, path: str) -> str:
        base = self.workdir or "/"
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(base, path))

    async def _exec(
        self,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        timeout: float | None,
        stdin: bytes | None,
        max_output_bytes: int,
    ) -> ExecResult:
        import trio

        from acx.drivers import _procs

        where = self._sandbox_path(cwd or self.workdir or "/")
        if not await self.is_dir(where):
            raise DriverError(f"working directory {where} does not exist in session {self.id}")
        if self._state.proc.poll() is not None:
            raise DriverError(f"the sandbox of session {self.id} is gone", code="sandbox_stopped")
        full_env = dict(self._base_env)
        for key, value in env.items():
            full_env[os.fsencode(key)] = os.fsencode(value)
        out_r = out_w = err_r = err_w = in_r = in_w = -1
        rest: memoryview | None = None
        try:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            if stdin is not None:
                in_r, in_w = os.pipe()
                os.set_blocking(in_w, False)
                rest = _procs.prefill(in_w, stdin)
                if rest is None:
                    in_w = _procs.closed(in_w)
            await trio.lowlevel.checkpoint()
            proc = subprocess.Popen(
                self._argv(where, argv),
                stdin=in_r if stdin is not None else subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                env=full_env,
                start_new_session=True,
            )
        except BaseException:
            _procs.close_fds(out_r, err_r, in_w)
            raise
        finally:
            _procs.close_fds(out_w, err_w, in_r)
        pid = proc.pid
        self._live.add(pid)
        cmd = _procs.Command(proc, out_r, err_r, in_w, rest, max_output_bytes)
        try:
            with trio.CancelScope() as scope:
                if timeout is not None:
                    scope.deadline = trio.current_time() + timeout
                await cmd.watch(scope)
        finally:
            # Success, timeout and cancellation alike: the command's process group does not outlive exec().
            if _procs.signal_group(pid, signal.SIGTERM) or proc.returncode is None:
                with trio.CancelScope(shield=True):
                    await self._kill_group(proc, cmd.pidfd)
            self._live.discard(pid)
            _procs.close_fds(out_r, err_r, cmd.pidfd, cmd.in_w)
        timed_out = not cmd.exited
        returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        if timed_out:
            returncode = 124 if returncode >= 0 else returncode
        stderr = cmd.err.text()
        if returncode == 125 and "acx-cgroup" in stderr:
            raise DriverError(f"session {self.id}: cannot join its cgroup: {stderr.strip()[:300]}")
        return ExecResult(
            returncode=returncode,
            stdout=cmd.out.text(),
            stderr=stderr,
            timed_out=timed_out,
            output_truncated=cmd.out.truncated or cmd.err.truncated,
        )

    async def _kill_group(self, proc: subprocess.Popen[bytes], pidfd: int) -> None:
        import trio

        from acx.drivers import _procs

        with trio.move_on_after(self.kill_grace_seconds):
            while proc.poll() is None or _procs.group_alive(proc.pid):
                await trio.sleep(0.02)
        _procs.signal_group(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            await _procs.wait_exit(proc, pidfd)

    async def kill_stray_processes(self) -> None:
        """SIGKILL every process in the sandbox except its init and holder (a phase boundary):
        background jobs, ``setsid`` children and daemons alike — they are all in its pid namespace."""
        import trio

        left = await trio.to_thread.run_sync(self._state.kill_members)
        if left:
            raise DriverError(f"session {self.id}: {left} process(es) survived SIGKILL")

    # ---- files -------------------------------------------------------------------------------
    def _resolve(self, path: str) -> str:
        return self._fs.resolve(self._sandbox_path(path))

    def _make_workdir(self) -> None:
        """The workdir exists from the start, as a container engine creates ``working_dir``."""
        self._fs.mkdirs(self._resolve(self.workdir or "/"))

    def _read_only(self, path: str) -> DriverError:
        writable = ", ".join(sorted(m.target for m in self._state.mounts if m.writable))
        return DriverError(
            f"{path}: read-only in the sandbox (the root filesystem is read-only here; writable: {writable})",
            code="read_only",
            help="add the directory to the bwrap param `writable`",
        )

    async def write_bytes(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        import trio

        spath = self._resolve(path)

        def _write() -> None:
            try:
                fd = self._fs.open(spath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode, mkdirs=True)
            except OSError as exc:
                if exc.errno == errno.EROFS:
                    raise self._read_only(path) from None
                raise
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fd, mode)

        await trio.to_thread.run_sync(_write)

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        import trio

        spath = self._resolve(path)

        def _read() -> bytes:
            # O_NONBLOCK: a FIFO left in the sandbox must not block a worker thread forever.
            fd = self._fs.open(spath, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    raise IsADirectoryError(path)
                if not stat.S_ISREG(mode):
                    raise DriverError(f"{path} is not a regular file", code="not_a_file")
                data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
            if max_bytes is not None and len(data) > max_bytes:
                raise DriverError(f"{path} is larger than the {max_bytes}-byte limit")
            return data

        return await trio.to_thread.run_sync(_read)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        import trio

        src = Path(local_dir)
        if not src.is_dir():
            raise FileNotFoundError(local_dir)
        spath = self._resolve(remote_dir)

        def _copy() -> None:
            try:
                self._fs.mkdirs(spath)
                shutil.copytree(src, self._fs.host(spath), symlinks=True, dirs_exist_ok=True)
            except OSError as exc:
                if exc.errno == errno.EROFS:
                    raise self._read_only(remote_dir) from None
                raise

        await trio.to_thread.run_sync(_copy)

    async def download_dir(self, remote_dir: str, local_dir: str) -> None:
        import trio

        spath = self._resolve(remote_dir)
        src = Path(self._fs.host(spath))

        def _copy() -> None:
            if not src.is_dir() or src.is_symlink():
                raise FileNotFoundError(remote_dir)
            _check_links(src, spath)
            shutil.copytree(src, local_dir, symlinks=True, dirs_exist_ok=True)

        await trio.to_thread.run_sync(_copy)

    async def is_file(self, path: str) -> bool:
        return self._kind(path, stat.S_ISREG)

    async def is_dir(self, path: str) -> bool:
        return self._kind(path, stat.S_ISDIR)

    def _kind(self, path: str, test: object) -> bool:
        try:
            st = os.lstat(self._fs.host(self._resolve(path)))
        except (OSError, DriverError):
            return False
        return bool(test(st.st_mode))  # type: ignore[operator]

    # ---- network -----------------------------------------------------------------------------
    async def set_network_policy(self, policy: NetworkPolicy) -> None:
        """Commands started from now on run under ``policy``; those still running under another
        one are killed (their network namespace cannot change)."""
        _check_policy(policy)
        if policy != self._policy:
            await self.kill_stray_processes()
        self._policy = policy

    # ---- lifecycle ---------------------------------------------------------------------------
    async def _close(self) -> None:
        import trio

        for pgid in list(self._live):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        self._live.clear()
        await trio.to_thread.run_sync(self._state.destroy, self._driver.keep_workdir)


def _check_policy(policy: NetworkPolicy) -> None:
    caps = probe_bwrap()
    if policy.network_mode not in caps.network_modes:
        raise CapabilityError(
            f"bwrap cannot enforce network_mode {policy.network_mode!r}: "
            + caps.unsupported_reasons.get(policy.network_mode, "not supported"),
            code="E0452",
            help="use --env docker, or a policy bwrap enforces: " + (", ".join(caps.network_modes) or "none here"),
        )


class _State:
    """A running sandbox: its bwrap process, namespace init, host directory and cgroups."""

    def __init__(self, directory: str, env: dict[str, str], nsenter: str) -> None:
        self.directory = directory
        self.env = env
        #: Read-only root + writable binds (host system directories, or no overlay here).
        self.mounts: list[_Mount] = []
        #: Overlay mode: (lowerdir, upperdir, workdir, mount point) on the host.
        self.overlay: tuple[str, str, str, str] | None = None
        self.nsenter = nsenter
        self.cgroup_dirs: list[str] = []
        self.cgroup_procs: list[str] = []
        self.proc: subprocess.Popen[bytes] = None  # type: ignore[assignment]
        self.holder_w = -1
        #: The session directory held open while the session lives: how `list_sessions` (acx env,
        #: acx gc) tells a live session from a crashed run's (drivers._owner.held_dirs).
        self.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.pid1 = 0
        self.holder = 0
        self.pidns = ""

    def members(self) -> list[int]:
        """Host pids of the processes in the sandbox's pid namespace, init and holder excluded."""
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in (self.pid1, self.holder):
                continue
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") == self.pidns and not _dead(pid):
                    out.append(pid)
            except OSError:
                continue
        return out

    def kill_members(self) -> int:
        """SIGKILL the members (repeatedly: a fork between passes is caught); how many survive."""
        import time

        for _ in range(300):
            pids = self.members()
            if not pids:
                return 0
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        return len(self.members())

    def destroy(self, keep_dir: bool) -> None:
        """Kill the namespace's init (the kernel kills every member), reap bwrap, remove the rest."""
        import time

        if self.holder_w >= 0:
            os.close(self.holder_w)
            self.holder_w = -1
        if self.pid1:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid1, signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # bwrap may exit before its init has finished dying (the init reports its command's exit
        # first); the init turns zombie only once the kernel has killed every process in the
        # namespace, so that is what "closed" waits for.
        deadline = time.monotonic() + 10
        while self.pid1 and not _dead(self.pid1) and time.monotonic() < deadline:
            time.sleep(0.005)
        for path in reversed(self.cgroup_dirs):
            for _ in range(100):  # the members leave their cgroup as the kernel reaps them
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        if keep_dir:
            Path(self.directory, _KEPT).touch()
        else:
            shutil.rmtree(self.directory, ignore_errors=True)
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


class BwrapDriver(Driver):
    id: ClassVar[str] = "bwrap"
    config_class = BwrapConfig
    sessions_discoverable = True  # acx-bwrap-<session id>-* directories under the workdir root

    def __init__(self, config: EnvironmentConfig | None = None) -> None:
        super().__init__(config)
        self._roots: dict[str, _RootFs] = {}
        self._locks: dict[str, trio.Lock] = {}

    @property
    def keep_workdir(self) -> bool:
        return self._config.keep_workdir

    @property
    def _config(self) -> BwrapConfig:
        assert isinstance(self.config, BwrapConfig)
        return self.config

    def capabilities(self) -> DriverCapabilities:
        return probe_bwrap()

    @classmethod
    def probe(cls) -> DriverCapabilities:
        return probe_bwrap()

    def _parent(self) -> str:
        return os.path.abspath(self._config.workdir_root or tempfile.gettempdir())

    async def prepare(self) -> list[str]:
        """Refuses a run as root without ``allow_root`` before anything starts (E0701)."""
        self._check_identity()
        return []

    def _check_identity(self) -> None:
        # bwrap maps one uid: the invoking user. Under root that is the host's uid 0, which owns
        # every root-owned file the sandbox can see (issue 24 item 7) — an explicit choice, then.
        if os.geteuid() == 0 and not self._config.allow_root:
            raise EnvironmentSetupError(
                "bwrap: acx runs as root, so a sandbox's processes would be the host's root (uid 0 outside, "
                "every capability dropped, the host's system directories read-only)",
                help="run acx as an unprivileged user (the sandbox is then that user outside), or opt in with "
                "`allow_root = true` in `environment bwrap { … }` (a config file: "
                "`environments: {bwrap: {allow_root: true}}`)",
            )

    # ---- root filesystems ---------------------------------------------------------------------
    async def _rootfs(self, request: OpenRequest) -> _RootFs:
        import trio

        setup, config = request.setup, self._config
        timeout = setup.build_timeout_seconds or 600.0
        fn: Callable[[BwrapConfig, str, float], _RootFs]
        if setup.image is not None:
            key, fn, arg = f"image:{setup.image}", _image_rootfs, setup.image
        elif request.build_context is not None:
            key, fn, arg = f"build:{request.build_context}", _build_rootfs, request.build_context
        else:
            if config.rootfs is not None and not os.path.isdir(config.rootfs):
                raise EnvironmentSetupError(f"bwrap: rootfs {config.rootfs} is not a directory")
            return _RootFs(path=config.rootfs or "/", env={"PATH": _DEFAULT_PATH})
        found = self._roots.get(key)
        if found is None:
            # One export per image per driver, however many sessions open it at once.
            lock = self._locks.setdefault(key, trio.Lock())
            async with lock:
                found = self._roots.get(key)
                if found is None:
                    found = await trio.to_thread.run_sync(fn, config, arg, timeout)
                    self._roots[key] = found
        return found

    # ---- open ------------------------------------------------------------------------------------
    async def open(self, request: OpenRequest) -> Session:
        import trio

        bwrap, nsenter, why = _tools()
        if why or bwrap is None or nsenter is None:
            raise EnvironmentSetupError(f"bwrap: {why}", help="apt-get install bubblewrap util-linux")
        self._check_identity()
        _check_policy(request.network_policy)
        groups = _session_limits(request.resources, self._config.pids_limit)
        root = await self._rootfs(request)
        if root.user not in ("", "root", "0", "0:0", "root:root"):
            raise EnvironmentSetupError(
                f"bwrap: the image runs as user {root.user!r}; bwrap runs commands as the sandbox's root only",
                help="use --env docker for images with a non-root USER",
            )
        workdir = request.setup.workdir or root.workdir or "/app"
        if not workdir.startswith("/"):
            raise EnvironmentSetupError(f"bwrap: setup.workdir {workdir!r} must be an absolute path")
        directory = await trio.to_thread.run_sync(self._make_dir, request.session_id)
        state: _State | None = None
        try:
            state = await trio.to_thread.run_sync(self._prepare, directory, root, posixpath.normpath(workdir), nsenter)
            if groups:
                await trio.to_thread.run_sync(_make_cgroups, state, request.session_id, groups)
            await self._start(state, bwrap, root)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_abandon, directory, state)
            raise
        session = BwrapSession(
            session_id=request.session_id,
            workdir=posixpath.normpath(workdir),
            public_env=request.startup_env,
            driver=self,
            state=state,
            network_policy=request.network_policy,
        )
        try:
            await trio.to_thread.run_sync(session._make_workdir)
        except (OSError, DriverError) as exc:
            with trio.CancelScope(shield=True):
                await session.close()
            raise EnvironmentSetupError(f"bwrap: workdir {workdir} cannot be created in the sandbox: {exc}") from None
        return session

    def _make_dir(self, session_id: str) -> str:
        from acx.drivers import _procs

        parent = self._parent()
        os.makedirs(parent, exist_ok=True)
        return tempfile.mkdtemp(prefix=f"{_SESSION_PREFIX}{_procs.safe_name(session_id)}-", dir=parent)

    def _prepare(self, directory: str, root: _RootFs, workdir: str, nsenter: str) -> _State:
        """Lay out the session's host directory: an overlay's upper layer over the root filesystem
        (a writable root, like a container's), or read-only binds plus seeded writable directories."""
        state = _State(directory, {"PATH": _DEFAULT_PATH, "HOME": "/root", **root.env}, nsenter)
        if root.path != "/" and _overlay_ok():
            layers = [os.path.join(directory, n) for n in ("upper", "work", "merged")]
            for path in layers:
                os.mkdir(path)
            bad = [p for p in (root.path, *layers) if "," in p or ":" in p]
            if bad:
                raise EnvironmentSetupError(f"bwrap: overlay paths cannot contain ',' or ':': {bad[0]}")
            state.overlay = (root.path, layers[0], layers[1], layers[2])
            return state
        state.mounts = self._bind_mounts(directory, root.path, workdir)
        return state

    def _bind_mounts(self, directory: str, rootfs: str, workdir: str) -> list[_Mount]:
        writable = {posixpath.normpath(w) for w in self._config.writable}
        for w in writable:
            if not w.startswith("/") or w == "/" or w.split("/")[1] in _SPECIAL:
                raise EnvironmentSetupError(f"bwrap: writable entry {w!r} must be an absolute directory below /")
        if not any(workdir == w or workdir.startswith(w + "/") for w in writable):
            top = "/" + workdir.split("/")[1] if workdir != "/" else "/"
            if top == "/" or top[1:] in _SYSTEM_DIRS or top[1:] in _SPECIAL:
                raise EnvironmentSetupError(
                    f"bwrap: workdir {workdir} is on the read-only root filesystem",
                    help="choose a workdir under a writable directory, or add it to the bwrap param `writable`",
                )
            writable.add(top)
        mounts = []
        if rootfs == "/":  # the host's system directories, read-only; nothing else of the host
            mounts = [_Mount(f"/{n}", f"/{n}", False) for n in _HOST_SYSTEM if n != "etc" and _real_dir(f"/{n}")]
            # Not the host's /etc (its shadow, docker/key.json, ssh host keys): a synthetic one.
            mounts.append(_Mount("/etc", _shared_etc(os.path.dirname(directory)), False))
        for w in sorted(writable):
            in_root = os.path.join(rootfs, w.lstrip("/"))
            if w.count("/") > 1 and not _real_dir(in_root):
                continue  # a nested mount needs its mount point in the (read-only) root filesystem
            host = os.path.join(directory, "fs", w.lstrip("/"))
            _seed(in_root if rootfs != "/" else "", host)  # the host's own /tmp, /root… never
            mounts.append(_Mount(w, host, True))
        return mounts

    def _bwrap_args(self, state: _State, root: _RootFs) -> list[str]:
        args = ["--unshare-all", "--uid", "0", "--gid", "0", "--hostname", "acx", "--die-with-parent"]
        if state.overlay is not None:
            args += ["--bind", state.overlay[3], "/"]
        elif root.path != "/":
            covered = {m.target for m in state.mounts if m.target.count("/") == 1}
            for name in sorted(os.listdir(root.path)):
                path = os.path.join(root.path, name)
                if name in _SPECIAL or f"/{name}" in covered:
                    continue
                args += (
                    ["--symlink", os.readlink(path), f"/{name}"]
                    if os.path.islink(path)
                    else ["--ro-bind", path, f"/{name}"]
                )
        else:
            for name in _HOST_SYSTEM:  # merged-/usr hosts: /bin, /lib… are symlinks
                if os.path.islink(f"/{name}"):
                    args += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        for m in sorted(state.mounts, key=lambda m: m.target.count("/")):
            args += ["--bind" if m.writable else "--ro-bind", m.source, m.target]
        if root.path != "/":  # the host's resolver, as a container gets it, for `public` commands
            for name in ("resolv.conf", "hosts"):
                inside = os.path.join(root.path, "etc", name)
                if os.path.isfile(f"/etc/{name}") and os.path.isfile(inside) and not os.path.islink(inside):
                    args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        return args

    def _command(self, state: _State, bwrap: str, root: _RootFs, info_fd: int) -> list[str]:
        cmd = [bwrap, *self._bwrap_args(state, root), "--info-fd", str(info_fd), "--", "/bin/sh", "-c", "read _"]
        if state.overlay is not None:
            # The overlay is mounted in a private mount namespace that bwrap then inherits: it
            # disappears with the sandbox, nothing is left mounted on the host.
            lower, upper, work, merged = state.overlay
            cmd = [*_overlay_prefix(f"lowerdir={lower},upperdir={upper},workdir={work}", merged), *cmd]
        if state.cgroup_procs:
            cmd = ["/bin/sh", "-c", _JOIN, "acx-cgroup", *state.cgroup_procs, "--", *cmd]
        return cmd

    async def _start(self, state: _State, bwrap: str, root: _RootFs) -> None:
        """Start the sandbox: bwrap's init, then a holder that lives until its stdin closes."""
        import trio

        info_r, info_w = os.pipe()
        hold_r, hold_w = os.pipe()
        log = os.path.join(state.directory, "bwrap.log")
        try:
            with open(log, "wb") as err:
                state.proc = subprocess.Popen(
                    self._command(state, bwrap, root, info_w),
                    stdin=hold_r,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    pass_fds=(info_w,),
                    start_new_session=True,
                    env={"PATH": os.environ.get("PATH", _DEFAULT_PATH)},
                )
        finally:
            os.close(info_w)
            os.close(hold_r)
        state.holder_w = hold_w
        try:
            data = await _read_info(info_r)
        finally:
            os.close(info_r)
        try:
            state.pid1 = int(json.loads(data)["child-pid"])
        except (ValueError, KeyError):
            await trio.to_thread.run_sync(state.proc.wait)
            why = Path(log).read_text(errors="replace").strip()[-500:]
            raise EnvironmentSetupError(f"bwrap: the sandbox did not start: {why or 'no message'}") from None
        state.pidns = os.readlink(f"/proc/{state.pid1}/ns/pid")
        with trio.fail_after(10):
            while not state.holder:
                children = Path(f"/proc/{state.pid1}/task/{state.pid1}/children").read_text().split()
                if children:
                    state.holder = int(children[0])
                else:
                    await trio.sleep(0.001)

    # ---- discovery --------------------------------------------------------------------------------
    async def list_sessions(self, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
        """Session directories that exist: open ones (``owner_alive``: an acx process holds the
        directory open), and those a crash or ``keep_workdir`` left (their sandboxes died with
        the acx process that opened them)."""
        import trio

        from acx.drivers._owner import held_dirs

        parent = self._parent()
        names = await trio.to_thread.run_sync(_session_dirs, parent, None)
        real = {os.path.realpath(os.path.join(parent, n)): n for n in names}
        held = {real[p] for p in await trio.to_thread.run_sync(held_dirs, set(real))}
        run_id = (labels or {}).get("acx.run_id")
        out = []
        for name in names:
            sid = name[len(_SESSION_PREFIX) :].rsplit("-", 1)[0]
            if run_id and not sid.startswith(f"{run_id}-"):
                continue
            path = os.path.join(parent, name)
            kept = os.path.exists(os.path.join(path, _KEPT))
            out.append(
                SessionRecord(
                    id=sid,
                    provider=self.id,
                    labels={"path": path},
                    name=path,
                    state="kept" if kept else "active",
                    owner_alive=name in held,
                    kept=kept,
                )
            )
        return out

    async def close_session(self, session_id: str) -> None:
        """Remove a crashed session's directory and cgroups (its processes died with its sandbox)."""
        import trio

        from acx.drivers import _procs

        parent = self._parent()
        names = await trio.to_thread.run_sync(_session_dirs, parent, _procs.safe_name(session_id))
        if not names:
            raise DriverError(f"bwrap: no session {session_id} under {parent}", code="session_not_found")
        for name in names:
            await trio.to_thread.run_sync(functools.partial(shutil.rmtree, os.path.join(parent, name), True))
        await trio.to_thread.run_sync(_remove_cgroups, _procs.safe_name(session_id))


def _session_dirs(parent: str, safe_id: str | None) -> list[str]:
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    prefix = _SESSION_PREFIX + (f"{safe_id}-" if safe_id is not None else "")
    return sorted(
        n
        for n in names
        if n.startswith(prefix)
        and (safe_id is None or "-" not in n[len(prefix) :])
        and os.path.isdir(os.path.join(parent, n))
        and not os.path.islink(os.path.join(parent, n))
    )


async def _read_info(fd: int) -> bytes:
    """bwrap's --info-fd JSON (written once the namespaces exist); b"" when bwrap failed first."""
    import trio

    data = b""
    try:
        with trio.fail_after(30):
            while True:
                await trio.lowlevel.wait_readable(fd)
                chunk = os.read(fd, 65536)
                if not chunk:
                    return data
                data += chunk
                with contextlib.suppress(ValueError):
                    json.loads(data)
                    return data
    except trio.TooSlowError:
        raise EnvironmentSetupError("bwrap: the sandbox did not start within 30 s") from None


def _dead(pid: int) -> bool:
    """A zombie (killed, not yet reaped by the sandbox's init) or a dying process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _overlay_prefix(options: str, merged: str) -> list[str]:
    """Run the rest in a private mount namespace with the overlay mounted at ``merged`` (in a user
    namespace of our own when not root: overlayfs allows that since Linux 5.11)."""
    unshare = shutil.which("unshare") or "unshare"
    ns = [unshare, "--mount", "--propagation", "private"]
    if os.getuid() != 0:
        ns[1:1] = ["--user", "--map-root-user"]
        options += ",userxattr"
    mount = 'mount -t overlay acx-bwrap -o "$1" "$2" || exit 125; shift 2; exec "$@"'
    return [*ns, "--", "/bin/sh", "-c", mount, "sh", options, merged]


@functools.cache
def _overlay_ok() -> bool:
    """Whether an overlay can be mounted the way sessions mount theirs (probed once)."""
    with tempfile.TemporaryDirectory(prefix="acx-bwrap-probe-") as tmp:
        layers = [os.path.join(tmp, n) for n in ("lower", "upper", "work", "merged")]
        for path in layers:
            os.mkdir(path)
        options = f"lowerdir={layers[0]},upperdir={layers[1]},workdir={layers[2]}"
        try:
            proc = subprocess.run(
                [*_overlay_prefix(options, layers[3]), "true"], capture_output=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return proc.returncode == 0


def _abandon(directory: str, state: _State | None) -> None:
    if state is not None:
        state.destroy(keep_dir=False)
    else:
        shutil.rmtree(directory, ignore_errors=True)


# ---- cgroups ---------------------------------------------------------------------------------------


def _session_limits(resources: ResourceRequirements | None, pids_limit: int | None) -> dict[str, dict[str, str]]:
    """controller → {file: value} for a session; refuses what cannot be enforced here (P7)."""
    wanted: dict[str, dict[str, str]] = {}
    groups = _cgroups()
    if resources is not None:
        for name in ("storage_mb", "gpu"):
            value = getattr(resources, name)
            if value:
                raise CapabilityError(f"bwrap cannot enforce resources.{name}", code="E0453", help="use --env docker")
        if resources.memory_mb is not None:
            limit = str(int(resources.memory_mb) * 1024 * 1024)
            wanted["memory"] = (
                {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
                if groups is None or groups.version == 1
                else {"memory.max": limit, "memory.swap.max": "0"}
            )
        if resources.cpu is not None:
            quota = max(1000, int(resources.cpu * 100000))
            wanted["cpu"] = (
                {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": str(quota)}
                if groups is None or groups.version == 1
                else {"cpu.max": f"{quota} 100000"}
            )
    if pids_limit is not None:
        wanted["pids"] = {"pids.max": str(pids_limit)}
    missing = [c for c in wanted if groups is None or not groups.supports(c)]
    if missing:
        raise CapabilityError(
            f"bwrap cannot enforce {', '.join(missing)} limits here: no writable cgroup hierarchy for "
            + ", ".join(missing),
            code="E0453",
            help="run as root on a machine with cgroup v1 hierarchies or cgroup v2, or use --env docker",
        )
    return wanted


def _make_cgroups(state: _State, session_id: str, wanted: dict[str, dict[str, str]]) -> None:
    from acx.drivers import _procs

    groups = _cgroups()
    assert groups is not None
    name = f"{_procs.safe_name(session_id)}-{os.path.basename(state.directory)[-8:]}"
    dirs: dict[str, str] = {}
    for controller, settings in wanted.items():
        path = os.path.join(groups.parents[controller], name)
        if path not in dirs.values():
            os.makedirs(path, exist_ok=True)
            state.cgroup_dirs.append(path)
        dirs[controller] = path
        for fname, value in settings.items():
            target = os.path.join(path, fname)
            if fname.endswith("memsw.limit_in_bytes") and not os.path.exists(target):
                continue  # swap accounting is off in this kernel: memory alone is limited
            with open(target, "w") as fh:
                fh.write(value)
    state.cgroup_procs = [os.path.join(p, "cgroup.procs") for p in dict.fromkeys(dirs.values())]


def _remove_cgroups(safe_id: str) -> None:
    groups = _cgroups()
    if groups is None:
        return
    for parent in set(groups.parents.values()):
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                if name.startswith(f"{safe_id}-") and "-" not in name[len(safe_id) + 1 :]:
                    with contextlib.suppress(OSError):
                        os.rmdir(os.path.join(parent, name))
