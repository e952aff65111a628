"""Sandbox start-up: open + ``exec true`` + close, N times, bwrap vs docker in the same run.

Both drivers open the same image (``acx-test/bookworm:latest``; bwrap uses its cached export of
it, made before timing starts) with the same policy, one session at a time, through acx's own
driver API under trio — what an attempt pays before and after its real work. The reason to have
bwrap: a sandbox in well under 100 ms against ~400 ms for a container.

    bash scripts/setup-docker.sh && bash scripts/setup-bwrap.sh
    python bench/sandbox_start.py [--runs 100] [--network no-network|public]

Prints per-driver totals and per-sandbox means/medians, and the ratio docker / bwrap.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

IMAGE = "acx-test/bookworm:latest"


async def _cycle(driver: Any, network: str, label: str) -> float:
    from acx.drivers import OpenRequest
    from acx.ir import EnvironmentSetup, NetworkPolicy

    start = time.perf_counter()
    session = await driver.open(
        OpenRequest(
            session_id=f"bench-{label}-{uuid.uuid4().hex[:8]}",
            labels={"acx.bench": label},
            setup=EnvironmentSetup(image=IMAGE),
            network_policy=NetworkPolicy(network_mode=network),  # type: ignore[arg-type]
        )
    )
    try:
        result = await session.exec(["true"])
        if not result.ok:
            raise SystemExit(f"{driver.id}: `true` failed: {result}")
    finally:
        await session.close()
    return time.perf_counter() - start


async def _series(driver: Any, runs: int, network: str, label: str) -> list[float]:
    await _cycle(driver, network, label)  # warm-up: image lookup / export, page cache
    return [await _cycle(driver, network, label) for _ in range(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--network", choices=["no-network", "public"], default="no-network")
    args = parser.parse_args()

    import trio

    from acx.drivers import create_driver

    label = uuid.uuid4().hex[:8]
    results: dict[str, list[float]] = {}
    for env_id in ("bwrap", "docker"):
        # A bench run as root opts in to bwrap under root (docs/bwrap.md, Identity).
        driver = create_driver(env_id, {"allow_root": True} if env_id == "bwrap" else None)
        results[env_id] = trio.run(_series, driver, args.runs, args.network, label)
    for env_id, times in results.items():
        print(
            f"{env_id:>6}: {args.runs} × open+exec true+close in {sum(times):7.2f} s — "
            f"mean {statistics.mean(times) * 1000:7.1f} ms, median {statistics.median(times) * 1000:7.1f} ms"
        )
    ratio = statistics.mean(results["docker"]) / statistics.mean(results["bwrap"])
    print(f" ratio: docker / bwrap = {ratio:.1f}× (bwrap target: well under 100 ms per sandbox)")


if __name__ == "__main__":
    main()
