"""Several ``berth serve`` replicas behind one caller (issue 8: "any replica, any load
balancing"; issue 13: the shim spreads over the replicas and keeps scheduling when one goes
away).

A scripted caller runs cycle after cycle against 3 real replica processes, endpoint-aware
(one channel per replica, round robin in the client) or through gRPC's own round_robin over
``ipv4:127.0.0.1:a,127.0.0.1:b,127.0.0.1:c``. Mid-run a replica is killed (SIGKILL) and
started again on its port, the caller itself restarts under the same cluster_id (a new
incarnation, and a cluster that changed meanwhile), and finally a replica is killed for good.
Every cycle must answer at the caller's current generation with the placement a single
replica gives for the same script (ScheduleRequest.seed makes tie-breaks deterministic), no
cycle may fail, and full states are counted per replica process, by the client and by the
replicas' own logs.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog, SchedulingClient
from berth.dev.localcluster import Cluster, objects
from berth.dev.localcluster.testing import TEST_LABEL, NodeFactory
from berth.framework.testing import make_node, make_pod
from berth.kube.rest import KubeApi
from tests.integration.shimtools import (
    Server,
    Shim,
    assert_no_overcommit,
    running,
    wait_all_bound,
    wait_for,
    wait_scheduled_events,
    write_config,
)

pytestmark = pytest.mark.integration

PROFILE = "replicas"
CYCLES = 60
# Cycle -> what happens to the replicas (by index) or the caller before it.
KILL = {12: 1, 32: 2, 40: 0}  # SIGKILL
START = {15: 1, 32: 2}  # started again on the same port (32: at once, no cycle in between)
GONE_FOR_GOOD = 0
CALLER_RESTART = 24


def base_cluster(log: ClusterStateLog) -> None:
    for i in range(12):
        cpu = ("2", "4", "8")[i % 3]
        log.upsert_node(
            make_node(f"n{i:02d}")
            .capacity(cpu=cpu, memory="16Gi", pods=110)
            .label("zone", f"z{i % 3}")
            .obj()
        )


def cycle_pod(i: int) -> cpb.Pod:
    cpu = ("250m", "500m", "1", "1500m")[i % 4]
    return make_pod(f"p{i:03d}").uid(f"uid-p{i:03d}").req(cpu=cpu, memory="256Mi").obj()


def change(log: ClusterStateLog, i: int) -> None:
    """What happens in the cluster before cycle ``i``: pods finish, nodes are cordoned
    and come back, so the answers depend on the state being right."""
    if i % 5 == 4 and i >= 5:
        log.delete_pod(f"uid-p{i - 5:03d}")
    if i % 7 == 3:
        name = f"n{i % 12:02d}"
        node = cpb.Node()
        node.CopyFrom(log.nodes[name])
        node.unschedulable = not node.unschedulable
        log.upsert_node(node)


def relisted(old: ClusterStateLog) -> ClusterStateLog:
    """The caller restarted: the same cluster_id, a new incarnation, generations from 1,
    and a cluster that changed while it was down (a node and the two oldest pods gone)."""
    new = ClusterStateLog(old.cluster_id)
    assert new.incarnation != old.incarnation
    for name, node in sorted(old.nodes.items()):
        if name != "n05":
            new.upsert_node(node)
    for _uid, pod in sorted(old.pods.items())[2:]:
        if pod.node_name != "n05":
            new.upsert_pod(pod)
    return new


@dataclass
class Run:
    placements: list[str] = field(default_factory=list)
    # Per caller run: full states the client sent, by replica id.
    full_sends: list[Counter[str]] = field(default_factory=list)
    # Full states sent (both caller runs together) before each cycle.
    fulls_before: list[int] = field(default_factory=list)
    failovers: int = 0


async def drive(
    make_client: Callable[[ClusterStateLog], SchedulingClient],
    events: Callable[[int], Awaitable[None]],
) -> Run:
    """The script, the same for the reference and the replicated runs."""
    run = Run()
    log = ClusterStateLog("replicas-test")
    base_cluster(log)
    client = make_client(log)
    earlier = 0  # full states of the caller's previous run
    for i in range(CYCLES):
        await events(i)
        if i == CALLER_RESTART:
            await client.close()
            run.full_sends.append(client.full_sends_by_replica)
            run.failovers += client.failovers
            earlier = client.full_sends
            log = relisted(log)
            client = make_client(log)
        run.fulls_before.append(earlier + client.full_sends)
        change(log, i)
        log.commit()
        pod = cycle_pod(i)
        schedule = client.schedule_streamed if i % 2 else client.schedule
        resp: pb.ScheduleResponse = await schedule(PROFILE, pod, seed=1000 + i)
        # Answered from the caller's state at this very generation.
        assert resp.generation == log.generation, (i, resp.generation, log.generation)
        run.placements.append(resp.node or f"unschedulable: {resp.status.reasons}")
        if resp.node:
            bound = cpb.Pod()
            bound.CopyFrom(pod)
            bound.node_name = resp.node
            log.upsert_pod(bound)
    await client.close()
    run.full_sends.append(client.full_sends_by_replica)
    run.failovers += client.failovers
    run.fulls_before.append(earlier + client.full_sends)
    return run


# What happens in each stretch of the script, for counting full states per event.
STRETCHES = {
    "caller starts": (0, 12),
    "replica 1 killed, restarted": (12, 24),
    "caller restarts": (24, 32),
    "replica 2 restarted at once": (32, 40),
    "replica 0 killed for good": (40, CYCLES),
}


def full_states_logged(server: Server) -> int:
    return len(re.findall(r"full state at generation", server.text()))


def replica_id(server: Server) -> str:
    found = re.search(r" as replica ([0-9a-f]+)", server.text())
    assert found, server.text()[-2000:]
    return found.group(1)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config.yaml", PROFILE)


def reference_run(config: Path, tmp_path: Path) -> Run:
    ref = Server(config, tmp_path / "reference.log").start()

    async def nothing(_: int) -> None:
        return None

    with running(ref):
        run = asyncio.run(drive(lambda log: SchedulingClient.connect(ref.address, log), nothing))
    # The reference's own count: one full state per caller run.
    assert full_states_logged(ref) == 2
    return run


@pytest.mark.parametrize("mode", ["endpoints", "grpc_round_robin"])
def test_three_replicas_restarted_mid_run_answer_like_one(
    config: Path, tmp_path: Path, mode: str
) -> None:
    reference = reference_run(config, tmp_path)
    assert sum(1 for p in reference.placements if not p.startswith("unschedulable")) > 40

    servers = [Server(config, tmp_path / f"r{k}-0.log").start() for k in range(3)]
    every: list[Server] = list(servers)  # every replica process, restarts included

    async def events(i: int) -> None:
        if i in KILL:
            servers[KILL[i]].kill()
        if i in START:
            k = START[i]
            restarted = Server(config, tmp_path / f"r{k}-{i}.log", port=servers[k].port)
            # Server.start blocks until it listens; the caller waits with it.
            await asyncio.to_thread(restarted.start)
            servers[k] = restarted
            every.append(restarted)
            # Cycles take milliseconds: give the client's backoff for the address (1 s
            # after two failures) and gRPC's reconnect backoff time to pass, so the
            # restarted replica takes part in the cycles that follow.
            await asyncio.sleep(2.0)

    if mode == "endpoints":
        target = ",".join(s.address for s in servers)
    else:
        target = "ipv4:" + ",".join(s.address for s in servers)

    def make_client(log: ClusterStateLog) -> SchedulingClient:
        return SchedulingClient.connect(target, log, timeout=20)

    with running(*every):
        try:
            run = asyncio.run(drive(make_client, events))
        finally:
            for s in every:
                s.stop()
    # Every cycle placed the pod where the single replica did, from the same state.
    assert run.placements == reference.placements
    # No replica process got a full state it did not need. Endpoint-aware: exactly one per
    # replica process per caller run (a restart is a new process: one more).
    logged = [full_states_logged(s) for s in every]
    sent = [sum(c.values()) for c in run.full_sends]
    per_stretch = {
        what: run.fulls_before[end] - run.fulls_before[start]
        for what, (start, end) in STRETCHES.items()
    }
    restarted_ids = {replica_id(s) for s in every[3:]}
    assert all(full_states_logged(s) >= 1 for s in every[3:]), logged  # restarts took part
    if mode == "endpoints":
        # A replica gone for good costs no full state anywhere.
        assert per_stretch["replica 0 killed for good"] == 0, per_stretch
        # Exactly one full state per replica process per caller run: 3 when the caller
        # starts, one per replica restart.
        for per_replica in run.full_sends:
            assert set(per_replica.values()) == {1}, run.full_sends
        assert list(per_stretch.values()) == [3, 1, 3, 1, 0], per_stretch
        assert restarted_ids <= set(run.full_sends[0]) | set(run.full_sends[1])
        assert run.failovers >= 1  # the killed replicas were skipped, not reported
    else:
        # One channel over N = 3 replicas (round robin): at most 2N full states per event
        # (protos/README.md, "Client contract").
        for what, count in per_stretch.items():
            assert count <= 2 * 3, (what, per_stretch)
        # The caller cannot pick the replica, so the full states a restarted replica
        # needs may still be going out after the previous event's stretch ends; a replica
        # gone for good adds none of its own: both stretches together stay in one bound.
        together = (
            per_stretch["replica 2 restarted at once"] + per_stretch["replica 0 killed for good"]
        )
        assert together <= 2 * 3, per_stretch
    assert sum(logged) == sum(sent), (logged, run.full_sends)
    print(f"{mode}: full states {per_stretch}; per replica process {logged}")


def test_shim_over_two_replicas_keeps_binding_when_one_is_killed(
    cluster: Cluster,
    kube: KubeApi,
    namespace: str,
    fake_nodes: NodeFactory,
    tmp_path: Path,
) -> None:
    """``berth shim --plugin-server a,b``: both replicas serve cycles; one is killed
    mid-run and every pod is still bound, exactly once, with no cycle failing."""
    from tests.integration.shimtools import profile_for

    profile = profile_for(namespace)
    config = write_config(tmp_path / "c.yaml", profile)
    # 220 places for the 220 pods: a pod lost or counted twice shows.
    nodes = [n["metadata"]["name"] for n in fake_nodes(10, cpu="8", pods=22)]
    a = Server(config, tmp_path / "a.log").start()
    b = Server(config, tmp_path / "b.log").start()
    shim = Shim(
        config,
        cluster.kubeconfig,
        tmp_path / "shim.log",
        server=f"{a.address},{b.address}",
        # Small batches and a low API rate keep cycles going while a replica dies.
        extra=["--batch-size", "4", "--kube-api-qps", "40", "--kube-api-burst", "10"],
    ).start()

    def pods(prefix: str, n: int) -> list[dict[str, object]]:
        return [
            objects.pod(
                f"{prefix}-{i}",
                namespace=namespace,
                cpu="100m",
                memory="32Mi",
                scheduler_name=profile,
                node_selector={TEST_LABEL: namespace},
            )
            for i in range(n)
        ]

    with running(shim, a, b):
        assert "one channel per replica" in shim.text()
        objects.create_pods(kube, pods("a", 60))
        # Both replicas serve: each got the cluster state in full, once.
        wait_for(
            lambda: full_states_logged(a) >= 1 and full_states_logged(b) >= 1,
            60,
            "both replicas serving",
            shim.log,
        )
        wait_all_bound(kube, namespace, 60, timeout=120)
        objects.create_pods(kube, pods("b", 140))
        b.kill()
        # Pods created after the kill: scheduling is not rate-limited, so the 140 may all
        # have been scheduled before b died; these cycles go on without it for certain, and
        # round robin sends one of them to b.
        objects.create_pods(kube, pods("c", 20))
        wait_all_bound(kube, namespace, 220, timeout=180)
        counts = wait_scheduled_events(kube, namespace, 220, timeout=60)
        assert len(counts) == 220
        assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
        assert_no_overcommit(kube, nodes, filled=0.95)
        for call in ("Schedule", "QueueSort"):
            assert shim.metric("berth_plugin_service_errors_total", call=call) == 0, call
        assert shim.metric("berth_plugin_server_full_states_total", endpoint=a.address) == 1
        assert shim.metric("berth_plugin_server_full_states_total", endpoint=b.address) == 1
        assert shim.metric("berth_plugin_server_failovers_total", endpoint=b.address) >= 1
        assert shim.running
