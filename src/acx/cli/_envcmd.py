"""``acx env list|close`` and ``acx gc``: see and remove the sandboxes acx created.

Provider-neutral: every registered driver that can discover its own sandboxes
(``Driver.sessions_discoverable``) is asked through ``Driver.list_sessions`` and
``Driver.close_session``; ``--env ID`` narrows to one provider (repeatable) and ``--env-params``
gives that provider's params (e.g. ``{"docker_host": "tcp://…"}``, ``{"workdir_root": "…"}``).
``gc`` removes the sessions whose creating ``acx`` process no longer runs (a crashed or killed
run, ``SessionRecord.owner_alive is False``); ``env close`` removes what you name. Sessions kept on
purpose (``keep_environment``, ``keep_workdir``) survive ``gc`` unless ``--include-kept``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acx.drivers import Driver, SessionRecord

__all__ = ["register"]


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="list or close sandboxes created by acx")
    env_sub = env.add_subparsers(dest="env_command", metavar="ACTION")
    env.set_defaults(handler=lambda args: _usage(env))

    lst = env_sub.add_parser("list", help="list the sandboxes acx created (every provider that can find them)")
    lst.add_argument("--format", choices=("text", "json"), default="text")
    _provider_args(lst)
    lst.set_defaults(handler=_list)

    close = env_sub.add_parser("close", help="remove sandboxes by session id, or all of them")
    which = close.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every sandbox acx created (live runs' included)")
    which.add_argument("--id", metavar="ID", help="a session id (as shown by `acx env list`)")
    _provider_args(close)
    close.set_defaults(handler=_close)

    gc = subparsers.add_parser("gc", help="remove sandboxes left behind by acx runs that are no longer alive")
    gc.add_argument("--include-kept", action="store_true", help="also remove sessions kept on purpose")
    gc.add_argument("--dry-run", action="store_true", help="only show what would be removed")
    _provider_args(gc)
    gc.set_defaults(handler=_gc)


def _provider_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env",
        metavar="ID",
        action="append",
        default=None,
        help="only this environment provider (repeatable; default: every provider that can find its sandboxes)",
    )
    parser.add_argument(
        "--env-params",
        metavar="JSON",
        default=None,
        help="provider params for the one --env given, as a JSON object (see `acx config docs env ID`)",
    )
    parser.add_argument(
        "--cluster",
        metavar="ray[://HOST:PORT]",
        help="the sandboxes on every node of a Ray cluster, through its acx workers (docs/cluster.md)",
    )


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# ---- drivers ------------------------------------------------------------------------------------


def _drivers(args: argparse.Namespace) -> list[tuple[str, Driver, bool]]:
    """``(id, driver, named)`` for each provider to ask; ``named`` when the user chose it."""
    from acx.diagnostics import did_you_mean
    from acx.drivers import DRIVERS, create_driver
    from acx.errors import AcxUserError

    params = _params(args)
    named = args.env is not None
    ids = list(dict.fromkeys(args.env)) if named else list(DRIVERS)
    out: list[tuple[str, Driver, bool]] = []
    for env_id in ids:
        if env_id not in DRIVERS:
            guess = None if ":" in env_id else did_you_mean(env_id, list(DRIVERS))
            raise AcxUserError(
                DRIVERS.why_missing(env_id),
                code="E0301",
                path="--env",
                help=(f"did you mean `{guess}`? " if guess else "") + f"known: {', '.join(DRIVERS)} (acx list env)",
            )
        info = DRIVERS[env_id]
        if not info.load().sessions_discoverable:
            if named:
                raise AcxUserError(
                    f"environment provider `{env_id}` cannot find its sandboxes by itself",
                    code="E0703",
                    path="--env",
                    help="its sessions are closed by the run that opened them (and by `acx run --resume`)",
                )
            continue
        out.append((env_id, _create(env_id, params, create_driver), named))
    if getattr(args, "cluster", None):
        # The same providers, asked on every node of the cluster through its acx workers.
        from acx.cluster import parse_address, remote_driver

        address = parse_address(args.cluster)
        out = [(env_id, remote_driver(address, env_id, params), n) for env_id, _, n in out]
    return out


def _params(args: argparse.Namespace) -> dict[str, Any] | None:
    from acx.errors import AcxUserError

    if args.env_params is None:
        return None
    if args.env is None or len(set(args.env)) != 1:
        raise AcxUserError(
            "--env-params needs exactly one --env ID (the provider they belong to)",
            code="E0204",
            path="--env-params",
            help='e.g. --env docker --env-params \'{"docker_host": "unix:///run/docker.sock"}\'',
        )
    from acx.inputs import data_limit_problem

    try:
        value = json.loads(args.env_params)
    except (ValueError, RecursionError) as exc:
        raise AcxUserError(f"--env-params is not JSON: {exc}", code="E0204", path="--env-params") from None
    problem = data_limit_problem(value)
    if problem is not None:
        raise AcxUserError(f"--env-params: {problem}", code="E0219", path="--env-params")
    if not isinstance(value, dict):
        raise AcxUserError("--env-params must be a JSON object", code="E0204", path="--env-params")
    return value


def _create(env_id: str, params: dict[str, Any] | None, create_driver: Any) -> Driver:
    import msgspec

    from acx.errors import AcxUserError

    try:
        return create_driver(env_id, params)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        raise AcxUserError(
            f"--env-params for `{env_id}`: {exc}",
            code="E0204",
            path="--env-params",
            help=f"see `acx config docs env {env_id}`",
        ) from None


def _reason(exc: BaseException) -> str:
    from acx.errors import AcxError

    return str(exc) if isinstance(exc, AcxError) else f"{type(exc).__name__}: {str(exc)[:200]}"


async def _listed(drivers: list[tuple[str, Driver, bool]]) -> list[tuple[Driver, list[SessionRecord]]]:
    """Each driver's sessions; an unreachable provider is an error when named, else a warning."""
    from acx.errors import AcxUserError

    out = []
    for env_id, driver, named in drivers:
        try:
            records = await driver.list_sessions()
        except Exception as exc:
            if named:
                raise AcxUserError(
                    f"cannot list `{env_id}` sandboxes: {_reason(exc)}",
                    code="E0701",
                    help="make the provider reachable, or point at it with --env-params",
                ) from None
            sys.stderr.write(f"warning: skipped provider `{env_id}`: {_reason(exc)}\n")
            continue
        out.append((driver, records))
    return out


def _unlisted(args: argparse.Namespace, drivers: list[tuple[str, Driver, bool]]) -> list[str]:
    """With --cluster: the nodes the last listing could not ask (their sandboxes were not looked at)."""
    if not getattr(args, "cluster", None):
        return []
    from acx.cluster import unlisted_nodes

    return [
        f"cluster node {node} was not reached ({why}): its `{env_id}` sandboxes were not looked at; "
        "run this again once the node is back"
        for env_id, driver, _ in drivers
        for node, why in sorted(unlisted_nodes(driver).items())
    ]


async def _close_one(driver: Driver, sid: str, failures: list[str], *, gone_is_removed: bool = False) -> bool:
    """Close one session; a failure is reported (and makes the command exit 1), not raised.

    ``gone_is_removed`` (gc): a session listed a moment ago and now not found was removed by
    someone else meanwhile (another acx process's sweep, its own run's release) — removed."""
    try:
        await driver.close_session(sid)
    except Exception as exc:
        if gone_is_removed and getattr(exc, "code", None) == "session_not_found":
            return True
        failures.append(f"could not remove {driver.id} session {sid}: {_reason(exc)}")
        return False
    return True


def _report(failures: list[str]) -> int:
    for line in failures:
        sys.stderr.write(f"error: {line}\n")
    return 1 if failures else 0


def _run(fn: Any) -> Any:
    import trio

    return trio.run(fn)


# ---- commands -----------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    import msgspec

    drivers = _drivers(args)
    listed = _run(lambda: _listed(drivers))
    records = [r for _, recs in listed for r in recs]
    for line in _unlisted(args, drivers):
        sys.stderr.write(f"warning: {line}\n")
    if args.format == "json":
        sys.stdout.write(json.dumps([msgspec.to_builtins(r) for r in records], indent=2) + "\n")
        return 0
    if not records:
        print("no acx environments")
        return 0
    print(f"{'SESSION':<40} {'PROVIDER':<14} {'STATE':<10} {'OWNER':<8} NAME")
    for r in records:
        owner = {True: "running", False: "gone", None: "?"}[r.owner_alive]
        state = "kept" if r.kept and r.state == "active" else r.state
        print(f"{r.id:<40} {r.provider:<14} {state:<10} {owner:<8} {r.name}")
    return 0


def _close(args: argparse.Namespace) -> int:
    from acx.errors import AcxUserError

    drivers = _drivers(args)

    failures: list[str] = []

    async def main() -> list[str]:
        closed: list[str] = []
        for driver, records in await _listed(drivers):
            ids = {r.id for r in records}
            for sid in sorted(ids) if args.all else [args.id] if args.id in ids else []:
                if await _close_one(driver, sid, failures):
                    closed.append(f"{driver.id} session {sid}")
        return closed

    closed = _run(main)
    failures += _unlisted(args, drivers)
    if args.id and not closed and not failures:
        raise AcxUserError(
            f"no acx environment with session id {args.id!r}",
            code="E0702",
            help="see `acx env list` for the ids of live environments",
        )
    for what in closed:
        print(f"removed {what}")
    if not closed and not failures:
        print("nothing to remove")
    return _report(failures)


def _gc(args: argparse.Namespace) -> int:
    drivers = _drivers(args)

    def doomed(r: SessionRecord) -> bool:
        return r.owner_alive is False and (args.include_kept or not r.kept)

    failures: list[str] = []

    async def main() -> list[str]:
        done: list[str] = []
        for driver, records in await _listed(drivers):
            for sid in sorted({r.id for r in records if doomed(r)}):
                if args.dry_run or await _close_one(driver, sid, failures, gone_is_removed=True):
                    done.append(f"{driver.id} session {sid}")
        return done

    done = _run(main)
    for what in done:
        print(f"{'would remove' if args.dry_run else 'removed'} {what}")
    failures += _unlisted(args, drivers)
    if not done and not failures:
        print("nothing to remove")
    return _report(failures)
