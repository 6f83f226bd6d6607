"""What plugins ask of other pods, over real gRPC (protos/README.md, "Signals to
waiting pods" and "Pods to activate"):

- PostFilterResponse.signals, from the PostFilter RPC and in
  ScheduleResponse.post_filter (upstream's WaitingPod.Reject from PostFilter,
  as scheduler-plugins' Coscheduling.PostFilter rejects a gang's waiting pods);
- PermitResponse.activate_pod_uids (framework.PodsToActivate, activated by
  kube-scheduler after a scheduling cycle that ends in Success or Wait), with
  what earlier calls of the cycle asked carried in the cycle state;
  StatusResponse.activate_pod_uids from PreBind and PostBind;
- ScheduleResponse.unreserve_signals: the Unreserve after a failed Reserve or a
  Permit rejection (not in permit.signals);
- and the real Coscheduling plugin through ScheduleBatch: the first member to
  wait activates its siblings, and the member that fits no node rejects the
  waiting ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.config import parse_config
from berth.framework.cycle_state import PODS_TO_ACTIVATE_KEY
from berth.framework.testing import make_node, make_pod
from berth.plugins.registry import REGISTRY as DEFAULT_REGISTRY
from berth.server.app import start_server
from tests.asker import Asker
from tests.plugins.coscheduling.test_coscheduling import gang_pod, member, podgroup, uid_of

PROFILE = "gang-protocol"
COSCHEDULING = "coscheduling"


REGISTRY = {**DEFAULT_REGISTRY, Asker.name: Asker}
ASKER = [{"name": Asker.name}]


@asynccontextmanager
async def _serve(profile: dict[str, Any]) -> AsyncIterator[pb_grpc.SchedulingServiceStub]:
    """A stub for a server on a free port with this one profile; stopped afterwards."""
    config = parse_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [profile],
        },
        "test_gang_protocol",
        REGISTRY,
    )
    running = await start_server(config, REGISTRY, "127.0.0.1:0", trace=False)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            yield pb_grpc.SchedulingServiceStub(ch)
    finally:
        await running.stop(0)


@pytest.fixture
async def stub() -> AsyncIterator[pb_grpc.SchedulingServiceStub]:
    async with _serve(
        {
            "schedulerName": PROFILE,
            "plugins": {
                point: {"enabled": ASKER}
                for point in (
                    "preFilter",
                    "filter",
                    "postFilter",
                    "reserve",
                    "permit",
                    "preBind",
                    "postBind",
                )
            },
        }
    ) as served:
        yield served


def one_node() -> ClusterStateLog:
    log = ClusterStateLog()
    log.upsert_node(make_node("n1").capacity(cpu="8", memory="8Gi").obj())
    log.commit()
    return log


def pod_with(**labels: str) -> cpb.Pod:
    w = make_pod("p")
    for k, v in labels.items():
        w.label(k, v)
    return w.obj()


def signals(out: Any) -> list[tuple[str, str, bool, str]]:
    return [(s.pod_uid, s.plugin, s.allow, s.message) for s in out]


async def test_post_filter_rpc_returns_the_signals_of_its_plugins(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    client = SchedulingClient(None, one_node(), stub=stub)
    pod = pod_with(fit="no")
    # PostFilter follows the cycle's PreFilter and reads its state, as upstream's
    # does (DynamicResources' PostFilter answers Error "not found" without it).
    pre: pb.PreFilterResponse = await client.call(
        stub.PreFilter, lambda st: pb.CycleRequest(profile=PROFILE, state=st, pod=pod)
    )
    resp: pb.PostFilterResponse = await client.call(
        stub.PostFilter,
        lambda st: pb.PostFilterRequest(
            profile=PROFILE,
            state=st,
            pod=pod,
            cycle=pre.cycle,
            rejected=[pb.NodeStatus(node="n1", status=pb.Status(code=pb.CODE_UNSCHEDULABLE))],
        ),
    )
    assert resp.status.code == pb.CODE_UNSCHEDULABLE
    # The default DynamicResources and DefaultPreemption run first: the reasons of all.
    assert list(resp.status.reasons) == [
        "no new claims to deallocate",
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
        "p takes its gang down",
    ]
    assert signals(resp.signals) == [("waiting-1", Asker.name, False, "p fits no node")]


async def test_schedule_returns_post_filter_signals_in_post_filter(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    client = SchedulingClient(None, one_node(), stub=stub)
    resp = await client.schedule(PROFILE, pod_with(fit="no"), reserve_and_permit=True)
    assert resp.status.code == pb.CODE_UNSCHEDULABLE
    assert signals(resp.post_filter.signals) == [("waiting-1", Asker.name, False, "p fits no node")]
    assert not resp.HasField("permit")
    assert list(resp.unreserve_signals) == []


@pytest.mark.parametrize("permit", ["wait", "allow"])
async def test_schedule_returns_what_the_whole_cycle_asked_to_activate_when_permit_lets_the_pod_on(
    stub: pb_grpc.SchedulingServiceStub, permit: str
) -> None:
    client = SchedulingClient(None, one_node(), stub=stub)
    resp = await client.schedule(PROFILE, pod_with(permit=permit), reserve_and_permit=True)
    assert resp.node == "n1"
    assert resp.permit.status.code == (pb.CODE_WAIT if permit == "wait" else pb.CODE_SUCCESS)
    assert list(resp.permit.activate_pod_uids) == [
        "from-prefilter",
        "from-reserve",
        "from-permit",
    ]
    assert signals(resp.permit.signals) == [("waiting-3", Asker.name, True, "")]
    # Handed over: the cycle sent on to the binding cycle no longer holds them.
    assert PODS_TO_ACTIVATE_KEY not in resp.cycle.data
    assert PODS_TO_ACTIVATE_KEY not in resp.permit.cycle.data


async def test_failed_reserve_returns_unreserve_signals_and_no_permit(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    client = SchedulingClient(None, one_node(), stub=stub)
    resp = await client.schedule(PROFILE, pod_with(reserve="fail"), reserve_and_permit=True)
    assert resp.reserve_status.code == pb.CODE_UNSCHEDULABLE
    assert not resp.HasField("permit")
    assert signals(resp.unreserve_signals) == [("waiting-2", Asker.name, False, "p unreserved")]
    assert PODS_TO_ACTIVATE_KEY not in resp.cycle.data


async def test_permit_rejection_returns_permit_signals_then_unreserve_signals(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    client = SchedulingClient(None, one_node(), stub=stub)
    resp = await client.schedule(PROFILE, pod_with(permit="reject"), reserve_and_permit=True)
    assert resp.permit.status.code == pb.CODE_UNSCHEDULABLE
    assert signals(resp.permit.signals) == [("waiting-3", Asker.name, True, "")]
    assert signals(resp.unreserve_signals) == [("waiting-2", Asker.name, False, "p unreserved")]
    # A failed cycle activates nothing.
    assert list(resp.permit.activate_pod_uids) == []


async def test_extension_point_calls_carry_activations_to_permit_and_return_binding_ones(
    stub: pb_grpc.SchedulingServiceStub,
) -> None:
    """One call per point: what PreFilter and Reserve asked rides in the cycle
    state to Permit, which returns it all; PreBind (when it succeeds) and PostBind
    return their own."""
    client = SchedulingClient(None, one_node(), stub=stub)
    pod = pod_with(permit="wait")

    def node_request(st: cpb.ClusterState, cycle: pb.CycleState, p: cpb.Pod = pod) -> Any:
        return pb.NodeRequest(profile=PROFILE, state=st, pod=p, node="n1", cycle=cycle)

    pre: pb.PreFilterResponse = await client.call(
        stub.PreFilter, lambda st: pb.CycleRequest(profile=PROFILE, state=st, pod=pod)
    )
    assert PODS_TO_ACTIVATE_KEY in pre.cycle.data
    reserve: pb.StatusResponse = await client.call(
        stub.Reserve, lambda st: node_request(st, pre.cycle)
    )
    assert reserve.status.code == pb.CODE_SUCCESS
    assert list(reserve.activate_pod_uids) == []  # not yet: the cycle is not over
    permit: pb.PermitResponse = await client.call(
        stub.Permit, lambda st: node_request(st, reserve.cycle)
    )
    assert permit.status.code == pb.CODE_WAIT
    assert list(permit.activate_pod_uids) == [
        "from-prefilter",
        "from-reserve",
        "from-permit",
    ]
    assert PODS_TO_ACTIVATE_KEY not in permit.cycle.data

    pre_bind: pb.StatusResponse = await client.call(
        stub.PreBind, lambda st: node_request(st, permit.cycle)
    )
    assert list(pre_bind.activate_pod_uids) == ["from-prebind"]
    failed = pod_with(prebind="fail")
    failed_pre_bind: pb.StatusResponse = await client.call(
        stub.PreBind, lambda st: node_request(st, permit.cycle, failed)
    )
    assert failed_pre_bind.status.code == pb.CODE_ERROR
    assert list(failed_pre_bind.activate_pod_uids) == []
    post_bind: pb.StatusResponse = await client.call(
        stub.PostBind, lambda st: node_request(st, permit.cycle)
    )
    assert list(post_bind.activate_pod_uids) == ["from-postbind"]

    # A Permit that rejects drops what the cycle asked for.
    rejected: pb.PermitResponse = await client.call(
        stub.Permit, lambda st: node_request(st, reserve.cycle, pod_with(permit="reject"))
    )
    assert rejected.status.code == pb.CODE_UNSCHEDULABLE
    assert list(rejected.activate_pod_uids) == []


# -- the real Coscheduling ---------------------------------------------------------------


@pytest.fixture
async def cosched() -> AsyncIterator[pb_grpc.SchedulingServiceStub]:
    async with _serve(
        {
            "schedulerName": COSCHEDULING,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]},
            },
        }
    ) as served:
        yield served


async def test_coscheduling_batch_activates_siblings_then_post_filter_rejects_the_waiting(
    cosched: pb_grpc.SchedulingServiceStub,
) -> None:
    """A gang of 4 (minMember 4) on room for 3, in one ScheduleBatch: the first
    member waits and activates the other three (ActivateSiblings), the next two
    wait, the fourth fits no node and its PostFilter rejects the three waiting."""
    log = ClusterStateLog()
    for i in range(3):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="4", memory="16Gi").obj())
    names = [f"g-{i}" for i in range(4)]
    log.upsert_object(podgroup("pg", 4, timeout=30))
    for name in names:
        log.upsert_object(member(name, "pg"))
    log.commit()
    client = SchedulingClient(None, log, stub=cosched)
    pods = [gang_pod(name, cpu="3") for name in names]
    resp = await client.schedule_batch(COSCHEDULING, pods, reserve_and_permit=True)

    first, second, third, last = resp.results
    for r in (first, second, third):
        assert r.permit.status.code == pb.CODE_WAIT, r
    assert sorted(first.permit.activate_pod_uids) == sorted(uid_of(n) for n in names[1:])
    assert list(second.permit.activate_pod_uids) == []
    assert list(third.permit.activate_pod_uids) == []
    assert last.status.code == pb.CODE_UNSCHEDULABLE
    assert "PodGroup default/pg gets rejected due to Pod g-3" in last.diagnosis.message
    assert sorted(signals(last.post_filter.signals)) == sorted(
        (uid_of(n), "Coscheduling", False, "optimistic rejection in PostFilter") for n in names[:3]
    )
