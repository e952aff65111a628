"""Inventory and garbage collection: list, remove and sweep acx-labelled objects (blocking).

Everything the driver creates carries ``acx.*`` labels; these helpers find objects by label,
remove them (containers first, then networks), and tell orphans — objects whose creating acx
process on this host is gone — from the objects of live runs. ``acx gc``, ``acx env`` and the
automatic sweep before a process's first sandbox all build on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from acx.drivers._base import SessionRecord
from acx.drivers._owner import host_name, owner_alive, pid_alive
from acx.drivers.docker._engine import (
    LABEL_HOST,
    LABEL_KEEP,
    LABEL_MANAGED,
    LABEL_PID,
    LABEL_PID_START,
    LABEL_SESSION,
    _remove_container,
    _remove_network,
    docker_client,
)

__all__ = ["close_objects", "is_orphan", "list_objects", "sweep_orphans"]


def _label_filter(labels: Mapping[str, str] | None) -> list[str]:
    out = [LABEL_MANAGED]
    for key, value in (labels or {}).items():
        out.append(f"{key}={value}")
    return out


def list_objects(client: Any | None = None, *, labels: Mapping[str, str] | None = None) -> list[SessionRecord]:
    """acx-labelled containers (sessions and proxies) and networks on the engine."""
    client = client or docker_client()
    records: list[SessionRecord] = []
    for c in client.api.containers(all=True, filters={"label": _label_filter(labels)}):
        lab = c.get("Labels") or {}
        name = (c.get("Names") or ["?"])[0].lstrip("/")
        records.append(
            SessionRecord(
                id=lab.get(LABEL_SESSION, c["Id"][:12]),
                provider="docker",
                labels={**lab, "docker.kind": "container", "docker.name": name},
                state=c.get("State", "unknown"),
                created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.get("Created", 0))),
                name=name,
                owner_alive=_owner_of(lab),
                kept=lab.get(LABEL_KEEP) == "true",
            )
        )
    for n in client.api.networks(filters={"label": _label_filter(labels)}):
        lab = n.get("Labels") or {}
        records.append(
            SessionRecord(
                id=lab.get(LABEL_SESSION, n["Id"][:12]),
                provider="docker",
                labels={**lab, "docker.kind": "network", "docker.name": n.get("Name", "?")},
                state="network",
                created_at=n.get("Created"),
                name=n.get("Name", "?"),
                owner_alive=_owner_of(lab),
                kept=lab.get(LABEL_KEEP) == "true",
            )
        )
    return records


def _owner_of(labels: Mapping[str, str]) -> bool | None:
    """Whether the acx process that created an object still runs (None: not this host's)."""
    keys = {"pid": LABEL_PID, "pid_start": LABEL_PID_START, "host": LABEL_HOST}
    return owner_alive({k: labels.get(label, "") for k, label in keys.items()})


def close_objects(
    client: Any | None = None,
    *,
    session_id: str | None = None,
    predicate: Callable[[Mapping[str, str]], bool] | None = None,
) -> list[str]:
    """Remove acx containers, then networks, matching ``session_id`` and/or ``predicate``.

    Returns the names of what was removed.
    """
    client = client or docker_client()
    filt = {LABEL_SESSION: session_id} if session_id is not None else None
    removed: list[str] = []
    for c in client.api.containers(all=True, filters={"label": _label_filter(filt)}):
        lab = c.get("Labels") or {}
        if predicate is not None and not predicate(lab):
            continue
        _remove_container(client, c["Id"])
        removed.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
    for n in client.api.networks(filters={"label": _label_filter(filt)}):
        lab = n.get("Labels") or {}
        if predicate is not None and not predicate(lab):
            continue
        _remove_network(client, n["Id"])
        removed.append(n.get("Name", n["Id"][:12]))
    return removed


def is_orphan(labels: Mapping[str, str], *, include_kept: bool = False, host: str | None = None) -> bool:
    """An object whose creating acx process (same host, pid + start time) no longer runs."""
    if labels.get(LABEL_KEEP) == "true" and not include_kept:
        return False
    if labels.get(LABEL_HOST) != (host or host_name()):
        return False
    pid = labels.get(LABEL_PID, "")
    if not pid.isdigit():
        return False
    return not pid_alive(int(pid), labels.get(LABEL_PID_START))


def sweep_orphans(docker_host: str | None = None, *, include_kept: bool = False) -> list[str]:
    """Remove acx objects left by crashed runs on this host; the names removed (blocking)."""
    client = docker_client(docker_host)
    host = host_name()
    return close_objects(client, predicate=lambda lab: is_orphan(lab, include_kept=include_kept, host=host))
