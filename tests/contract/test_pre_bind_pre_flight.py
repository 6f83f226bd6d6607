"""ScheduleResponse.pre_bind_skip over the wire, with the shipped default
profile (VolumeBinding is its PreBind plugin): framework.go
RunPreBindPreFlights runs once Permit lets the pod on, so a pod without
volumes needs no PreBind call and a pod with a WaitForFirstConsumer claim
to provision does; the plugins that skipped travel in `cycle`, so a PreBind
call made anyway still skips them."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog, SchedulingClient
from berth.framework.cycle_state import CycleState
from berth.framework.storage import PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES
from berth.framework.testing import make_node, make_object, make_pod
from berth.server.app import RunningServer

PROFILE = "default-scheduler"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


def cluster() -> ClusterStateLog:
    """One node, a WaitForFirstConsumer class that provisions, and an unbound
    claim of that class."""
    log = ClusterStateLog()
    log.upsert_node(make_node("n1").capacity(cpu="4", memory="8Gi").labels(**{"zone": "a"}).obj())
    log.upsert_object(
        make_object(
            STORAGE_CLASSES,
            "wait-sc",
            provisioner="example.com/csi",
            volumeBindingMode="WaitForFirstConsumer",
        )
    )
    claim = make_object(
        PERSISTENT_VOLUME_CLAIMS,
        "data",
        "default",
        spec={
            "storageClassName": "wait-sc",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "volumeMode": "Filesystem",
        },
        status={"phase": "Pending"},
    )
    body: dict[str, Any] = json.loads(claim.json)
    body["metadata"].update(uid="claim-uid", resourceVersion="7")
    claim.json = json.dumps(body).encode()
    log.upsert_object(claim)
    log.commit()
    return log


def plain(name: str) -> cpb.Pod:
    return make_pod(name).uid(name).req(cpu="100m", memory="100Mi").obj()


def with_claim(name: str) -> cpb.Pod:
    p = plain(name)
    p.volumes.add(name="data", claim_name="data")
    p.pvc_names.append("data")
    return p


def skipped(resp: pb.ScheduleResponse) -> set[str]:
    return CycleState.decode(resp.cycle.data).skip_pre_bind_plugins


@pytest.mark.parametrize("rpc", ["Schedule", "ScheduleStream", "ScheduleBatch"])
async def test_a_pod_without_volumes_needs_no_pre_bind(
    default_server: RunningServer, rpc: str
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, cluster())
        pods = [plain("web"), with_claim("db")]
        if rpc == "ScheduleBatch":
            batch = await client.schedule_batch(PROFILE, pods, reserve_and_permit=True)
            results = list(batch.results)
        else:
            send = client.schedule if rpc == "Schedule" else client.schedule_streamed
            results = [await send(PROFILE, p, reserve_and_permit=True) for p in pods]
    web, db = results
    for resp in results:
        assert (resp.status.code, resp.node, resp.permit.status.code) == (
            pb.CODE_SUCCESS,
            "n1",
            pb.CODE_SUCCESS,
        )
    assert web.pre_bind_skip
    assert skipped(web) == {"VolumeBinding", "DynamicResources"}
    # The claim is to be provisioned on the node: VolumeBinding's PreBind has work.
    assert not db.pre_bind_skip
    # It has no resource claims: DynamicResources' PreBind has none.
    assert skipped(db) == {"DynamicResources"}


async def test_without_reserve_and_permit_no_pre_flight_runs(
    default_server: RunningServer,
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        client = SchedulingClient(ch, cluster())
        resp = await client.schedule(PROFILE, plain("web"))
    assert resp.node == "n1"
    assert not resp.pre_bind_skip
    assert skipped(resp) == set()


async def test_pre_bind_still_skips_the_skipped_plugins_and_writes_for_the_claim(
    default_server: RunningServer,
) -> None:
    """A caller that calls PreBind anyway (one that predates the field): the
    skipped VolumeBinding is not run; for the pod with a claim it writes the
    claim's selected node."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{default_server.port}") as ch:
        stub = pb_grpc.SchedulingServiceStub(ch)
        client = SchedulingClient(ch, cluster())
        for pod, writes in ((plain("web"), []), (with_claim("db"), [("data", "n1")])):
            resp = await client.schedule(PROFILE, pod, reserve_and_permit=True)
            assumed = cpb.Pod()
            assumed.CopyFrom(pod)
            assumed.node_name = resp.node
            assumed.annotations.update(resp.assume_annotations)
            client.state.upsert_pod(assumed)
            client.state.commit()

            def request(st: cpb.ClusterState, p: cpb.Pod = pod, r: Any = resp) -> pb.NodeRequest:
                return pb.NodeRequest(profile=PROFILE, state=st, pod=p, node=r.node, cycle=r.cycle)

            pre_bind: pb.StatusResponse = await client.call(stub.PreBind, request)
            assert pre_bind.status.code == pb.CODE_SUCCESS, pre_bind.status
            got = [
                (w.ref.name, json.loads(w.merge_patch)["metadata"]["annotations"][SELECTED_NODE])
                for w in pre_bind.writes
            ]
            assert got == writes
