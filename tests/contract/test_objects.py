"""Data beyond nodes and pods over real gRPC (protos/README.md, "Data beyond
nodes and pods"): DescribeProfiles lists what a profile's plugins read, objects
ride in the cluster state's deltas, and what plugins ask of the caller comes
back as data: Reserve's assume_annotations (also on the pod ScheduleBatch
assumes for later pods), PreBind/PostBind writes, Unreserve signals, and a
QueueSort that reads objects gets the state."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework import (
    CycleState,
    FilterPlugin,
    NodeInfo,
    ObjectKind,
    ObjectWrite,
    PodInfo,
    PostBindPlugin,
    PreBindPlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    SortKey,
    Status,
    pod_write,
)
from berth.framework.config import parse_config
from berth.framework.testing import make_node, make_object, make_pod, object_ref
from berth.plugins.registry import REGISTRY as DEFAULT_REGISTRY
from berth.server.app import RunningServer, start_server

PROFILE = "objects"
GATES = ObjectKind("test.berth.dev", "v1", "gates", "Gate")
PRIORITIES = ObjectKind("test.berth.dev", "v1", "priorities", "Priority", False, poll_seconds=5)
CARD = "test.berth.dev/card"


class GateFilter(FilterPlugin):
    """Rejects every node unless the Gate named by the pod's label ``gate``
    has spec.open true."""

    name = "TestGateFilter"

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (GATES,)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        gate = self.handle.snapshot.object(
            GATES.group, GATES.resource, pod.namespace, pod.labels.get("gate", "")
        )
        if gate is None or not gate.data.get("spec", {}).get("open"):
            return Status.unresolvable("gate closed")
        return Status.success()


class CardReserve(ReservePlugin, PreBindPlugin, PostBindPlugin):
    """Takes card number <assumed pods on the node that hold a card> (a card
    annotation counts on the caller's assumed copies only); writes it
    on the pod at PreBind and records the node on an owner at PostBind; its
    Unreserve rejects the pod named in the pod's label ``reject``. A pod labelled
    ``no-card`` fails Reserve."""

    name = "TestCardReserve"

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        taken = sum(
            1
            for p in self.handle.snapshot.nodes[node_name].pods.values()
            if CARD in p.proto.annotations and p.proto.assumed
        )
        state.annotate_assumed_pod(CARD, str(taken))
        if "no-card" in pod.labels:
            return Status.unschedulable("no free card")
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        if "reject" in pod.labels:
            state.signal_waiting_pod(pod.labels["reject"], False, "gang member failed")
        # Undoes PreBind's write (a merge patch's null removes the key).
        state.add_write(
            pod_write(pod.namespace, pod.name, {"metadata": {"annotations": {CARD: None}}})
        )

    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        card = pod.proto.annotations.get(CARD, "?")
        state.add_write(
            pod_write(pod.namespace, pod.name, {"metadata": {"annotations": {CARD: card}}})
        )
        return Status.success()

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        state.add_write(
            ObjectWrite(
                GATES.group,
                GATES.version,
                GATES.resource,
                pod.namespace,
                "owner",
                {"status": {"node": node_name}},
                subresource="status",
            )
        )


class ObjectSort(QueueSortPlugin):
    """Orders pods by the cluster-scoped Priority object named by their label
    ``prio`` (value in spec.value, highest first)."""

    name = "TestObjectSort"

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (PRIORITIES,)

    def sort_key(self, pod: QueuedPodInfo) -> SortKey:
        obj = self.handle.snapshot.object(
            PRIORITIES.group, PRIORITIES.resource, "", pod.pod.labels.get("prio", "")
        )
        value = int(obj.data["spec"]["value"]) if obj is not None else 0
        return (-value, pod.enqueued_unix_micros)


REGISTRY = {
    **DEFAULT_REGISTRY,
    GateFilter.name: GateFilter,
    CardReserve.name: CardReserve,
    ObjectSort.name: ObjectSort,
}


@pytest.fixture
async def stub() -> AsyncIterator[pb_grpc.SchedulingServiceStub]:
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": PROFILE,
                    "plugins": {
                        "queueSort": {
                            "enabled": [{"name": ObjectSort.name}],
                            "disabled": [{"name": "*"}],
                        },
                        "filter": {"enabled": [{"name": GateFilter.name}]},
                        "reserve": {"enabled": [{"name": CardReserve.name}]},
                        "preBind": {"enabled": [{"name": CardReserve.name}]},
                        "postBind": {"enabled": [{"name": CardReserve.name}]},
                    },
                }
            ],
        },
        "test_objects",
        REGISTRY,
    )
    running: RunningServer = await start_server(config, REGISTRY, "127.0.0.1:0", trace=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            yield pb_grpc.SchedulingServiceStub(ch)
    finally:
        await running.stop(0)


def cluster(gate_open: bool) -> ClusterStateLog:
    log = ClusterStateLog()
    log.upsert_node(make_node("n1").capacity(cpu="8", memory="8Gi").obj())
    log.upsert_object(make_object(GATES, "g", spec={"open": gate_open}))
    log.upsert_object(make_object(PRIORITIES, "high", spec={"value": 100}))
    log.upsert_object(make_object(PRIORITIES, "low", spec={"value": 1}))
    log.commit()
    return log


async def test_describe_profiles_lists_reads_with_their_plugins(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    resp = await stub.DescribeProfiles(pb.DescribeProfilesRequest())
    (prof,) = resp.profiles
    # The default plugins read other kinds too (InterPodAffinity namespaces, ...).
    tested = {GateFilter.name, ObjectSort.name}
    reads = {r.resource: r for r in prof.reads if tested & set(r.plugins)}
    assert set(reads) == {"gates", "priorities"}
    gates = reads["gates"]
    assert (gates.group, gates.version, gates.kind, gates.namespaced, gates.poll_seconds) == (
        "test.berth.dev",
        "v1",
        "Gate",
        True,
        0,
    )
    assert list(gates.plugins) == [GateFilter.name]
    prio = reads["priorities"]
    assert (prio.namespaced, prio.poll_seconds, list(prio.plugins)) == (
        False,
        5,
        [ObjectSort.name],
    )


async def test_filter_sees_objects_and_their_changes(stub: pb_grpc.SchedulingServiceStub) -> None:
    log = cluster(gate_open=False)
    client = SchedulingClient(None, log, stub=stub)
    pod = make_pod("p").label("gate", "g").obj()
    closed = await client.schedule(PROFILE, pod)
    assert closed.status.code == pb.CODE_UNSCHEDULABLE
    assert "gate closed" in closed.diagnosis.message
    sync = await client.sync()
    assert sync.object_count == 3

    log.upsert_object(make_object(GATES, "g", spec={"open": True}))
    log.commit()
    opened = await client.schedule(PROFILE, pod)
    assert opened.node == "n1"

    log.delete_object(object_ref(GATES, "g"))
    log.commit()
    gone = await client.schedule(PROFILE, pod)
    assert gone.status.code == pb.CODE_UNSCHEDULABLE
    assert (await client.sync()).object_count == 2


async def test_reserve_annotations_writes_and_signals_come_back(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    log = cluster(gate_open=True)
    client = SchedulingClient(None, log, stub=stub)
    pod = make_pod("p").label("gate", "g").label("reject", "waiting-uid").obj()

    def node_request(st: cpb.ClusterState, p: cpb.Pod = pod) -> pb.NodeRequest:
        return pb.NodeRequest(profile=PROFILE, state=st, pod=p, node="n1")

    reserve: pb.StatusResponse = await client.call(stub.Reserve, node_request)
    assert reserve.status.code == pb.CODE_SUCCESS
    assert dict(reserve.assume_annotations) == {CARD: "0"}

    # The caller puts the annotation on its assumed pod; PreBind sees it there.
    assumed = cpb.Pod()
    assumed.CopyFrom(pod)
    assumed.node_name = "n1"
    assumed.annotations.update(reserve.assume_annotations)
    log.upsert_pod(assumed)
    log.commit()
    pre_bind: pb.StatusResponse = await client.call(
        stub.PreBind, lambda st: node_request(st, assumed)
    )
    assert pre_bind.status.code == pb.CODE_SUCCESS
    (write,) = pre_bind.writes
    assert (write.ref.group, write.ref.resource, write.ref.namespace, write.ref.name) == (
        "",
        "pods",
        "default",
        "p",
    )
    assert (write.version, write.subresource, write.plugin) == ("v1", "", CardReserve.name)
    assert json.loads(write.merge_patch) == {"metadata": {"annotations": {CARD: "0"}}}

    post_bind: pb.StatusResponse = await client.call(stub.PostBind, node_request)
    (owner,) = post_bind.writes
    assert (owner.ref.resource, owner.ref.name, owner.subresource) == ("gates", "owner", "status")
    assert json.loads(owner.merge_patch) == {"status": {"node": "n1"}}

    unreserve: pb.StatusResponse = await client.call(stub.Unreserve, node_request)
    assert [(s.pod_uid, s.plugin, s.allow, s.message) for s in unreserve.signals] == [
        ("waiting-uid", CardReserve.name, False, "gang member failed")
    ]
    (undo,) = unreserve.writes
    assert (undo.ref.resource, undo.ref.name, undo.plugin) == ("pods", "p", CardReserve.name)
    assert json.loads(undo.merge_patch) == {"metadata": {"annotations": {CARD: None}}}


async def test_schedule_returns_assume_annotations_and_batch_assumes_them(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    log = cluster(gate_open=True)
    client = SchedulingClient(None, log, stub=stub)
    one = await client.schedule(
        PROFILE, make_pod("one").label("gate", "g").obj(), reserve_and_permit=True
    )
    assert one.node == "n1"
    assert dict(one.assume_annotations) == {CARD: "0"}

    pods = [make_pod(f"b{i}").label("gate", "g").obj() for i in range(3)]
    batch = await client.schedule_batch(PROFILE, pods, reserve_and_permit=True)
    # Each pod placed in the batch counts for the next with its annotations.
    assert [dict(r.assume_annotations) for r in batch.results] == [
        {CARD: "0"},
        {CARD: "1"},
        {CARD: "2"},
    ]
    # (The batch's assumed copies are marked as the caller's are,
    # cluster.proto Pod.assumed: the plugin counts only those.)
    # The replica's snapshot is left as the request found it.
    again = await client.schedule(
        PROFILE, make_pod("after").label("gate", "g").obj(), reserve_and_permit=True
    )
    assert dict(again.assume_annotations) == {CARD: "0"}


async def test_queue_sort_reading_objects_needs_and_uses_the_state(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    log = cluster(gate_open=True)
    client = SchedulingClient(None, log, stub=stub)
    queued = [
        pb.QueuedPod(pod=make_pod("lo").label("prio", "low").obj(), enqueued_unix_micros=1),
        pb.QueuedPod(pod=make_pod("hi").label("prio", "high").obj(), enqueued_unix_micros=2),
    ]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.QueueSort(pb.QueueSortRequest(profile=PROFILE, pods=queued))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "state: required: queueSort plugin 'TestObjectSort'" in str(refused.value.details())

    resp: pb.QueueSortResponse = await client.call(
        stub.QueueSort, lambda st: pb.QueueSortRequest(profile=PROFILE, pods=queued, state=st)
    )
    keys = [tuple(p.int for p in k.parts) for k in resp.keys]
    assert keys == [(-1, 1), (-100, 2)]


async def test_failed_reserve_returns_no_annotations_but_unreserve_signals(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    log = cluster(gate_open=True)
    client = SchedulingClient(None, log, stub=stub)
    pod = make_pod("p").label("gate", "g").label("no-card", "").label("reject", "w1").obj()
    resp = await client.schedule(PROFILE, pod, reserve_and_permit=True)
    assert resp.reserve_status.code == pb.CODE_UNSCHEDULABLE
    assert dict(resp.assume_annotations) == {}
    # Permit did not run; the Unreserve that followed signalled the waiting pod.
    assert not resp.HasField("permit")
    assert [(s.pod_uid, s.allow) for s in resp.unreserve_signals] == [("w1", False)]
