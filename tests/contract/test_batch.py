"""ScheduleBatch: K cycles in one round trip, each placement counting for the
cycles after it, and the replica's snapshot left as the request found it."""

from __future__ import annotations

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, SchedulingClient, rejected_count, rejected_nodes
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer

PROFILE = "default-scheduler"


def small_cluster() -> ClusterStateLog:
    log = ClusterStateLog()
    for name, cpu in (("a", "2"), ("b", "3"), ("c", "1")):
        log.upsert_node(make_node(name).capacity(cpu=cpu, memory="8Gi").obj())
    log.commit()
    return log


def queue() -> list[cpb.Pod]:
    pods = [make_pod(f"p{i}").req(cpu="1", memory="1Gi").obj() for i in range(6)]
    pods.insert(3, make_pod("huge").req(cpu="8").obj())  # fits nowhere, mid-queue
    return pods


def assume(log: ClusterStateLog, pod: cpb.Pod, node: str) -> None:
    bound = cpb.Pod()
    bound.CopyFrom(pod)
    bound.node_name = node
    log.upsert_pod(bound)


async def test_batch_places_like_serial_cycles_with_assumed_pods(
    default_server: RunningServer,
) -> None:
    pods = queue()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        serial_log = small_cluster()
        serial = SchedulingClient(ch, serial_log)
        serial_nodes = []
        start = 0
        for i, pod in enumerate(pods):
            resp = await serial.schedule(PROFILE, pod, start_index=start, seed=7 + i)
            start = resp.next_start_index
            serial_nodes.append(resp.node)
            if resp.node:
                assume(serial_log, pod, resp.node)
                serial_log.commit()

        batch_log = small_cluster()
        batch = SchedulingClient(ch, batch_log)
        out = await batch.schedule_batch(PROFILE, pods, seed=7)
    batch_nodes = [r.node for r in out.results]
    assert batch_nodes == serial_nodes
    # 6 one-CPU pods fill the 6 CPUs; "huge" fits nowhere and does not stop the batch.
    assert batch_nodes[3] == ""
    assert out.results[3].status.code == pb.CODE_UNSCHEDULABLE
    assert "Insufficient cpu" in out.results[3].diagnosis.message
    assert sorted(n for n in batch_nodes if n) == ["a", "a", "b", "b", "b", "c"]
    assert out.next_start_index == start


async def test_batch_leaves_the_replica_snapshot_as_it_found_it(
    default_server: RunningServer,
) -> None:
    """The pods a batch assumed go when the snapshot is next used: a call
    at the same generation sees the snapshot as the batch found it."""
    log = small_cluster()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, log)
        await client.sync()
        store = default_server.service.store
        snap = store.snapshot_of(log.cluster_id)
        before = {n: ni.requested.milli_cpu for n, ni in snap.nodes.items()}
        out = await client.schedule_batch(PROFILE, queue())
        assert sum(1 for r in out.results if r.node) == 6
        assert store.generation(log.cluster_id) == log.generation
        # The caller's state did not change: the next call finds the snapshot as before.
        await client.sync()
        assert {n: ni.requested.milli_cpu for n, ni in snap.nodes.items()} == before
        assert len(snap.pods) == 0
        # The caller adds the placements as its next delta; the replica follows.
        for pod, res in zip(queue(), out.results, strict=False):
            if res.node:
                assume(log, pod, res.node)
        log.commit()
        await client.sync()
        assert sum(ni.requested.milli_cpu for ni in snap.nodes.values()) == 6000


async def test_assumed_pods_the_next_delta_brings_back_are_kept_not_rebuilt(
    default_server: RunningServer,
) -> None:
    """The caller's next delta carries the batch's placements as it assumed
    them: the replica keeps the pods the batch placed (the same PodInfo
    objects) instead of removing and adding them again, and drops a
    placement the caller did not take (framework/snapshot.py
    Snapshot.remove_later)."""
    log = small_cluster()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, log)
        await client.sync()
        snap = default_server.service.store.snapshot_of(log.cluster_id)
        pods = queue()
        out = await client.schedule_batch(PROFILE, pods)
        placed = [(pod, res.node) for pod, res in zip(pods, out.results, strict=True) if res.node]
        held = {pod.uid: snap.pods[pod.uid] for pod, _ in placed}
        # The caller takes all but the last placement (say its pod was deleted meanwhile).
        for pod, node in placed[:-1]:
            assume(log, pod, node)
        log.commit()
        await client.sync()
        for pod, node in placed[:-1]:
            assert snap.pods[pod.uid] is held[pod.uid]
            assert pod.uid in snap.nodes[node].pods
        dropped, node = placed[-1]
        assert dropped.uid not in snap.pods
        assert dropped.uid not in snap.nodes[node].pods
        assert sum(ni.requested.milli_cpu for ni in snap.nodes.values()) == 5000


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ([cpb.Pod(uid="x", name="a"), cpb.Pod(uid="x", name="b")], "pods[1].uid: 'x' repeats"),
        ([cpb.Pod(uid="x", name="a"), cpb.Pod(name="b")], "pods[1].uid: must not be empty"),
    ],
    ids=["repeated-uid", "missing-uid"],
)
async def test_bad_batches_are_refused_whole(
    default_server: RunningServer, pods: list[cpb.Pod], message: str
) -> None:
    log = small_cluster()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ScheduleBatch(
                pb.ScheduleBatchRequest(profile=PROFILE, state=log.full_state(), pods=pods)
            )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == message


async def test_a_batch_over_the_servers_limit_is_resource_exhausted(
    default_server: RunningServer,
) -> None:
    """berth serve --max-batch-pods bounds how long one call holds the server."""
    default_server.service.max_batch_pods = 4
    log = small_cluster()
    pods = [make_pod(f"p{i}").req(cpu="100m").obj() for i in range(5)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ScheduleBatch(
                pb.ScheduleBatchRequest(profile=PROFILE, state=log.full_state(), pods=pods)
            )
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "5 pods in one batch" in str(err.value.details())
        assert "--max-batch-pods" in str(err.value.details())
        # Four is served, and the server keeps serving.
        ok = await stub.ScheduleBatch(
            pb.ScheduleBatchRequest(profile=PROFILE, state=log.full_state(), pods=pods[:4])
        )
        assert len(ok.results) == 4


async def test_grouped_rejections_carry_what_the_per_node_form_does(
    default_server: RunningServer,
) -> None:
    """ScheduleRequest/ScheduleBatchRequest.group_rejected: the same nodes and
    statuses as Diagnosis.rejected, each status once with its nodes, and
    `rejected` left empty."""
    log = ClusterStateLog()
    for i in range(6):
        node = make_node(f"n{i}").capacity(cpu="1" if i % 2 else "2", memory="8Gi")
        if i == 5:
            node = node.unschedulable(True)
        log.upsert_node(node.obj())
    log.commit()
    pod = make_pod("big").req(cpu="3").obj()  # fits nowhere
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, log)
        plain = await client.schedule(PROFILE, pod)
        grouped = await client.schedule(PROFILE, pod, group_rejected=True)
        batch = await client.schedule_batch(PROFILE, [pod], group_rejected=True)
    per_node = {ns.node: ns.status for ns in plain.diagnosis.rejected}
    assert set(per_node) == {f"n{i}" for i in range(6)}
    for resp in (grouped, batch.results[0]):
        assert resp.diagnosis.message == plain.diagnosis.message
        d = resp.diagnosis
        assert not d.rejected
        assert dict(rejected_nodes(d)) == per_node
        assert rejected_count(d) == 6
        # Two verdicts: Insufficient cpu (n0 to n4), unschedulable (n5).
        assert sorted(sorted(g.nodes) for g in d.rejected_groups) == [
            ["n0", "n1", "n2", "n3", "n4"],
            ["n5"],
        ]
