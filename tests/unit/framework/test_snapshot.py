"""Snapshot deltas keep NodeInfos and numpy columns in step, at the cost of
the delta."""

from __future__ import annotations

import random

import numpy as np
import pytest

from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.model import PodInfo, pod_requests
from plugins.framework.snapshot import NodesMark, Snapshot, SnapshotError, zone_key
from plugins.framework.testing import make_node, make_pod, snapshot_of


def delta(**kw: object) -> pb.ClusterDelta:
    return pb.ClusterDelta(**kw)  # type: ignore[arg-type]


def check_columns_match_nodeinfos(snap: Snapshot) -> None:
    cols = snap.columns
    assert set(snap.all_nodes().names) == set(snap.nodes)
    for ni in snap.nodes.values():
        i = ni.index
        assert cols.valid[i]
        assert cols.req_cpu[i] == sum(p.requests.milli_cpu for p in ni.pods.values())
        assert cols.req_mem[i] == sum(p.requests.memory for p in ni.pods.values())
        assert cols.nz_cpu[i] == sum(p.non_zero_requests[0] for p in ni.pods.values())
        assert cols.pod_count[i] == len(ni.pods)
        assert cols.alloc_cpu[i] == ni.allocatable.milli_cpu
        assert cols.unschedulable[i] == ni.node.unschedulable
    assert int(cols.valid.sum()) == len(snap.nodes)


def test_random_deltas_keep_columns_consistent() -> None:
    rng = random.Random(7)
    snap = Snapshot()
    live_pods: list[str] = []
    for step in range(300):
        d = pb.ClusterDelta()
        for _ in range(rng.randint(0, 3)):
            name = f"n{rng.randint(0, 40)}"
            d.upsert_nodes.append(
                make_node(name)
                .capacity(cpu=str(rng.randint(1, 8)), memory="8Gi")
                .unschedulable(rng.random() < 0.2)
                .obj()
            )
        if rng.random() < 0.1:
            d.delete_nodes.append(f"n{rng.randint(0, 40)}")
        for _ in range(rng.randint(0, 4)):
            pod = (
                make_pod(f"p{step}")
                .req(cpu=f"{rng.randint(1, 900)}m")
                .node(f"n{rng.randint(0, 40)}")
                .obj()
            )
            d.upsert_pods.append(pod)
            live_pods.append(pod.uid)
        if live_pods and rng.random() < 0.3:
            d.delete_pods.append(live_pods.pop(rng.randrange(len(live_pods))))
        snap.apply(d)
        check_columns_match_nodeinfos(snap)


def test_pod_moves_between_nodes_on_upsert() -> None:
    snap = snapshot_of(
        [make_node("a").capacity(cpu="4").obj(), make_node("b").capacity(cpu="4").obj()]
    )
    pod = make_pod().req(cpu="1").node("a").obj()
    snap.apply(delta(upsert_pods=[pod]))
    moved = pb.Pod()
    moved.CopyFrom(pod)
    moved.node_name = "b"
    snap.apply(delta(upsert_pods=[moved]))
    assert snap.nodes["a"].requested.milli_cpu == 0
    assert snap.nodes["b"].requested.milli_cpu == 1000


def test_pods_of_a_deleted_node_return_with_it() -> None:
    """cache.RemoveNode keeps a node's pods until they are deleted."""
    node = make_node("a").capacity(cpu="4").obj()
    snap = snapshot_of([node], [make_pod().req(cpu="1").node("a").obj()])
    snap.apply(delta(delete_nodes=["a"]))
    assert len(snap.all_nodes()) == 0
    snap.apply(delta(upsert_nodes=[node]))
    assert snap.nodes["a"].requested.milli_cpu == 1000
    check_columns_match_nodeinfos(snap)


def test_bad_delta_changes_nothing() -> None:
    snap = snapshot_of([make_node("a").capacity(cpu="4").obj()])
    bad = delta(
        upsert_nodes=[make_node("b").capacity(cpu="1").obj(), pb.Node()],
    )
    with pytest.raises(SnapshotError) as err:
        snap.apply(bad)
    assert err.value.field == "delta.upsert_nodes[1].name"
    assert set(snap.nodes) == {"a"}


def test_extended_resources_get_columns() -> None:
    snap = snapshot_of(
        [make_node("g").capacity(cpu="4", **{"nvidia.com/gpu": 8}).obj()],
        [make_pod().req(**{"nvidia.com/gpu": 3}).node("g").obj()],
    )
    alloc, req = snap.columns.scalar_columns("nvidia.com/gpu")
    i = snap.nodes["g"].index
    assert (int(alloc[i]), int(req[i])) == (8, 3)


@pytest.mark.parametrize(
    ("pod", "cpu", "memory"),
    [
        (make_pod().req(cpu="1", memory="1Gi").req(cpu="500m"), 1500, 2**30),
        # An init container larger than the sum raises the requests.
        (make_pod().req(cpu="1").init_req(cpu="3"), 3000, 0),
        # Sidecars (restartable init containers) add to the pod and to later init steps.
        (make_pod().req(cpu="1").init_req(restartable=True, cpu="1").init_req(cpu="2"), 3000, 0),
        (make_pod().req(cpu="1").overhead(cpu="250m", memory="64Mi"), 1250, 64 * 2**20),
    ],
    ids=["sum-of-containers", "init-container-max", "sidecar-adds", "overhead-adds"],
)
def test_pod_requests_follow_component_helpers(pod: object, cpu: int, memory: int) -> None:
    """k8s.io/component-helpers/resource: PodRequests."""
    r = pod_requests(pod.obj())  # type: ignore[attr-defined]
    assert (r.milli_cpu, r.memory) == (cpu, memory)


def test_non_zero_requests_default_missing_cpu_and_memory_only() -> None:
    """GetNonzeroRequests: 100m and 200Mi for a *missing* request; an explicit 0 stays 0."""
    missing = PodInfo(make_pod().req(ephemeral_storage="1Gi").obj())
    assert missing.non_zero_requests == (100, 200 * 2**20)
    explicit = PodInfo(make_pod().req(cpu="0", memory="0").obj())
    assert explicit.non_zero_requests == (0, 0)


def test_node_order_is_stable_and_skips_deleted_slots() -> None:
    snap = snapshot_of([make_node(f"n{i}").capacity(cpu="1").obj() for i in range(5)])
    snap.apply(delta(delete_nodes=["n2"]))
    assert snap.all_nodes().names == ["n0", "n1", "n3", "n4"]
    assert np.array_equal(snap.node_order(), np.array([0, 1, 3, 4]))


ZONE = "topology.kubernetes.io/zone"


def zoned(name: str, zone: str = "", **labels: str) -> pb.Node:
    node = make_node(name).capacity(cpu="1").labels(**labels)
    if zone:
        node.label(ZONE, zone)
    return node.obj()


def test_node_tree_list_interleaves_zones_round_robin() -> None:
    """node_tree.go, list(): one node of each zone per round, the zones in the
    order they appeared, each zone's nodes in the order they were added."""
    snap = snapshot_of(
        [zoned("a1", "z1"), zoned("a2", "z1"), zoned("a3", "z1"), zoned("b1", "z2"), zoned("c1")]
    )
    assert snap.all_nodes().names == ["a1", "b1", "c1", "a2", "a3"]
    snap.apply(delta(upsert_nodes=[zoned("b2", "z2")]))
    assert snap.all_nodes().names == ["a1", "b1", "c1", "a2", "b2", "a3"]
    check_columns_match_nodeinfos(snap)


def test_node_tree_remove_node_keeps_the_others_in_order() -> None:
    """removeNode/removeZone: the rest keep their order; a zone emptied and
    filled again comes back as the last zone; a new node never takes a freed
    node's place in the walk (Berth reuses the freed column slot)."""
    snap = snapshot_of([zoned("a1", "z1"), zoned("b1", "z2"), zoned("a2", "z1"), zoned("c1", "z3")])
    assert snap.all_nodes().names == ["a1", "b1", "c1", "a2"]
    snap.apply(delta(delete_nodes=["b1"]))
    assert snap.all_nodes().names == ["a1", "c1", "a2"]
    snap.apply(delta(upsert_nodes=[zoned("b1", "z2")]))
    assert snap.all_nodes().names == ["a1", "c1", "b1", "a2"]
    plain = snapshot_of([zoned(f"n{i}") for i in range(5)])
    plain.apply(delta(delete_nodes=["n2"]))
    plain.apply(delta(upsert_nodes=[zoned("n5")]))
    assert plain.all_nodes().names == ["n0", "n1", "n3", "n4", "n5"]
    assert plain.nodes["n5"].index == 2
    check_columns_match_nodeinfos(plain)


def test_node_tree_update_node_moves_zones_at_the_next_list() -> None:
    """updateNode moves a node whose zone changed to the end of its new zone;
    the snapshot's node list (updateNodeInfoSnapshotList) is rebuilt only when
    a node is added or removed, so the move shows then."""
    snap = snapshot_of([zoned("a1", "z1"), zoned("b1", "z2"), zoned("a2", "z1")])
    assert snap.all_nodes().names == ["a1", "b1", "a2"]
    snap.apply(delta(upsert_nodes=[zoned("a1", "z2")]))
    assert snap.all_nodes().names == ["a1", "b1", "a2"]
    snap.apply(delta(upsert_nodes=[zoned("c1")]))
    assert snap.all_nodes().names == ["a2", "b1", "c1", "a1"]


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        ({}, ""),
        ({ZONE: "z1"}, ":\x00:z1"),
        ({"topology.kubernetes.io/region": "r1"}, "r1:\x00:"),
        (
            {
                ZONE: "ga",
                "failure-domain.beta.kubernetes.io/zone": "beta",
                "topology.kubernetes.io/region": "r",
            },
            "r:\x00:beta",
        ),
        ({ZONE: "ga", "failure-domain.beta.kubernetes.io/zone": ""}, ""),
    ],
)
def test_get_zone_key(labels: dict[str, str], want: str) -> None:
    """component-helpers node/topology GetZoneKey: beta labels win when present."""
    assert zone_key(labels) == want


def test_nodes_mark_moves_with_nodes_not_pods() -> None:
    """NodesMark: an index over node records is current while neither the
    snapshot nor its node_generation changed; pods do not move it."""
    snap = snapshot_of([make_node("a").obj()])
    mark = NodesMark()
    assert mark.moved(snap)
    assert not mark.moved(snap)
    delta = pb.ClusterDelta()
    delta.upsert_pods.append(make_pod("p").uid("p").node("a").obj())
    snap.apply(delta)
    assert not mark.moved(snap)
    delta = pb.ClusterDelta()
    delta.upsert_nodes.append(make_node("b").obj())
    snap.apply(delta)
    assert mark.moved(snap)
    assert not mark.moved(snap)
    other = snapshot_of([make_node("a").obj()])
    assert mark.moved(other)
    assert mark.moved(snap)
