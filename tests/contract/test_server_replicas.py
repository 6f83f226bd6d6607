"""The replica rules (protos/README.md, "Replica rules"), through a real gRPC
channel: incarnation, a full state always replaces, pinned requests, the
generation every state-using response reports, and what a delta may hold."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client import ClusterStateLog
from berth.framework.testing import make_node, make_pod
from berth.server.app import RunningServer
from tests.contract.test_server_errors import assert_info, refused

PROFILE = "contract"


def cluster(incarnation: int = 1, cluster_id: str = "shared-id") -> ClusterStateLog:
    log = ClusterStateLog(cluster_id, incarnation=incarnation)
    for name, score in (("a", "10"), ("b", "40"), ("c", "90")):
        log.upsert_node(make_node(name).capacity(cpu="4").labels(score=score).obj())
    log.commit()
    return log


def at(log: ClusterStateLog, generation: int, *, pinned: bool = False) -> cpb.ClusterState:
    """A request for ``generation`` that carries no changes."""
    return cpb.ClusterState(
        cluster_id=log.cluster_id,
        generation=generation,
        base_generation=generation,
        incarnation=log.incarnation,
        pinned=pinned,
    )


async def test_a_restarted_caller_with_the_same_id_is_never_served_old_state(
    server: RunningServer, channel: grpc.aio.Channel
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    old = cluster(incarnation=1)
    await stub.Sync(pb.SyncRequest(state=old.full_state()))
    # The restarted caller (same cluster_id, new incarnation) has other nodes and
    # believes the replica already has its generation 1: the replica must not
    # answer from the old run's snapshot.
    new = ClusterStateLog("shared-id", incarnation=2)
    new.upsert_node(make_node("fresh").capacity(cpu="4").obj())
    new.commit()
    err, info = await refused(
        stub.Schedule(pb.ScheduleRequest(profile=PROFILE, state=at(new, 1), pod=make_pod().obj()))
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert_info(info, server, "STALE_SNAPSHOT", {"replica_generation": "-1"})
    assert "incarnation 2" in (err.details() or "")
    # Its full state replaces the old one; from then on its deltas apply.
    resp = await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=new.full_state(), pod=make_pod().obj())
    )
    assert resp.node == "fresh"
    resp = await stub.Schedule(
        pb.ScheduleRequest(profile=PROFILE, state=at(new, 1), pod=make_pod().obj())
    )
    assert resp.node == "fresh"
    # The old run's requests are now the strangers.
    err, info = await refused(
        stub.Schedule(pb.ScheduleRequest(profile=PROFILE, state=at(old, 1), pod=make_pod().obj()))
    )
    assert info.reason == "STALE_SNAPSHOT"


async def test_a_full_state_at_the_generation_the_replica_has_replaces_it(
    server: RunningServer, channel: grpc.aio.Channel
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    first = cluster()
    for i in range(2):
        first.upsert_pod(make_pod(f"p{i}").req(cpu="1").node("a").obj())
        first.commit()
    assert (await stub.Sync(pb.SyncRequest(state=first.full_state()))).generation == 3
    # Same id, same incarnation, same generation, other contents.
    second = ClusterStateLog("shared-id", incarnation=first.incarnation)
    second.upsert_node(make_node("only").capacity(cpu="4").obj())
    for _ in range(3):
        second.upsert_pod(make_pod(f"q{second.generation}").node("only").obj())
        second.commit()
    assert second.generation == 3
    synced = await stub.Sync(pb.SyncRequest(state=second.full_state()))
    assert (synced.generation, synced.node_count, synced.pod_count) == (3, 1, 3)
    snap = server.service.store.entry("shared-id")
    assert snap is not None and set(snap.snapshot.nodes) == {"only"}


async def test_pinned_requests_are_served_at_exactly_their_generation(
    server: RunningServer, channel: grpc.aio.Channel
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = cluster()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    pod = make_pod().obj()
    pre = await stub.PreFilter(pb.CycleRequest(profile=PROFILE, state=at(log, 1), pod=pod))
    assert pre.generation == 1
    # Pinned at the replica's generation: served.
    filt = await stub.Filter(
        pb.NodesRequest(
            profile=PROFILE,
            state=at(log, 1, pinned=True),
            pod=pod,
            cycle=pre.cycle,
            all_nodes=True,
        )
    )
    assert filt.generation == 1 and len(filt.feasible) == 3
    # A pinned request whose delta takes a replica behind it to its generation: served.
    log.upsert_pod(make_pod("x").req(cpu="1").node("b").obj())
    log.commit()
    since = log.state_since(1)
    since.pinned = True
    score = await stub.Score(
        pb.NodesRequest(profile=PROFILE, state=since, pod=pod, cycle=pre.cycle, nodes=["a"])
    )
    assert score.generation == 2
    # Pinned at 1 while the replica has moved on to 2: ABORTED, nothing served.
    err, info = await refused(
        stub.Score(
            pb.NodesRequest(
                profile=PROFILE,
                state=at(log, 1, pinned=True),
                pod=pod,
                cycle=pre.cycle,
                nodes=["a"],
            )
        )
    )
    assert err.code() == grpc.StatusCode.ABORTED
    assert_info(info, server, "SNAPSHOT_PASSED", {"replica_generation": "2"})
    # Unpinned, the same request is served at the replica's newer generation.
    score = await stub.Score(
        pb.NodesRequest(profile=PROFILE, state=at(log, 1), pod=pod, cycle=pre.cycle, nodes=["a"])
    )
    assert score.generation == 2


async def test_every_response_that_used_state_reports_the_generation_it_used(
    channel: grpc.aio.Channel,
) -> None:
    """The replica is at generation 2; every request asks for 1 (not pinned), so each
    response must say 2: the generation the replica actually used."""
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = cluster()
    log.upsert_pod(make_pod("x").req(cpu="1").node("a").obj())
    log.commit()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    st = at(log, 1)
    pod = make_pod().obj()
    pre = await stub.PreFilter(pb.CycleRequest(profile=PROFILE, state=st, pod=pod))
    nodes = dict(profile=PROFILE, state=st, pod=pod, cycle=pre.cycle)
    filt = await stub.Filter(pb.NodesRequest(all_nodes=True, **nodes))
    score = await stub.Score(pb.NodesRequest(nodes=["a", "c"], **nodes))
    one = pb.NodeRequest(node="c", **nodes)
    responses = {
        "PreFilter": pre,
        "Filter": filt,
        "PostFilter": await stub.PostFilter(pb.PostFilterRequest(rejected=filt.rejected, **nodes)),
        "PreScore": await stub.PreScore(pb.NodesRequest(nodes=["a", "c"], **nodes)),
        "Score": score,
        "NormalizeScore": await stub.NormalizeScore(
            pb.NormalizeScoreRequest(
                nodes=["a", "c"],
                plugins=score.plugins,
                **nodes,
            )
        ),
        "Reserve": await stub.Reserve(one),
        "Permit": await stub.Permit(one),
        "PreBind": await stub.PreBind(one),
        "Bind": await stub.Bind(one),
        "PostBind": await stub.PostBind(one),
        "Unreserve": await stub.Unreserve(one),
        "Schedule": await stub.Schedule(pb.ScheduleRequest(profile=PROFILE, state=st, pod=pod)),
        "ScheduleBatch": await stub.ScheduleBatch(
            pb.ScheduleBatchRequest(profile=PROFILE, state=st, pods=[pod])
        ),
        "Sync": await stub.Sync(pb.SyncRequest(state=st)),
    }
    assert {name: r.generation for name, r in responses.items()} == dict.fromkeys(responses, 2)


@pytest.mark.parametrize("method", ["Filter", "PreScore", "Score"])
async def test_empty_nodes_without_all_nodes_is_refused(
    server: RunningServer, channel: grpc.aio.Channel, method: str
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = cluster()
    req = pb.NodesRequest(profile=PROFILE, state=log.full_state(), pod=make_pod().obj())
    err, info = await refused(getattr(stub, method)(req))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_info(info, server, "INVALID_REQUEST", {"field": "nodes"})
    assert (err.details() or "").startswith("nodes: must name at least one node")


def _object(name: str, json: bytes = b'{"kind": "PodGroup"}', resource: str = "podgroups") -> Any:
    return cpb.ClusterObject(
        ref=cpb.ObjectRef(
            group="scheduling.x-k8s.io", resource=resource, namespace="ns", name=name
        ),
        version="v1alpha1",
        kind="PodGroup",
        json=json,
    )


@pytest.mark.parametrize(
    ("delta", "field", "message"),
    [
        (
            cpb.ClusterDelta(
                upsert_objects=[_object("g1")],
                delete_objects=[_object("g1").ref],
            ),
            "state.delta",
            "object 'podgroups.scheduling.x-k8s.io ns/g1' appears 2 times "
            "(upsert_objects[0], delete_objects[0])",
        ),
        (
            cpb.ClusterDelta(upsert_objects=[_object("g1"), _object("g2"), _object("g1")]),
            "state.delta",
            "(upsert_objects[0], upsert_objects[2])",
        ),
        (
            cpb.ClusterDelta(upsert_objects=[_object("g1"), _object("g2", json=b"{not json")]),
            "state.delta.upsert_objects[1].json",
            "state.delta.upsert_objects[1].json: not valid JSON: ",
        ),
        (
            cpb.ClusterDelta(upsert_objects=[_object("g1", json=b"[1, 2]")]),
            "state.delta.upsert_objects[0].json",
            "must be a JSON object",
        ),
        (
            cpb.ClusterDelta(upsert_objects=[_object("g1", resource="")]),
            "state.delta.upsert_objects[0].ref.resource",
            "must not be empty",
        ),
        (
            cpb.ClusterDelta(upsert_objects=[_object("")]),
            "state.delta.upsert_objects[0].ref.name",
            "must not be empty",
        ),
    ],
    ids=[
        "upserted-and-deleted",
        "upserted-twice",
        "invalid-json",
        "json-not-an-object",
        "no-resource",
        "no-name",
    ],
)
async def test_bad_object_entries_refuse_the_delta_whole(
    server: RunningServer,
    channel: grpc.aio.Channel,
    delta: cpb.ClusterDelta,
    field: str,
    message: str,
) -> None:
    stub = pb_grpc.SchedulingServiceStub(channel)
    log = cluster()
    await stub.Sync(pb.SyncRequest(state=log.full_state()))
    st = cpb.ClusterState(
        cluster_id=log.cluster_id,
        generation=2,
        base_generation=1,
        incarnation=log.incarnation,
        delta=delta,
    )
    err, info = await refused(stub.Sync(pb.SyncRequest(state=st)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (err.details() or "")
    assert_info(info, server, "INVALID_REQUEST", {"field": field})
    # Refused whole: the replica is where it was.
    assert server.service.store.generation(log.cluster_id) == 1
    entry = server.service.store.entry(log.cluster_id)
    assert entry is not None and entry.snapshot.object_count == 0
