"""Placement on cluster nodes (issue 18 item 2) and the infrastructure-loss budget: the pure
placer, the dispatcher on a trio MockClock, and whole runs through RemoteDriver on in-process
"nodes" (worker cores in their own trio threads, reached as the Ray actor is), no Ray needed."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.cluster import _protocol as P
from acx.cluster._driver import Dispatcher, RemoteDriver
from acx.cluster._placement import Need, NodeState, Placer, TokenBucket
from acx.cluster._ray import Node, NodeLost
from acx.cluster._worker import TrioThread, WorkerCore
from acx.errors import DriverError, EnvironmentSetupError

HOST = Need("host_process")


# ---- the pure placer -----------------------------------------------------------------------------


def test_most_free_node_first_and_none_when_full() -> None:
    a, b = NodeState("a", 2), NodeState("b", 3)
    placer = Placer([a, b])
    got = []
    for _ in range(5):
        node, at = placer.choose(HOST, 0.0)
        assert node is not None and at == 0.0
        placer.take(node, HOST, 0.0)
        got.append(node.name)
    assert got.count("a") == 2 and got.count("b") == 3
    assert placer.choose(HOST, 0.0) == (None, math.inf)  # back-pressure: wait for a release
    placer.release(a, HOST)
    assert placer.choose(HOST, 0.0)[0] is a


def test_per_node_provider_limit_is_per_node_and_per_provider() -> None:
    a, b = NodeState("a", 8), NodeState("b", 8)
    placer = Placer([a, b], provider_limits={"docker": 1})
    docker = Need("docker")
    for _ in range(2):
        node, _ = placer.choose(docker, 0.0)
        assert node is not None
        placer.take(node, docker, 0.0)
    assert {a.per_provider["docker"], b.per_provider["docker"]} == {1}
    assert placer.choose(docker, 0.0)[0] is None  # one docker sandbox per node
    assert placer.choose(HOST, 0.0)[0] is not None  # other providers still fit


def test_labels_decide_where_a_need_may_go() -> None:
    # a node declaring drivers serves only those; one whose prepare failed serves none of that
    # provider; a node that declares none serves any
    only_docker = NodeState("w1", 4, drivers=frozenset({"docker"}))
    broken = NodeState("w2", 4, refused={"host_process": "no /tmp"})
    anything = NodeState("w3", 4)
    placer = Placer([only_docker, broken, anything])
    assert placer.choose(HOST, 0.0)[0] is anything
    assert placer.choose(Need("docker"), 0.0)[0] is not None
    assert placer.unmet(HOST) is None
    anything.alive = False
    msg = placer.unmet(HOST)
    assert msg is not None
    assert "driver host_process" in msg and "w1: serves only docker" in msg
    assert "w2: host_process unusable there: no /tmp" in msg and "w3: lost" in msg
    img = NodeState("w4", 4, images={("docker", "busybox"): False})
    assert img.why_not(Need("docker", "busybox")) == "image busybox not present"


def test_token_bucket_spaces_takes() -> None:
    b = TokenBucket(2.0)  # 2 per second, burst 1
    assert b.ready_at(10.0) == 10.0
    b.take(10.0)
    assert b.ready_at(10.0) == pytest.approx(10.5)
    assert b.ready_at(10.25) == pytest.approx(10.5)
    assert b.ready_at(11.0) == 11.0
    assert TokenBucket(0).ready_at(3.0) == 3.0  # 0: unlimited


def test_open_rate_is_per_node() -> None:
    a, b = NodeState("a", 8), NodeState("b", 8)
    placer = Placer([a, b], open_qps={"host_process": 1.0})
    first, _ = placer.choose(HOST, 0.0)
    assert first is not None
    placer.take(first, HOST, 0.0)
    second, _ = placer.choose(HOST, 0.0)
    assert second is not None and second is not first  # the other node's token is still there
    placer.take(second, HOST, 0.0)
    assert placer.choose(HOST, 0.0) == (None, pytest.approx(1.0))  # next token, on either node


@settings(max_examples=200, deadline=None)
@given(
    slots=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    limit=st.integers(0, 3),
    ops=st.lists(st.tuples(st.booleans(), st.sampled_from(["docker", "host_process"])), max_size=60),
)
def test_no_node_ever_exceeds_its_capacity_or_limits(slots: list[int], limit: int, ops: list[Any]) -> None:
    nodes = [NodeState(f"n{i}", s) for i, s in enumerate(slots)]
    placer = Placer(nodes, provider_limits={"docker": limit})
    held: list[tuple[NodeState, Need]] = []
    for take, provider in ops:
        need = Need(provider)
        if take:
            node, _ = placer.choose(need, 0.0)
            if node is None:
                # refused only when nothing fits
                assert all(
                    n.used >= n.slots or (provider == "docker" and limit and n.per_provider.get("docker", 0) >= limit)
                    for n in nodes
                )
                continue
            placer.take(node, need, 0.0)
            held.append((node, need))
        elif held:
            placer.release(*held.pop(0))
        for n in nodes:
            assert n.used <= n.slots
            assert not limit or n.per_provider.get("docker", 0) <= limit


# ---- the dispatcher (trio, MockClock) ------------------------------------------------------------


def _nodes(*names: str, slots: int = 8) -> list[Node]:
    return [Node(f"id-{n}", n, "127.0.0.1", slots, {}) for n in names]


def test_per_node_open_rate_on_a_mock_clock() -> None:
    # runtime.cluster.env_open_qps: 1 open per second per node → 2 nodes open 2 per second
    disp = Dispatcher(_nodes("a", "b"))
    disp.placer.configure({}, {"host_process": 1.0})
    placed: list[tuple[float, str]] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(6):

                async def one() -> None:
                    node = await disp.place(HOST)
                    placed.append((trio.current_time(), node.name))

                nursery.start_soon(one)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    times = sorted(round(t, 6) for t, _ in placed)
    assert times == [0, 0, 1, 1, 2, 2]
    for second in (0, 1, 2):
        assert sorted(n for t, n in placed if round(t) == second) == ["a", "b"]


def test_back_pressure_never_queues_on_a_node() -> None:
    # every node full: place() waits for a release instead of handing out a node
    disp = Dispatcher(_nodes("a", slots=1))
    order: list[str] = []

    async def main() -> None:
        first = await disp.place(HOST)
        async with trio.open_nursery() as nursery:

            async def second() -> None:
                await disp.place(HOST)
                order.append("second placed")

            nursery.start_soon(second)
            await trio.sleep(5)
            assert disp.states["id-a"].used == 1
            order.append("release")
            await disp.release(first, HOST)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert order == ["release", "second placed"]


def test_a_need_no_live_node_meets_fails_the_open() -> None:
    nodes = _nodes("a")
    disp = Dispatcher(nodes)
    nodes[0].alive = False

    async def main() -> None:
        with pytest.raises(DriverError) as exc:
            await disp.place(HOST)
        assert exc.value.code == "no_node_for_need" and "a: lost" in str(exc.value)

    trio.run(main)


# ---- whole runs through RemoteDriver on in-process nodes ----------------------------------------


class Nodes:
    """Several in-process "nodes" (a worker core each). ``die_on_exec``: that node dies when it
    receives its first command (the worker is gone: every call to it fails as a lost node)."""

    def __init__(
        self,
        labels: dict[str, dict[str, float]],
        die_on_exec: str | None = None,
        images: dict[str, set[str]] | None = None,
        die_on: type = P.Exec,
    ) -> None:
        self.address = "in-process"
        self.nodes = [Node(f"id-{n}", n, "127.0.0.1", 4, dict(lab)) for n, lab in labels.items()]
        self.cores = {n: WorkerCore(n) for n in labels}
        self.thread = TrioThread()
        self.die_on_exec = die_on_exec
        self.die_on = die_on
        self.dispatcher: Any = None
        self.opened: dict[str, int] = {}
        #: node → the images its provider has (stands in for a node's Docker engine); None: any
        self.images = images
        self.asked: list[tuple[str, list[str]]] = []

    async def connect(self) -> list[Node]:
        return self.nodes

    async def send(self, node: Node, data: bytes, on_late: Any) -> bytes:
        call = P.decode_call(data)
        if node.name == self.die_on_exec and isinstance(call.op, self.die_on):
            node.alive = False
        if not node.alive:
            raise NodeLost(node.name)
        if isinstance(call.op, P.Open):
            self.opened[node.name] = self.opened.get(node.name, 0) + 1
        if isinstance(call.op, P.MissingImages) and self.images is not None:
            self.asked.append((node.name, list(call.op.images)))
            missing = [i for i in call.op.images if i not in self.images[node.name]]
            return P.encode(P.Reply(key=call.key, node=node.name, value=missing))
        core = self.cores[node.name]
        return await trio.to_thread.run_sync(self.thread.call, core.handle, data, abandon_on_cancel=True)  # type: ignore[no-any-return]

    def send_nowait(self, node: Node, data: bytes) -> None:
        threading.Thread(target=self.thread.call, args=(self.cores[node.name].handle, data), daemon=True).start()


def _spec(root: Path, n: int, max_retries: int, command: str = "echo 1", setup: str = "") -> Path:
    (root / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i}", "question": "1?", "answer": "1"}) + "\n" for i in range(n))
    )
    spec = root / "spec.yaml"
    spec.write_text(
        f"""version: 1
name: pl
task_concurrency: 8
runtime: {{progress: none, results_dir: {json.dumps(str(root / "r"))}}}
requests:
  - name: pl
    benchmark: {{id: exact_match, dataset: data.jsonl}}
    harness: {{id: command, command: {json.dumps(command)}, prompt_file: null}}
    environment: {{id: host_process, evaluation_environment_mode: none{setup}}}
    execution: {{max_retries: {max_retries}, retry_min_delay_seconds: 0, retry_max_delay_seconds: 0}}
"""
    )
    return spec


def _run(spec: Path, cluster: Nodes, **driver_options: Any) -> dict[str, dict[str, Any]]:
    from acx.api import build_programs, run_programs

    orch, programs = build_programs(str(spec))
    for p in programs:
        p.driver = RemoteDriver(cluster, "host_process", **driver_options)  # type: ignore[arg-type]
    trio.run(lambda: run_programs(orch, programs))
    out = {}
    for path in (spec.parent / "r").glob("pl/*/details/*/*/attempt-1/result.json"):
        d = json.loads(path.read_text())
        out[d["task_id"]] = d
    return out


def _retry_records(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (root / "r").glob("pl/*/details/*/*/attempt-1/retries/*.json")]


# issue 18 item 2: a sandbox needing a driver only one node serves lands there (labels).
def test_a_driver_only_one_node_serves_lands_there(tmp_path: Path) -> None:
    cluster = Nodes({"w1": {"acx_driver_docker": 1}, "w2": {"acx_driver_host_process": 1}})
    results = _run(_spec(tmp_path, 6, 0), cluster)
    assert len(results) == 6 and all(r["status"] == "completed" for r in results.values()), [
        r["issues"] for r in results.values()
    ]
    assert cluster.opened == {"w2": 6}


# issue 18 item 2: a need no node meets is refused before anything runs, naming it and the nodes.
def test_a_need_no_node_meets_is_refused_at_start() -> None:
    cluster = Nodes({"w1": {"acx_driver_docker": 1}, "w2": {"acx_driver_bwrap": 1}})
    driver = RemoteDriver(cluster, "host_process")  # type: ignore[arg-type]
    with pytest.raises(EnvironmentSetupError) as exc:
        trio.run(driver.prepare)
    msg = str(exc.value)
    assert "driver host_process" in msg and "w1: serves only docker" in msg and "w2: serves only bwrap" in msg
    assert not cluster.opened


# issue 18 item 2: a node lost mid-attempt re-runs the attempt elsewhere without consuming
# max_retries (0 here), within runtime.cluster.max_node_losses.
def test_node_loss_has_its_own_retry_budget(tmp_path: Path) -> None:
    cluster = Nodes({"w1": {}, "w2": {}}, die_on_exec="w1")
    results = _run(_spec(tmp_path, 6, max_retries=0), cluster, max_node_losses=1)
    assert sorted(results) == [f"t{i}" for i in range(6)]
    assert all(r["status"] == "completed" and r["metrics"]["correct"] is True for r in results.values())
    assert all(r["retry_count"] == 0 for r in results.values())  # max_retries untouched
    lost = [r for r in results.values() if r["telemetry"].get("infrastructure_losses")]
    assert lost and all(r["telemetry"]["infrastructure_losses"] == 1 for r in lost)
    records = _retry_records(tmp_path)
    assert len(records) == len(lost) and all(r["scope"] == "infrastructure" for r in records)
    assert all("node_lost" in r["reason"] and "(1/1)" in r["reason"] for r in records)


# issue 18 item 3: a node lost while the attempt switches its sandbox's network policy is a lost
# node like any other (node_lost, re-run elsewhere), never the task's network_policy_failed.
def test_node_lost_at_a_network_policy_switch_is_node_lost(tmp_path: Path) -> None:
    cluster = Nodes({"w1": {}, "w2": {}}, die_on_exec="w1", die_on=P.SetPolicy)
    spec = _spec(tmp_path, 6, max_retries=0, setup=", run_network_policy: no-network")
    results = _run(spec, cluster, max_node_losses=1)
    assert sorted(results) == [f"t{i}" for i in range(6)]
    assert all(r["status"] == "completed" for r in results.values()), [r["issues"] for r in results.values()]
    records = _retry_records(tmp_path)
    assert records and len(records) == cluster.opened["w1"]
    codes = [i["code"] for r in records for i in r["issues"]]
    assert "node_lost" in codes and "network_policy_failed" not in codes, codes


# issue 18 item 2: one loss more than runtime.cluster.max_node_losses fails the attempt with its
# own issue, and still never spends max_retries on it.
def test_node_losses_beyond_the_budget_fail_the_attempt_clearly(tmp_path: Path) -> None:
    cluster = Nodes({"w1": {}, "w2": {}}, die_on_exec="w1")
    results = _run(_spec(tmp_path, 6, max_retries=3), cluster, max_node_losses=0)
    failed = [r for r in results.values() if r["status"] != "completed"]
    assert failed and len(failed) == cluster.opened["w1"]
    for r in failed:
        codes = [i["code"] for i in r["issues"]]
        assert "infrastructure_losses_exhausted" in codes and "node_lost" in codes, codes
        assert r["retry_count"] == 0
    assert not _retry_records(tmp_path)


# issue 18 item 2: an image is a need too. A sandbox whose image a node's provider lacks (and would
# not pull) never goes there; each node is asked once per image.
def test_an_image_need_goes_only_to_nodes_that_have_it() -> None:
    from acx.drivers import OpenRequest
    from acx.ir import EnvironmentSetup

    cluster = Nodes({"w1": {}, "w2": {}}, images={"w1": set(), "w2": {"img:1"}})
    driver = RemoteDriver(cluster, "host_process")  # type: ignore[arg-type]

    async def main() -> None:
        await driver.prepare()
        sessions = []
        for i in range(4):
            req = OpenRequest(session_id=f"img-{i}", setup=EnvironmentSetup(image="img:1"))
            sessions.append(await driver.open(req))
        assert {s.node.name for s in sessions} == {"w2"}
        plain = await driver.open(OpenRequest(session_id="plain"))  # no image: the freer node
        assert plain.node.name == "w1"
        for s in [*sessions, plain]:
            await s.close()
        with pytest.raises(DriverError) as exc:
            await driver.open(OpenRequest(session_id="img-x", setup=EnvironmentSetup(image="img:2")))
        assert exc.value.code == "no_node_for_need" and "image img:2 not present" in str(exc.value)

    trio.run(main)
    assert sorted(cluster.asked) == [("w1", ["img:1"]), ("w1", ["img:2"]), ("w2", ["img:1"]), ("w2", ["img:2"])]


def test_a_plan_image_no_node_has_is_refused_at_start() -> None:
    cluster = Nodes({"w1": {}, "w2": {}}, images={"w1": {"a"}, "w2": set()})
    driver = RemoteDriver(cluster, "host_process", images=["b"])  # type: ignore[arg-type]
    with pytest.raises(EnvironmentSetupError) as exc:
        trio.run(driver.prepare)
    msg = str(exc.value)
    assert "need driver host_process with image b" in msg
    assert "w1: image b not present" in msg and "w2: image b not present" in msg
    assert not cluster.opened


# issue 18 item 2: a node's capacity is shared by every request of the run (every driver on the
# cluster), not counted per request.
def test_node_capacity_is_shared_by_every_driver_on_the_cluster() -> None:
    from acx.drivers import OpenRequest

    cluster = Nodes({"w1": {}})
    cluster.nodes[0].slots = 1
    one = RemoteDriver(cluster, "host_process")  # type: ignore[arg-type]
    other = RemoteDriver(cluster, "host_process", {"keep_workdir": False})  # type: ignore[arg-type]

    async def main() -> None:
        await one.prepare()
        await other.prepare()
        first = await one.open(OpenRequest(session_id="share-1"))
        with trio.move_on_after(0.3) as waited:
            await other.open(OpenRequest(session_id="share-2"))
        assert waited.cancelled_caught  # the other request waits for the node's one slot
        await first.close()
        second = await other.open(OpenRequest(session_id="share-3"))
        assert second.node.name == "w1"
        await second.close()

    trio.run(main)


# issue 18 item 2: waiting for a node's free slot (back-pressure) is not part of the environment's
# setup deadline (build_timeout_seconds), as the run-wide provider limits' queue is not.
def test_waiting_for_a_node_slot_is_not_part_of_the_setup_deadline(tmp_path: Path) -> None:
    cluster = Nodes({"w1": {}})
    cluster.nodes[0].slots = 1
    spec = _spec(tmp_path, 3, 0, command="sleep 1; echo 1", setup=", setup: {build_timeout_seconds: 0.5}")
    results = _run(spec, cluster)
    assert len(results) == 3
    assert all(r["status"] == "completed" for r in results.values()), [r["issues"] for r in results.values()]
    assert cluster.opened == {"w1": 3}
