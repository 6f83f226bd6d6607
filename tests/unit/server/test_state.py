"""The generation protocol (protos/README.md), replica side."""

from __future__ import annotations

import pytest

from berth.client import ClusterStateLog
from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.testing import make_node, make_pod
from server.state import InvalidState, SnapshotStore, StaleReplica


def caller(n: int = 3) -> ClusterStateLog:
    log = ClusterStateLog("c1")
    for i in range(n):
        log.upsert_node(make_node(f"n{i}").capacity(cpu="4").obj())
    log.commit()
    return log


def test_new_replica_asks_for_full_state_then_follows_deltas() -> None:
    log = caller()
    store = SnapshotStore()
    with pytest.raises(StaleReplica) as err:
        store.resolve(log.state_since(1))
    assert err.value.have == -1
    entry = store.resolve(log.full_state())
    assert entry.generation == 1 and len(entry.snapshot.nodes) == 3
    log.upsert_pod(make_pod().req(cpu="1").node("n0").obj())
    log.commit()
    msg = log.state_since(1)
    assert not msg.full and len(msg.delta.upsert_pods) == 1 and not msg.delta.upsert_nodes
    entry = store.resolve(msg)
    assert entry.generation == 2
    assert entry.snapshot.nodes["n0"].requested.milli_cpu == 1000


def test_lagging_replica_reports_its_generation_and_catches_up_from_it() -> None:
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    for i in range(5):
        log.upsert_pod(make_pod(f"p{i}").req(cpu="100m").node("n1").obj())
        log.commit()
    # The caller believes the replica is at 5 (it talked to another replica).
    with pytest.raises(StaleReplica) as err:
        store.resolve(log.state_since(5))
    assert err.value.have == 1
    entry = store.resolve(log.state_since(err.value.have))
    assert entry.generation == 6
    assert entry.snapshot.nodes["n1"].requested.milli_cpu == 500


def test_delta_covering_more_than_needed_is_idempotent() -> None:
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    log.upsert_pod(make_pod("a").req(cpu="1").node("n0").obj())
    log.commit()
    store.resolve(log.state_since(1))  # replica at 2
    log.upsert_pod(make_pod("b").req(cpu="1").node("n0").obj())
    log.commit()
    entry = store.resolve(log.state_since(1))  # (1, 3] applied on top of 2
    assert entry.snapshot.nodes["n0"].requested.milli_cpu == 2000


def test_replica_ahead_of_request_serves_without_going_back() -> None:
    log = caller()
    store = SnapshotStore()
    store.resolve(log.full_state())
    log.upsert_pod(make_pod().req(cpu="1").node("n0").obj())
    log.commit()
    store.resolve(log.state_since(1))
    old = pb.ClusterState(
        cluster_id="c1", incarnation=log.incarnation, generation=1, base_generation=1
    )
    assert store.resolve(old).generation == 2


@pytest.mark.parametrize(
    ("state", "field"),
    [
        (pb.ClusterState(generation=1, full=True), "state.cluster_id"),
        (pb.ClusterState(cluster_id="x", generation=0, full=True), "state.generation"),
        (pb.ClusterState(cluster_id="x", generation=2, base_generation=3), "state.base_generation"),
        (
            pb.ClusterState(
                cluster_id="x",
                generation=1,
                full=True,
                delta=pb.ClusterDelta(upsert_pods=[pb.Pod()]),
            ),
            "state.delta.upsert_pods[0].uid",
        ),
    ],
    ids=["no-cluster-id", "zero-generation", "base-after-generation", "pod-without-uid"],
)
def test_malformed_state_names_the_field(state: pb.ClusterState, field: str) -> None:
    with pytest.raises(InvalidState) as err:
        SnapshotStore().resolve(state)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ")


def test_caller_sends_full_state_when_its_log_no_longer_reaches_the_base() -> None:
    log = ClusterStateLog("c", keep=2)
    log.upsert_node(make_node("a").capacity(cpu="1").obj())
    log.commit()
    for i in range(4):
        log.upsert_pod(make_pod(f"p{i}").node("a").obj())
        log.commit()
    assert log.state_since(1).full
    assert not log.state_since(4).full


def test_least_recently_used_cluster_is_evicted() -> None:
    store = SnapshotStore(max_clusters=2)
    for cid in ("a", "b", "c"):
        store.resolve(pb.ClusterState(cluster_id=cid, generation=1, full=True))
    assert store.generation("a") == -1
    assert store.generation("c") == 1


POD_A = make_pod("a").obj()


@pytest.mark.parametrize(
    ("delta", "message"),
    [
        (
            pb.ClusterDelta(upsert_pods=[POD_A], delete_pods=[POD_A.uid]),
            "(upsert_pods[0], delete_pods[0])",
        ),
        (
            pb.ClusterDelta(upsert_nodes=[make_node("n").obj(), make_node("n").obj()]),
            "node 'n' appears 2 times (upsert_nodes[0], upsert_nodes[1])",
        ),
        (pb.ClusterDelta(delete_nodes=["x", "x"]), "node 'x' appears 2 times"),
    ],
    ids=["pod-upserted-and-deleted", "node-upserted-twice", "node-deleted-twice"],
)
def test_a_delta_naming_an_object_twice_is_refused_whole(
    delta: pb.ClusterDelta, message: str
) -> None:
    store = SnapshotStore()
    base = store.resolve(caller().full_state())
    state = pb.ClusterState(cluster_id="c1", generation=2, base_generation=1, delta=delta)
    with pytest.raises(InvalidState) as err:
        store.resolve(state)
    assert err.value.field == "state.delta"
    assert message in str(err.value)
    assert "at most once" in str(err.value)
    assert base.generation == 1 and len(base.snapshot.nodes) == 3  # unchanged


def test_a_full_state_replaces_even_at_a_generation_the_replica_has() -> None:
    """A caller restarted under the same cluster_id sends its new world at generation 1:
    it must not be answered from the old one."""
    store = SnapshotStore()
    old = caller(3)
    store.resolve(old.full_state())
    restarted = ClusterStateLog("c1")
    restarted.upsert_node(make_node("only").capacity(cpu="1").obj())
    restarted.commit()
    entry = store.resolve(restarted.full_state())
    assert set(entry.snapshot.nodes) == {"only"}
