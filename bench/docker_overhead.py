"""acx docker-driver overhead vs a bare docker-SDK script (same engine, same run).

Each "task" does what an evaluation attempt does to a sandbox: create + start a container, run one
command, copy a file in, copy it back out, remove the container. acx runs the tasks through its
driver under trio (CapacityLimiter-bounded worker threads, exec wrapper, process-group kill
bookkeeping, labels, safe archive extraction); the baseline runs the same SDK calls from a plain
thread pool. Both use the same image, network mode and concurrency.

    bash scripts/setup-docker.sh
    python bench/docker_overhead.py [--tasks 50] [--concurrency 8] [--network no-network|public]

Prints both wall times and the ratio (target ≤ 1.15×).
"""

from __future__ import annotations

import argparse
import io
import tarfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

PAYLOAD = b"x" * 4096
IMAGE = "acx-test/busybox:latest"


def bare_task(client: object, network: str, label: str) -> None:
    import docker

    assert isinstance(client, docker.DockerClient)
    api = client.api
    name = f"bench-bare-{uuid.uuid4().hex[:10]}"
    net = None
    if network == "public":
        net = name
        api.create_network(net, driver="bridge", labels={"acx.bench": label})
    host_config = api.create_host_config(network_mode=net or "none", init=True)
    cid = api.create_container(
        IMAGE,
        command=["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"],
        name=name,
        labels={"acx.bench": label},
        host_config=host_config,
        detach=True,
    )["Id"]
    try:
        api.start(cid)
        exec_id = api.exec_create(cid, ["sh", "-c", "echo hello"], stdout=True, stderr=True)["Id"]
        for _ in api.exec_start(exec_id, stream=True, demux=True):
            pass
        api.exec_inspect(exec_id)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("tmp/payload.bin")
            info.size = len(PAYLOAD)
            tar.addfile(info, io.BytesIO(PAYLOAD))
        api.put_archive(cid, "/", buf.getvalue())
        stream, _ = api.get_archive(cid, "/tmp/payload.bin")
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None and member.read() == PAYLOAD
    finally:
        api.remove_container(cid, force=True, v=True)
        if net:
            api.remove_network(net)


def run_bare(tasks: int, concurrency: int, network: str, label: str) -> float:
    from acx.drivers.docker import docker_client

    client = docker_client()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(lambda _: bare_task(client, network, label), range(tasks)))
    return time.perf_counter() - start


def run_acx(tasks: int, concurrency: int, network: str, label: str) -> float:
    import trio

    from acx.drivers._base import OpenRequest
    from acx.drivers.docker import DockerDriver
    from acx.ir import EnvironmentSetup, NetworkPolicy

    driver = DockerDriver()

    async def one(limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            session = await driver.open(
                OpenRequest(
                    session_id=f"bench-{uuid.uuid4().hex[:10]}",
                    labels={"acx.bench": label},
                    setup=EnvironmentSetup(image=IMAGE, workdir="/"),
                    network_policy=NetworkPolicy(network_mode=network),  # type: ignore[arg-type]
                )
            )
            async with session:
                res = await session.exec(["sh", "-c", "echo hello"])
                assert res.ok
                await session.write_bytes("/tmp/payload.bin", PAYLOAD)
                assert await session.read_bytes("/tmp/payload.bin") == PAYLOAD

    async def main() -> None:
        limiter = trio.CapacityLimiter(concurrency)
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(one, limiter)

    start = time.perf_counter()
    trio.run(main)
    return time.perf_counter() - start


def cleanup(label: str) -> None:
    from acx.drivers.docker import docker_client

    api = docker_client().api
    for c in api.containers(all=True, filters={"label": f"acx.bench={label}"}):
        api.remove_container(c["Id"], force=True)
    for n in api.networks(filters={"label": f"acx.bench={label}"}):
        api.remove_network(n["Id"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--network", choices=("no-network", "public"), default="no-network")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of each is kept")
    args = parser.parse_args()
    label = uuid.uuid4().hex[:8]
    bare_times: list[float] = []
    acx_times: list[float] = []
    try:
        run_bare(4, 4, args.network, label)  # warm the engine and the client pool
        for i in range(args.rounds):
            # Alternate who goes first: the engine is slower right after a burst of removals.
            if i % 2 == 0:
                bare_times.append(run_bare(args.tasks, args.concurrency, args.network, label))
                acx_times.append(run_acx(args.tasks, args.concurrency, args.network, label))
            else:
                acx_times.append(run_acx(args.tasks, args.concurrency, args.network, label))
                bare_times.append(run_bare(args.tasks, args.concurrency, args.network, label))
    finally:
        cleanup(label)
    bare, acx = min(bare_times), min(acx_times)
    print(f"tasks={args.tasks} concurrency={args.concurrency} network={args.network} image={IMAGE}")
    print(f"bare docker SDK : {bare:7.2f} s  ({args.tasks / bare:6.1f} tasks/s)")
    print(f"acx driver      : {acx:7.2f} s  ({args.tasks / acx:6.1f} tasks/s)")
    ratio = acx / bare
    print(f"ratio acx/bare  : {ratio:7.3f}x  (target <= 1.15x) {'OK' if ratio <= 1.15 else 'OVER TARGET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
