"""``acx env list|close`` and ``acx gc``: see and remove the sandboxes acx created.

Docker objects carry ``acx.*`` labels (session, run, task, attempt, creating pid and host). ``gc``
removes containers and networks whose creating ``acx`` process no longer runs on this host (a
crashed or killed run); ``env close`` removes what you name. Sessions labelled ``acx.keep=true``
(kept with ``keep_environment``) survive ``gc`` unless ``--include-kept`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="list or close sandboxes created by acx")
    env_sub = env.add_subparsers(dest="env_command", metavar="ACTION")
    env.set_defaults(handler=lambda args: _usage(env))

    lst = env_sub.add_parser("list", help="list acx-labelled containers and networks")
    lst.add_argument("--format", choices=("text", "json"), default="text")
    lst.add_argument("--docker-host", default=None, help="engine URL (default: DOCKER_HOST or local socket)")
    lst.set_defaults(handler=_list)

    close = env_sub.add_parser("close", help="remove sandboxes by session id, or all of them")
    which = close.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every acx-labelled container and network")
    which.add_argument("--id", metavar="ID", help="a session id (as shown by `acx env list`)")
    close.add_argument("--docker-host", default=None)
    close.set_defaults(handler=_close)

    gc = subparsers.add_parser("gc", help="remove sandboxes left behind by acx runs that are no longer alive")
    gc.add_argument("--include-kept", action="store_true", help="also remove sessions kept on purpose")
    gc.add_argument("--dry-run", action="store_true", help="only show what would be removed")
    gc.add_argument("--docker-host", default=None)
    gc.set_defaults(handler=_gc)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _client(args: argparse.Namespace) -> Any:
    from acx.drivers.docker import docker_client
    from acx.errors import AcxUserError, EnvironmentSetupError

    try:
        client = docker_client(args.docker_host)
        client.ping()
    except EnvironmentSetupError as exc:
        raise AcxUserError(str(exc), code="E0701", help="start the engine: bash scripts/setup-docker.sh") from None
    except Exception as exc:
        raise AcxUserError(
            f"the Docker engine does not answer ({type(exc).__name__})",
            code="E0701",
            help="start the engine (bash scripts/setup-docker.sh) or pass --docker-host",
        ) from None
    return client


def _list(args: argparse.Namespace) -> int:
    from acx.drivers.docker import list_objects

    records = list_objects(_client(args))
    if args.format == "json":
        import msgspec

        sys.stdout.write(json.dumps([msgspec.to_builtins(r) for r in records], indent=2) + "\n")
        return 0
    if not records:
        print("no acx environments")
        return 0
    print(f"{'SESSION':<40} {'KIND':<10} {'STATE':<10} {'RUN':<24} {'PID':<8} NAME")
    for r in records:
        lab = r.labels
        print(
            f"{r.id:<40} {lab.get('docker.kind', '?'):<10} {r.state:<10} "
            f"{lab.get('acx.run_id', '-'):<24} {lab.get('acx.pid', '-'):<8} {lab.get('docker.name', '')}"
        )
    return 0


def _close(args: argparse.Namespace) -> int:
    from acx.drivers.docker import close_objects
    from acx.errors import AcxUserError

    client = _client(args)
    removed = close_objects(client) if args.all else close_objects(client, session_id=args.id)
    if args.id and not removed:
        raise AcxUserError(
            f"no acx environment with session id {args.id!r}",
            code="E0702",
            help="see `acx env list` for the ids of live environments",
        )
    for name in removed:
        print(f"removed {name}")
    if not removed:
        print("nothing to remove")
    return 0


def _gc(args: argparse.Namespace) -> int:
    from acx.drivers.docker import close_objects, is_orphan, list_objects

    client = _client(args)
    if args.dry_run:
        doomed = [r for r in list_objects(client) if is_orphan(r.labels, include_kept=args.include_kept)]
        for r in doomed:
            print(f"would remove {r.labels.get('docker.name', r.id)} (session {r.id})")
        if not doomed:
            print("nothing to remove")
        return 0
    removed = close_objects(client, predicate=lambda lab: is_orphan(lab, include_kept=args.include_kept))
    for name in removed:
        print(f"removed {name}")
    if not removed:
        print("nothing to remove")
    return 0
