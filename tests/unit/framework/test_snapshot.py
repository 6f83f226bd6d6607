"""Snapshot deltas keep NodeInfos and numpy columns in step, at the cost of
the delta."""

from __future__ import annotations

import random

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo, pod_requests
from berth.framework.snapshot import NodesMark, Snapshot, SnapshotError, zone_key
from berth.framework.testing import make_node, make_pod, snapshot_of


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


def test_each_nodes_lowest_priority_follows_its_pods() -> None:
    """NodeInfo.lowest_priority (DefaultPreemption's "no victims here" test) is
    the minimum of the node's pods' priorities after any mix of adds, moves,
    updates and deletes, asked at random moments (so both its kept answer and
    its recount are exercised), on the nodes and on their clones."""
    rng = random.Random(11)
    snap = Snapshot()
    snap.apply(delta(upsert_nodes=[make_node(f"n{i}").obj() for i in range(6)]))
    live: list[pb.Pod] = []
    for step in range(600):
        d = pb.ClusterDelta()
        for _ in range(rng.randint(0, 3)):
            if live and rng.random() < 0.3:
                # The same pod again: moved, or its priority changed.
                pod = pb.Pod()
                pod.CopyFrom(rng.choice(live))
                pod.node_name = f"n{rng.randint(0, 5)}"
                pod.priority = rng.randint(-3, 3)
            else:
                pod = make_pod(f"p{step}-{len(live)}").node(f"n{rng.randint(0, 5)}").obj()
                pod.priority = rng.randint(-3, 3)
                live.append(pod)
            d.upsert_pods.append(pod)
        if live and rng.random() < 0.4:
            d.delete_pods.append(live.pop(rng.randrange(len(live))).uid)
        snap.apply(d)
        for ni in snap.nodes.values():
            if rng.random() < 0.5:
                want = min((p.proto.priority for p in ni.pods.values()), default=None)
                assert ni.lowest_priority == want, (step, ni.name)
                assert ni.clone().lowest_priority == want


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


# --- pods a ScheduleBatch assumed, removed when the snapshot is next used -----------------------


def _fingerprint(snap: Snapshot, seen: dict[tuple[int, str], int]) -> object:
    """Everything a plugin can observe of the pods: their order in the
    snapshot and on each node, the sums, the ports, and what pod watchers
    were told (net joins per node slot and pod)."""
    nodes = {
        name: (
            list(ni.pods),
            list(ni.pods_with_affinity),
            list(ni.pods_with_required_anti_affinity),
            (ni.requested.milli_cpu, ni.requested.memory),
            tuple(ni.non_zero_requested),
            dict(ni.used_ports),
        )
        for name, ni in snap.nodes.items()
    }
    told = {k: v for k, v in seen.items() if v}
    return list(snap.pods), nodes, told


class _RemoveAndAdd(Snapshot):
    """The reference: every upsert removes the pod and adds it again."""

    reuse_equal_pods = False


def _watched(reference: bool = False) -> tuple[Snapshot, dict[tuple[int, str], int]]:
    snap = _RemoveAndAdd() if reference else Snapshot()
    seen: dict[tuple[int, str], int] = {}

    def watcher(ni: object, pod: PodInfo, change: int) -> None:
        key = (ni.index, pod.uid)  # type: ignore[attr-defined]
        seen[key] = seen.get(key, 0) + change

    snap.watch_pods(watcher)
    return snap, seen


@pytest.mark.parametrize("seed", range(6))
def test_remove_later_ends_as_removing_at_once_then_applying(seed: int) -> None:
    """server/schedule.py ScheduleBatch leaves the pods it assumed for the next
    delta to match (Snapshot.remove_later), and an upsert of a record the
    snapshot holds only moves the pod. Against a snapshot that removes the
    batch's pods at once and removes and adds every upserted pod, every
    observable is the same after every step: kept pods move last on their
    node as re-adding them would (upstream's cache.updatePod removes and
    adds)."""
    rng = random.Random(seed)
    fast, fast_seen = _watched()
    ref, ref_seen = _watched(reference=True)
    names = [f"n{i}" for i in range(6)]
    start = delta(
        upsert_nodes=[make_node(n).capacity(cpu="64", memory="64Gi").obj() for n in names]
    )
    for i in range(12):
        start.upsert_pods.append(make_pod(f"b{i}").req(cpu="100m").node(rng.choice(names)).obj())
    fast.apply(start)
    ref.apply(start)
    serial = 0
    for _ in range(120):
        # A batch assumes new pods on both snapshots.
        placed: list[pb.Pod] = []
        for _ in range(rng.randint(0, 4)):
            serial += 1
            w = make_pod(f"a{serial}").req(cpu="200m").node(rng.choice(names))
            if rng.random() < 0.3:
                w = w.host_port(8000 + serial % 3)
            if rng.random() < 0.3:
                w = w.labels(app=rng.choice(["x", "y"]))
            placed.append(w.obj())
        for snap in (fast, ref):
            for pod in placed:
                snap.apply(delta(upsert_pods=[pod]))
        fast.remove_later(p.uid for p in placed)
        ref.apply(delta(delete_pods=[p.uid for p in placed]))
        if rng.random() < 0.15:
            # A request with no delta (the caller's state unchanged).
            fast.settle()
            assert _fingerprint(fast, fast_seen) == _fingerprint(ref, ref_seen)
            continue
        # The caller's next delta: most assumed pods come back as they were.
        d = pb.ClusterDelta()
        upserts: list[pb.Pod] = []
        for pod in placed:
            roll = rng.random()
            if roll < 0.6:
                upserts.append(pod)
            elif roll < 0.75:
                changed = pb.Pod()
                changed.CopyFrom(pod)
                changed.node_name = rng.choice(names)
                changed.labels["moved"] = "yes"
                upserts.append(changed)
            elif roll < 0.85:
                d.delete_pods.append(pod.uid)
        # Bound pods seen again unchanged, or changed.
        for info in rng.sample(list(ref.pods.values()), k=min(3, len(ref.pods))):
            again = pb.Pod()
            again.CopyFrom(info.proto)
            if rng.random() < 0.3:
                again.labels["v"] = str(rng.random())
            upserts.append(again)
        rng.shuffle(upserts)
        d.upsert_pods.extend(upserts)
        if rng.random() < 0.1:
            d.delete_nodes.append(rng.choice(names))
        if rng.random() < 0.2:
            d.upsert_nodes.append(
                make_node(rng.choice(names)).capacity(cpu="64", memory="64Gi").obj()
            )
        fast.apply(d)
        ref.apply(d)
        assert _fingerprint(fast, fast_seen) == _fingerprint(ref, ref_seen)
        check_columns_match_nodeinfos(fast)


def test_an_assumed_pod_brought_back_unchanged_is_not_removed_and_added() -> None:
    snap, seen = _watched()
    snap.apply(delta(upsert_nodes=[make_node("a").capacity(cpu="4").obj()]))
    first = make_pod("first").req(cpu="1").node("a").obj()
    second = make_pod("second").req(cpu="1").node("a").obj()
    snap.apply(delta(upsert_pods=[first, second]))
    snap.remove_later([first.uid])
    before = snap.pods[first.uid]
    snap.apply(delta(upsert_pods=[first]))
    # The same PodInfo, never taken off the node (the watcher saw one join),
    # now last on its node as a re-add would have put it.
    assert snap.pods[first.uid] is before
    assert seen[(snap.nodes["a"].index, first.uid)] == 1
    assert list(snap.nodes["a"].pods) == [second.uid, first.uid]
    assert snap.nodes["a"].requested.milli_cpu == 2000
    # Not brought back: removed at the next use.
    snap.remove_later([second.uid])
    snap.apply(delta())
    assert list(snap.nodes["a"].pods) == [first.uid]
    assert snap.nodes["a"].requested.milli_cpu == 1000
    check_columns_match_nodeinfos(snap)


def test_upserting_a_placed_pod_info_counts_as_applying_its_record() -> None:
    """Snapshot.upsert_pod(PodInfo.placed(...)), the ScheduleBatch assume:
    the node's sums, the pod's place and the later removal are those of a
    delta upserting the same record, and the spec's derived values are the
    scheduled PodInfo's own, not worked out again."""
    nodes = [make_node("a").capacity(cpu="4", memory="8Gi", pods=110).obj()]
    proto = make_pod("p").req(cpu="1500m", memory="1Gi").obj()
    proto.containers[0].ports.add(container_port=80, host_port=8080)
    scheduled = PodInfo(proto)
    requests = scheduled.requests
    assumed = pb.Pod()
    assumed.CopyFrom(proto)
    assumed.node_name = "a"

    by_delta = snapshot_of(nodes, [])
    delta = pb.ClusterDelta()
    delta.upsert_pods.add().CopyFrom(assumed)
    by_delta.apply(delta)
    by_info = snapshot_of(nodes, [])
    by_info.upsert_pod(scheduled.placed(assumed))

    for snap in (by_delta, by_info):
        ni = snap.nodes["a"]
        assert ni.requested.milli_cpu == 1500
        assert ni.non_zero_requested == [1500, 1024**3]
        assert list(ni.pods) == [proto.uid]
        assert ni.used_ports
    placed = by_info.pods[proto.uid]
    assert placed.proto.node_name == "a"
    assert placed.requests is requests
    assert by_info.nodes["a"].used_ports == by_delta.nodes["a"].used_ports

    removal = pb.ClusterDelta()
    removal.delete_pods.append(proto.uid)
    by_info.apply(removal)
    assert by_info.nodes["a"].requested.milli_cpu == 0
    assert not by_info.nodes["a"].used_ports


def test_upsert_pod_refuses_a_pod_without_uid() -> None:
    snap = snapshot_of([make_node("a").obj()], [])
    proto = make_pod("p").obj()
    proto.uid = ""
    with pytest.raises(SnapshotError):
        snap.upsert_pod(PodInfo(proto))
