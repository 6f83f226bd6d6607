"""PodTopologySpread PreScore/Score/NormalizeScore, after upstream's
scoring_test.go at v1.36 (TestPodTopologySpreadScore, TestPreScoreSkip,
TestPreScoreStateEmptyNodes). Case ids are upstream's names. Upstream's
"matchLabelKeys ignored when feature gate disabled" is left out: the gate
(MatchLabelKeysInPodTopologySpread) is on at v1.36 and Berth serves it on."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.testing import fresh_state, make_object, snapshot_of
from berth.plugins.podtopologyspread import (
    PRE_SCORE_STATE_KEY,
    PodTopologySpread,
    PodTopologySpreadArgs,
)
from berth.plugins.podtopologyspread.args import DefaultConstraint
from berth.plugins.podtopologyspread.common import REPLICASETS, SERVICES, STATEFULSETS
from berth.plugins.podtopologyspread.pod_topology_spread import topology_normalizing_weight
from tests.plugins.podtopologyspread.testutil import DNS, SA, C, node, pod, spread_pod

H = "kubernetes.io/hostname"
SYSTEM = PodTopologySpreadArgs()
LIST = PodTopologySpreadArgs(defaulting_type="List")


def hn(name: str, *labels: str) -> str:
    return " ".join((name, f"{H}={name}", *labels))


def zn(name: str, zone: str) -> str:
    return hn(name, f"zone={zone}")


def pods_on(node_name: str, n: int, labels: str = "foo=", prefix: str = "") -> list[str]:
    short = node_name.removeprefix("node-")
    return [f"p-{prefix or short}{i}@{node_name} {labels}" for i in range(1, n + 1)]


ScoreCase = tuple[str, PodInfo, Sequence[str], Sequence[str], Sequence[str], dict[str, int]]

FOO_H1 = C(1, H, SA, "foo")

CASES: list[ScoreCase] = [
    (
        "one constraint on node, no existing pods",
        spread_pod("foo=", FOO_H1),
        (),
        (hn("node-a"), hn("node-b")),
        (),
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, only one node is candidate",
        spread_pod("foo=", FOO_H1),
        (*pods_on("node-a", 2), *pods_on("node-b", 1)),
        (hn("node-a"),),
        (hn("node-b"),),
        {"node-a": 100},
    ),
    (
        "one constraint on node, all nodes have the same number of matching pods",
        spread_pod("foo=", FOO_H1),
        (*pods_on("node-a", 1), *pods_on("node-b", 1)),
        (hn("node-a"), hn("node-b")),
        (),
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, all 4 nodes are candidates",
        spread_pod("foo=", FOO_H1),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-d", 3)),
        (hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")),
        (),
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    (
        "one constraint on node, null selector",
        spread_pod("foo=", C(1, H, SA, None)),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-d", 3)),
        (hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")),
        (),
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        spread_pod("foo=", C(2, H, SA, "foo")),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-d", 3)),
        (hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")),
        (),
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        spread_pod("foo=", C(3, H, SA, "foo")),
        (
            *pods_on("node-a", 4),
            *pods_on("node-b", 3),
            *pods_on("node-c", 2),
            *pods_on("node-d", 1),
        ),
        (hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")),
        (),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates",
        spread_pod("foo=", FOO_H1),
        (
            *pods_on("node-a", 4),
            *pods_on("node-b", 2),
            *pods_on("node-x", 1),
            *pods_on("node-y", 3),
        ),
        (hn("node-a"), hn("node-b"), hn("node-x")),
        (hn("node-y"),),
        {"node-a": 33, "node-b": 83, "node-x": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match "
        "topology key",
        spread_pod("foo=", FOO_H1),
        (
            *pods_on("node-a", 4),
            *pods_on("node-b", 2),
            *pods_on("node-x", 1),
            *pods_on("node-y", 3),
        ),
        (hn("node-a"), "node-b n=node-b", hn("node-x")),
        (hn("node-y"),),
        {"node-a": 16, "node-b": 0, "node-x": 100},
    ),
    (
        "one constraint on zone, 3 out of 4 nodes are candidates",
        spread_pod("foo=", C(1, "zone", SA, "foo")),
        (
            *pods_on("node-a", 4),
            *pods_on("node-b", 2),
            *pods_on("node-x", 1),
            *pods_on("node-y", 3),
        ),
        (zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")),
        (zn("node-y", "zone2"),),
        {"node-a": 75, "node-b": 75, "node-x": 100},
    ),
    (
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        spread_pod("foo=", C(1, "zone", SA, "foo"), FOO_H1),
        (
            *pods_on("node-a", 2),
            *pods_on("node-b", 1),
            *pods_on("node-x", 2),
            *pods_on("node-y", 4),
        ),
        (zn("node-a", "zone1"), zn("node-x", "zone2")),
        (zn("node-b", "zone1"), zn("node-y", "zone2")),
        {"node-a": 100, "node-x": 63},
    ),
    (
        "two Constraints on zone, 2 out of 4 nodes are candidates",
        spread_pod("foo= bar=", C(1, "zone", SA, "foo"), C(1, "zone", SA, "bar")),
        (
            "p-a1@node-a foo= bar=",
            "p-a2@node-a foo=",
            "p-b1@node-b foo= bar=",
            "p-y1@node-y foo=",
            "p-y2@node-y foo= bar=",
            "p-y3@node-y foo=",
        ),
        ("node-a zone=zone1", "node-x zone=zone2"),
        ("node-b zone=zone1", "node-y zone=zone2"),
        {"node-a": 85, "node-x": 100},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors",
        spread_pod("foo= bar=", C(1, "zone", SA, "foo"), C(1, H, SA, "bar")),
        ("p-a1@node-a foo=", "p-b1@node-b foo= bar=", "p-y1@node-y foo=", "p-y2@node-y bar="),
        (
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            zn("node-x", "zone2"),
            zn("node-y", "zone2"),
        ),
        (),
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        spread_pod("foo= bar=", C(1, "zone", SA, "foo"), C(1, H, SA, "bar")),
        ("p-b1@node-b bar=", "p-x1@node-x foo=", "p-y1@node-y foo= bar="),
        (
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            zn("node-x", "zone2"),
            zn("node-y", "zone2"),
        ),
        (),
        {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes "
        "are candidates",
        spread_pod("foo= bar=", C(1, "zone", SA, "foo"), C(1, H, SA, "bar")),
        ("p-a1@node-a foo=", "p-b1@node-b foo= bar=", "p-y1@node-y foo=", "p-y2@node-y bar="),
        (zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")),
        (zn("node-y", "zone2"),),
        {"node-a": 50, "node-b": 25, "node-x": 100},
    ),
    (
        "existing pods in a different namespace do not count",
        spread_pod("foo=", FOO_H1),
        ("p-a1@node-a ns=ns1 foo=", "p-a2@node-a foo=", "p-b1@node-b foo=", "p-b2@node-b foo="),
        (hn("node-a"), hn("node-b")),
        (),
        {"node-a": 100, "node-b": 33},
    ),
    (
        "terminating Pods should be excluded",
        spread_pod("foo=", FOO_H1),
        ("p-a@node-a foo= !terminating", "p-b@node-b foo="),
        (hn("node-a"), hn("node-b")),
        (),
        {"node-a": 100, "node-b": 0},
    ),
    (
        "minDomains has no effect when ScheduleAnyway",
        spread_pod("foo=", C(2, "node", SA, "foo", min_domains=10)),
        (*pods_on("node-a", 2), *pods_on("node-b", 2), *pods_on("node-c", 1)),
        ("node-a node=node-a", "node-b node=node-b", "node-c node=node-c"),
        (),
        {"node-a": 75, "node-b": 75, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy honoed with labelSelectors",
        spread_pod("foo=", C(1, "node", SA, "foo"), node_selector={"foo": ""}),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-c", 1)),
        ("node-a node=node-a foo=", "node-b node=node-b foo=", "node-c node=node-c"),
        (),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy ignored with labelSelectors",
        spread_pod("foo=", C(1, "node", SA, "foo", naff="Ignore"), node_selector={"foo": ""}),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-c", 1)),
        ("node-a node=node-a foo=", "node-b node=node-b foo=", "node-c node=node-c"),
        (),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy honoed with nodeAffinity",
        spread_pod("foo=", C(1, "node", SA, "foo"), affinity_in=("foo", [""])),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-c", 1)),
        ("node-a node=node-a foo=", "node-b node=node-b foo=", "node-c node=node-c"),
        (),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy ignored with nodeAffinity",
        spread_pod("foo=", C(1, "node", SA, "foo", naff="Ignore"), affinity_in=("foo", [""])),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-c", 1)),
        ("node-a node=node-a foo=", "node-b node=node-b foo=", "node-c node=node-c"),
        (),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    (
        "NodeTaintsPolicy honored",
        spread_pod("foo=", C(1, "node", SA, "foo", ntaint="Honor")),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-c", 1)),
        ("node-a node=node-a", "node-b node=node-b", "node-c node=node-c !taint"),
        (),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    (
        "NodeTaintsPolicy ignored",
        spread_pod("foo=", C(1, "node", SA, "foo")),
        (*pods_on("node-a", 2), *pods_on("node-b", 1), *pods_on("node-c", 1)),
        ("node-a node=node-a", "node-b node=node-b", "node-c node=node-c !taint"),
        (),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    (
        "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        spread_pod("foo= bar=", C(1, "zone", SA, {}, mlk=["foo"]), C(1, H, SA, {}, mlk=["bar"])),
        ("p-a1@node-a foo=", "p-b1@node-b foo= bar=", "p-y1@node-c foo=", "p-y2@node-c bar="),
        (
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            zn("node-c", "zone2"),
            zn("node-d", "zone2"),
        ),
        (),
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
    ),
    (
        "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
        spread_pod("foo= bar= baz=", C(1, "zone", SA, "foo"), C(1, H, SA, "bar", mlk=["baz"])),
        (
            "p-a1@node-a foo=",
            "p-b1@node-b foo= bar= baz=",
            "p-c1@node-c foo=",
            "p-c2@node-c bar=",
            "p-d3@node-c bar= baz=",
        ),
        (
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            zn("node-c", "zone2"),
            zn("node-d", "zone2"),
        ),
        (),
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
    ),
]


def run_score(
    incoming: PodInfo,
    pod_specs: Sequence[str],
    node_specs: Sequence[str],
    failed_specs: Sequence[str] = (),
    args: PodTopologySpreadArgs = SYSTEM,
    objects: Sequence[pb.ClusterObject] = (),
    batch: bool = True,
) -> dict[str, int]:
    nodes = [node(s) for s in node_specs]
    failed = [node(s) for s in failed_specs]
    snap = snapshot_of([*nodes, *failed], [pod(s) for s in pod_specs], objects)
    pl = PodTopologySpread(args)
    names = [n.name for n in nodes]
    feasible = snap.batch(names)
    state = fresh_state()
    st = pl.pre_score(state, incoming, feasible)
    assert st.is_success, st
    # Score may run in another call: the state travels encoded.
    state = fresh_state(state.encode())
    if batch:
        scores = pl.score_nodes(state, incoming, feasible)
    else:
        scores = np.asarray(
            [pl.score(state, incoming, snap.nodes[n]) for n in names], dtype=np.int64
        )
    st = pl.normalize_score(state, incoming, feasible, scores)
    assert st.is_success, st
    return dict(zip(names, scores.tolist(), strict=True))


@pytest.mark.parametrize(
    ("name", "incoming", "pods", "nodes", "failed", "want"), CASES, ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("batch", [False, True], ids=["per-node", "batch"])
def test_score(
    name: str,
    incoming: PodInfo,
    pods: Sequence[str],
    nodes: Sequence[str],
    failed: Sequence[str],
    want: dict[str, int],
    batch: bool,
) -> None:
    assert run_score(incoming, pods, nodes, failed, batch=batch) == want


def test_system_defaulting_nodes_dont_have_zone_pods_match_service() -> None:
    # TestPodTopologySpreadScore, "system defaulting, nodes don't have zone, pods
    # match service": the Service's selector spreads the pod by hostname.
    svc = make_object(SERVICES, "svc", spec={"selector": {"foo": ""}})
    got = run_score(
        spread_pod("foo="),
        (
            *pods_on("node-a", 4),
            *pods_on("node-b", 3),
            *pods_on("node-c", 2),
            *pods_on("node-d", 1),
        ),
        (hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")),
        objects=[svc],
    )
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}


# -- TestPreScoreSkip --------------------------------------------------------------------


def test_pre_score_skips_a_pod_without_soft_constraints() -> None:
    snap = snapshot_of([node(hn("node-a")), node(hn("node-b"))])
    st = PodTopologySpread(LIST).pre_score(CycleState(), spread_pod(""), snap.all_nodes())
    assert st.is_skip


def test_pre_score_skips_default_constraints_and_a_replicaset_that_doesnt_match() -> None:
    args = PodTopologySpreadArgs(
        default_constraints=[DefaultConstraint(2, "planet", SA)], defaulting_type="List"
    )
    rs = make_object(
        REPLICASETS,
        "rs1",
        spec={"selector": {"matchExpressions": [{"key": "tar", "operator": "Exists"}]}},
    )
    snap = snapshot_of([node("node-a planet=mars")], objects=[rs])
    incoming = spread_pod("foo=bar baz=sup", owner=("ReplicaSet", "rs2"))
    st = PodTopologySpread(args).pre_score(CycleState(), incoming, snap.all_nodes())
    assert st.is_skip


def test_pre_score_skips_a_pod_with_only_hard_constraints() -> None:
    snap = snapshot_of([node(hn("node-a"))])
    incoming = spread_pod("foo=", C(1, H, DNS, "foo"))
    assert PodTopologySpread(LIST).pre_score(CycleState(), incoming, snap.all_nodes()).is_skip


# -- TestPreScoreStateEmptyNodes (a selection) ---------------------------------------------


def pre_score_state(
    incoming: PodInfo,
    node_specs: Sequence[str],
    args: PodTopologySpreadArgs = LIST,
    objects: Sequence[pb.ClusterObject] = (),
) -> tuple[list[tuple[int, str]], set[str], list[dict[str, int]], list[float]]:
    snap = snapshot_of([node(s) for s in node_specs], objects=objects)
    state = CycleState()
    st = PodTopologySpread(args).pre_score(state, incoming, snap.all_nodes())
    assert st.is_success, st
    s = state.read(PRE_SCORE_STATE_KEY)
    return (
        [(c.max_skew, c.topology_key) for c in s.constraints],
        set(s.ignored_nodes),
        s.topology_value_to_pod_counts,
        s.topology_normalizing_weight,
    )


def w(n: int) -> float:
    return math.log(n + 2)


def test_pre_score_state_normal_case() -> None:
    got = pre_score_state(
        spread_pod("foo=", C(1, "zone", SA, "foo"), C(1, H, SA, "foo")),
        (zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")),
    )
    assert got == ([(1, "zone"), (1, H)], set(), [{"zone1": 0, "zone2": 0}, {}], [w(2), w(3)])


def test_pre_score_state_node_x_doesnt_have_label_zone() -> None:
    got = pre_score_state(
        spread_pod("foo=", C(1, "zone", SA, "foo"), C(1, H, SA, "foo")),
        (zn("node-a", "zone1"), zn("node-b", "zone1"), hn("node-x")),
    )
    assert got == ([(1, "zone"), (1, H)], {"node-x"}, [{"zone1": 0}, {}], [w(1), w(2)])


def test_pre_score_state_system_default_constraints_and_a_replicaset() -> None:
    rs = make_object(
        REPLICASETS,
        "rs1",
        spec={"selector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}},
    )
    zone = "topology.kubernetes.io/zone"
    got = pre_score_state(
        spread_pod("foo=tar baz=sup", owner=("ReplicaSet", "rs1")),
        (
            hn("node-a", f"{zone}=mars"),
            hn("node-b", f"{zone}=mars"),
            # Nodes with no zone are not excluded: they are a zone of their own.
            hn("node-c"),
            hn("node-d"),
        ),
        SYSTEM,
        [rs],
    )
    assert got == ([(3, H), (5, zone)], set(), [{}, {"mars": 0, "": 0}], [w(4), w(2)])


def test_pre_score_state_default_constraints_and_a_replicaset() -> None:
    args = PodTopologySpreadArgs(
        default_constraints=[
            DefaultConstraint(1, H, SA),
            DefaultConstraint(2, "rack", DNS),
            DefaultConstraint(2, "planet", SA),
        ],
        defaulting_type="List",
    )
    rs = make_object(
        REPLICASETS,
        "rs1",
        spec={"selector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}},
    )
    got = pre_score_state(
        spread_pod("foo=tar baz=sup", owner=("ReplicaSet", "rs1")),
        (hn("node-a", "rack=rack1", "planet=mars"),),
        args,
        [rs],
    )
    assert got == ([(1, H), (2, "planet")], set(), [{}, {"mars": 0}], [w(1), w(1)])


def test_pre_score_state_default_constraints_and_a_replicaset_but_pod_has_constraints() -> None:
    args = PodTopologySpreadArgs(
        default_constraints=[DefaultConstraint(2, "galaxy", SA)], defaulting_type="List"
    )
    rs = make_object(REPLICASETS, "rs1", spec={"selector": {"matchLabels": {"foo": "bar"}}})
    incoming = spread_pod(
        "foo=bar baz=sup",
        C(1, "zone", DNS, "bar"),
        C(2, "planet", SA, {"baz": "sup"}),
        owner=("ReplicaSet", "rs1"),
    )
    got = pre_score_state(incoming, ("node-a planet=mars galaxy=andromeda",), args, [rs])
    assert got == ([(2, "planet")], set(), [{"mars": 0}], [w(1)])


def test_default_selector_merges_services_and_the_statefulset() -> None:
    objs = [
        make_object(SERVICES, "svc1", spec={"selector": {"app": "web"}}),
        make_object(SERVICES, "svc-other-ns", "other", spec={"selector": {"app": "web"}}),
        make_object(SERVICES, "no-selector", spec={}),
        make_object(SERVICES, "mismatch", spec={"selector": {"app": "db"}}),
        make_object(STATEFULSETS, "ss", spec={"selector": {"matchLabels": {"tier": "a"}}}),
    ]
    snap = snapshot_of(
        [node(hn("node-a"))], [pod("e1@node-a app=web tier=a"), pod("e2@node-a app=web")], objs
    )
    incoming = spread_pod("app=web tier=a", owner=("StatefulSet", "ss"))
    state = CycleState()
    assert PodTopologySpread(SYSTEM).pre_score(state, incoming, snap.all_nodes()).is_success
    s = state.read(PRE_SCORE_STATE_KEY)
    sel = s.constraints[0].selector
    assert {(r.key, r.values) for r in sel.requirements} == {
        ("app", frozenset({"web"})),
        ("tier", frozenset({"a"})),
    }
    assert PodTopologySpread(SYSTEM).score(state, incoming, snap.nodes["node-a"]) == round(
        1 * w(1) + 2
    )


def test_default_selector_follows_the_services_of_the_snapshot() -> None:
    """default_selector keeps a pod kind's selector while the snapshot's
    objects stay as they were: a Service added, changed or deleted later is
    seen by the next cycle (Snapshot.object_generation)."""
    snap = snapshot_of([node(hn("node-a"))])
    incoming = spread_pod("app=web")

    def selected() -> set[tuple[str, frozenset[str]]]:
        state = CycleState()
        st = PodTopologySpread(SYSTEM).pre_score(state, incoming, snap.all_nodes())
        if st.is_skip:
            return set()
        sel = state.read(PRE_SCORE_STATE_KEY).constraints[0].selector
        return {(r.key, r.values) for r in sel.requirements}

    assert selected() == set()
    delta = pb.ClusterDelta()
    delta.upsert_objects.append(make_object(SERVICES, "svc", spec={"selector": {"app": "web"}}))
    snap.apply(delta)
    assert selected() == {("app", frozenset({"web"}))}
    delta = pb.ClusterDelta()
    delta.upsert_objects.append(
        make_object(SERVICES, "svc", spec={"selector": {"app": "web", "tier": "a"}})
    )
    snap.apply(delta)
    assert selected() == set()  # the Service no longer selects the pod
    svc2 = make_object(SERVICES, "svc2", spec={"selector": {"app": "web"}})
    delta = pb.ClusterDelta()
    delta.upsert_objects.append(svc2)
    snap.apply(delta)
    assert selected() == {("app", frozenset({"web"}))}
    delta = pb.ClusterDelta()
    delta.delete_objects.append(svc2.ref)
    snap.apply(delta)
    assert selected() == set()


def test_normalize_score_gives_ignored_nodes_zero() -> None:
    got = run_score(
        spread_pod("foo=", C(1, "zone", SA, "foo")),
        ("p-a1@node-a foo=",),
        ("node-a zone=z1", "node-b zone=z2", "node-c"),
    )
    assert got == {"node-a": 0, "node-b": 100, "node-c": 0}


def test_topology_normalizing_weight() -> None:
    assert topology_normalizing_weight(0) == math.log(2)
    assert topology_normalizing_weight(5000) == pytest.approx(8.517, abs=1e-3)


def test_default_constraints_ignore_their_match_label_keys() -> None:
    # buildDefaultConstraints overwrites the selector, matchLabelKeys included.
    args = PodTopologySpreadArgs(
        default_constraints=[DefaultConstraint(1, H, SA, match_label_keys=["v"])],
        defaulting_type="List",
    )
    svc = make_object(SERVICES, "svc", spec={"selector": {"app": "web"}})
    got = pre_score_state(spread_pod("app=web v=1"), (hn("node-a"),), args, [svc])
    snap = snapshot_of([node(hn("node-a"))], objects=[svc])
    state = CycleState()
    PodTopologySpread(args).pre_score(state, spread_pod("app=web v=1"), snap.all_nodes())
    sel = state.read(PRE_SCORE_STATE_KEY).constraints[0].selector
    assert [(r.key, r.values) for r in sel.requirements] == [("app", frozenset({"web"}))]
    assert got[0] == [(1, H)]
