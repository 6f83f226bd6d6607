"""TaintToleration, after upstream's taint_toleration_test.go at v1.36
(TestTaintTolerationFilter, TestTaintTolerationFilterWithFeatureGate,
TestTaintTolerationScore) and helper/normalize_score_test.go
(TestDefaultNormalizeScore). Case ids are upstream's test names. The Lt/Gt
cases upstream runs with the alpha gate TaintTolerationComparisonOperators on
are run here as upstream runs them with the gate off (its default), which is
what Berth serves."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState, StateError
from berth.framework.interfaces import MAX_NODE_SCORE, Plugin
from berth.framework.model import PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.queuesort import PrioritySort
from berth.plugins.tainttoleration import (
    ERR_REASON_UNTOLERATED,
    PRE_SCORE_STATE_KEY,
    TaintToleration,
)
from berth.plugins.tainttoleration.taint_toleration import (
    PreScoreState,
    TolerationRecord,
    default_normalize_score,
    taint_index,
)

REJECTED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) had untolerated taint(s)",))
OK = Status()

Taint = tuple[str, str, str]  # key, value, effect
Toleration = tuple[str, str, str, str]  # key, operator, value, effect


def node_with_taints(name: str, taints: Sequence[Taint]) -> pb.Node:
    """taint_toleration_test.go, nodeWithTaints."""
    w = make_node(name)
    for key, value, effect in taints:
        w.taint(key, value, effect)
    return w.obj()


def pod_with_tolerations(tolerations: Sequence[Toleration]) -> PodInfo:
    """taint_toleration_test.go, podWithTolerations."""
    w = make_pod("pod1")
    for key, operator, value, effect in tolerations:
        w.toleration(key, value=value, effect=effect, operator=operator)
    return w.info()


def test_reason_is_upstreams() -> None:
    assert ERR_REASON_UNTOLERATED == "node(s) had untolerated taint(s)"


# -- Filter: TestTaintTolerationFilter, TestTaintTolerationFilterWithFeatureGate

NS, PNS, NE = "NoSchedule", "PreferNoSchedule", "NoExecute"

FILTER_CASES: list[tuple[str, list[Toleration], list[Taint], Status]] = [
    (
        "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
        [],
        [("dedicated", "user1", NS)],
        REJECTED,
    ),
    (
        "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
        [("dedicated", "", "user1", NS)],
        [("dedicated", "user1", NS)],
        OK,
    ),
    (
        "A pod which can't be scheduled on a dedicated node assigned to user2 with effect NoSchedule",
        [("dedicated", "Equal", "user2", NS)],
        [("dedicated", "user1", NS)],
        REJECTED,
    ),
    (
        "A pod can be scheduled onto the node, with a toleration uses operator Exists "
        "that tolerates the taints on the node",
        [("foo", "Exists", "", NS)],
        [("foo", "bar", NS)],
        OK,
    ),
    (
        "A pod has multiple tolerations, node has multiple taints, all the taints are "
        "tolerated, pod can be scheduled onto the node",
        [("dedicated", "Equal", "user2", NS), ("foo", "Exists", "", NS)],
        [("dedicated", "user2", NS), ("foo", "bar", NS)],
        OK,
    ),
    (
        "A pod has a toleration that keys and values match the taint on the node, but "
        "(non-empty) effect doesn't match, can't be scheduled onto the node",
        [("foo", "Equal", "bar", PNS)],
        [("foo", "bar", NS)],
        REJECTED,
    ),
    (
        "The pod has a toleration that keys and values match the taint on the node, the effect "
        "of toleration is empty, and the effect of taint is NoSchedule. Pod can be scheduled "
        "onto the node",
        [("foo", "Equal", "bar", "")],
        [("foo", "bar", NS)],
        OK,
    ),
    (
        "The pod has a toleration that key and value don't match the taint on the node, but the "
        "effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
        [("dedicated", "Equal", "user2", NS)],
        [("dedicated", "user1", PNS)],
        OK,
    ),
    (
        "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. "
        "Pod can be scheduled onto the node",
        [],
        [("dedicated", "user1", PNS)],
        OK,
    ),
    # Upstream runs these with the gate on; with it off the comparison
    # tolerations match nothing, so all four reject.
    (
        "Pod with Gt toleration cannot be scheduled on node when taint value is lower than "
        "threshold",
        [("node.example.com/priority-level", "Gt", "950", NS)],
        [("node.example.com/priority-level", "800", NS)],
        REJECTED,
    ),
    (
        "Pod with Gt toleration (gate on: can be scheduled, taint value higher) is rejected "
        "with the gate off",
        [("node.kubernetes.io/sla", "Gt", "750", NS)],
        [("node.kubernetes.io/sla", "950", NS)],
        REJECTED,
    ),
    (
        "Pod with Lt toleration cannot be scheduled on node when taint value is higher than "
        "threshold",
        [("node.example.com/priority-level", "Lt", "800", NS)],
        [("node.example.com/priority-level", "950", NS)],
        REJECTED,
    ),
    (
        "Pod with Gt toleration cannot be scheduled on node with non-numeric taint value",
        [("node.kubernetes.io/sla", "Gt", "950", NS)],
        [("node.kubernetes.io/sla", "high", NS)],
        REJECTED,
    ),
    # TestTaintTolerationFilterWithFeatureGate, the gate-off cases.
    (
        "Pod with Gt toleration cannot be scheduled when feature gate is disabled",
        [("node.kubernetes.io/sla", "Gt", "750", NS)],
        [("node.kubernetes.io/sla", "950", NS)],
        REJECTED,
    ),
    (
        "Pod with Lt toleration cannot be scheduled when feature gate is disabled",
        [("node.kubernetes.io/sla", "Lt", "950", NS)],
        [("node.kubernetes.io/sla", "800", NS)],
        REJECTED,
    ),
    (
        "Pod with mixed tolerations (Equal and Gt) when feature gate is disabled - only Equal "
        "is honored",
        [("dedicated", "Equal", "user1", NS), ("node.kubernetes.io/sla", "Gt", "750", NS)],
        [("dedicated", "user1", NS)],
        OK,
    ),
    (
        "Pod with mixed tolerations, Gt toleration needed but filtered out when feature gate "
        "is disabled",
        [("dedicated", "Equal", "user1", NS), ("node.kubernetes.io/sla", "Gt", "750", NS)],
        [("dedicated", "user1", NS), ("node.kubernetes.io/sla", "950", NS)],
        REJECTED,
    ),
    # Berth's own: the other effect Filter checks, and nodes without taints.
    ("NoExecute taints are checked like NoSchedule", [], [("k", "v", NE)], REJECTED),
    (
        "a NoExecute toleration tolerates a NoExecute taint",
        [("k", "Exists", "", NE)],
        [("k", "v", NE)],
        OK,
    ),
    ("a node without taints fits any pod", [], [], OK),
    (
        "an empty key with Exists tolerates every taint",
        [("", "Exists", "", "")],
        [("a", "1", NS), ("b", "2", NE)],
        OK,
    ),
    (
        "one untolerated taint among tolerated ones rejects",
        [("a", "Exists", "", NS)],
        [("a", "1", NS), ("b", "2", NS)],
        REJECTED,
    ),
]


@pytest.mark.parametrize(
    ("tolerations", "taints", "want"),
    [pytest.param(tol, taints, want, id=name) for name, tol, taints, want in FILTER_CASES],
)
def test_filter_matches_upstream_taint_toleration_filter(
    tolerations: list[Toleration], taints: list[Taint], want: Status
) -> None:
    """TestTaintTolerationFilter / TestTaintTolerationFilterWithFeatureGate:
    per-node and batch forms give upstream's status."""
    snap = snapshot_of([node_with_taints("nodeA", taints)])
    pod = pod_with_tolerations(tolerations)
    plugin = TaintToleration()
    assert plugin.filter(fresh_state(), pod, snap.nodes["nodeA"]) == want
    assert plugin.filter_nodes(fresh_state(), pod, batch_of(snap)).status_of(0) == want


def test_filter_rejection_is_unresolvable_and_names_no_taint() -> None:
    """taint_toleration.go, Filter: UnschedulableAndUnresolvable; the taint's
    key and value are not in the reason."""
    snap = snapshot_of([node_with_taints("n", [("secret-key", "secret-value", NS)])])
    st = TaintToleration().filter(fresh_state(), pod_with_tolerations([]), snap.nodes["n"])
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "secret" not in st.message


# -- Score: TestTaintTolerationScore ----------------------------------------

SCORE_CASES: list[tuple[str, list[Toleration], list[list[Taint]], list[int]]] = [
    (
        "node with taints tolerated by the pod, gets a higher score than those node with "
        "intolerable taints",
        [("foo", "Equal", "bar", PNS)],
        [[("foo", "bar", PNS)], [("foo", "blah", PNS)]],
        [MAX_NODE_SCORE, 0],
    ),
    (
        "the nodes that all of their taints are tolerated by the pod, get the same score, no "
        "matter how many tolerable taints a node has",
        [("cpu-type", "Equal", "arm64", PNS), ("disk-type", "Equal", "ssd", PNS)],
        [[], [("cpu-type", "arm64", PNS)], [("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)]],
        [MAX_NODE_SCORE, MAX_NODE_SCORE, MAX_NODE_SCORE],
    ),
    (
        "the more intolerable taints a node has, the lower score it gets.",
        [("foo", "Equal", "bar", PNS)],
        [[], [("cpu-type", "arm64", PNS)], [("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)]],
        [MAX_NODE_SCORE, 50, 0],
    ),
    (
        "only taints and tolerations that have effect PreferNoSchedule are checked by "
        "taints-tolerations priority function",
        [("cpu-type", "Equal", "arm64", NS), ("disk-type", "Equal", "ssd", NS)],
        [[], [("cpu-type", "arm64", NS)], [("cpu-type", "arm64", PNS), ("disk-type", "ssd", PNS)]],
        [MAX_NODE_SCORE, MAX_NODE_SCORE, 0],
    ),
    (
        "Default behaviour No taints and tolerations, lands on node with no taints",
        [],
        [[], [("cpu-type", "arm64", PNS)]],
        [MAX_NODE_SCORE, 0],
    ),
    # Upstream runs these with the gate on (the matching node scores 100);
    # with it off neither node's taint is tolerated and both score 0.
    (
        "Numeric Gt operator (gate off): the Gt toleration matches no SLA taint",
        [("node.kubernetes.io/sla", "Gt", "950", PNS)],
        [[("node.kubernetes.io/sla", "800", PNS)], [("node.kubernetes.io/sla", "999", PNS)]],
        [0, 0],
    ),
    (
        "Numeric Lt operator (gate off): the Lt toleration matches no SLA taint",
        [("node.kubernetes.io/sla", "Lt", "800", PNS)],
        [[("node.kubernetes.io/sla", "950", PNS)], [("node.kubernetes.io/sla", "700", PNS)]],
        [0, 0],
    ),
    # Berth's own.
    (
        "a toleration with an empty effect counts for PreferNoSchedule taints",
        [("foo", "Exists", "", "")],
        [[("foo", "x", PNS)], [("bar", "x", PNS)]],
        [MAX_NODE_SCORE, 0],
    ),
    (
        "NoExecute taints do not count towards the score",
        [],
        [[("a", "1", NE)], [("a", "1", PNS), ("b", "2", PNS), ("c", "3", PNS)]],
        [MAX_NODE_SCORE, 0],
    ),
    (
        "scores scale with Go's truncating division",
        [],
        [[], [("a", "", PNS)], [("a", "", PNS), ("b", "", PNS)], [(k, "", PNS) for k in "abc"]],
        [100, 67, 34, 0],
    ),
]


def run_score(pod: PodInfo, nodes: list[pb.Node], batch: bool) -> list[int]:
    """PreScore, Score over every node, NormalizeScore, as upstream's test does."""
    snap = snapshot_of(nodes)
    plugin = TaintToleration()
    state = fresh_state()
    nb = batch_of(snap, [n.name for n in nodes])
    assert plugin.pre_score(state, pod, nb) == OK
    if batch:
        scores = plugin.score_nodes(state, pod, nb)
    else:
        scores = np.asarray([plugin.score(state, pod, ni) for ni in nb], dtype=np.int64)
    assert plugin.normalize_score(state, pod, nb, scores) == OK
    return [int(s) for s in scores]


@pytest.mark.parametrize("batch", [False, True], ids=["per-node", "batch"])
@pytest.mark.parametrize(
    ("tolerations", "taints", "want"),
    [pytest.param(tol, taints, want, id=name) for name, tol, taints, want in SCORE_CASES],
)
def test_score_matches_upstream_taint_toleration_score(
    tolerations: list[Toleration], taints: list[list[Taint]], want: list[int], batch: bool
) -> None:
    """TestTaintTolerationScore: normalised scores per node."""
    nodes = [node_with_taints(f"node{chr(65 + i)}", t) for i, t in enumerate(taints)]
    assert run_score(pod_with_tolerations(tolerations), nodes, batch) == want


def test_raw_score_counts_untolerated_prefer_no_schedule_taints() -> None:
    """countIntolerableTaintsPreferNoSchedule: the raw score before NormalizeScore."""
    snap = snapshot_of(
        [node_with_taints("n", [("a", "", PNS), ("b", "", PNS), ("c", "", NS), ("d", "", PNS)])]
    )
    pod = pod_with_tolerations([("b", "Exists", "", PNS)])
    plugin = TaintToleration()
    state = fresh_state()
    plugin.pre_score(state, pod, batch_of(snap))
    assert plugin.score(state, pod, snap.nodes["n"]) == 2


def test_pre_score_keeps_prefer_no_schedule_and_empty_effect_tolerations() -> None:
    """getAllTolerationPreferNoSchedule; PreScore never Skips, even without tolerations."""
    snap = snapshot_of([node_with_taints("n", [])])
    plugin = TaintToleration()
    pod = pod_with_tolerations(
        [
            ("a", "Exists", "", NS),
            ("b", "Equal", "x", PNS),
            ("c", "Exists", "", ""),
            ("d", "", "", NE),
        ]
    )
    state = fresh_state()
    assert plugin.pre_score(state, pod, batch_of(snap)) == OK
    assert state.read(PRE_SCORE_STATE_KEY).tolerations_prefer_no_schedule == [
        TolerationRecord("b", "Equal", "x", PNS),
        TolerationRecord("c", "Exists", "", ""),
    ]
    empty = fresh_state()
    assert plugin.pre_score(empty, pod_with_tolerations([]), batch_of(snap)) == OK
    assert empty.read(PRE_SCORE_STATE_KEY) == PreScoreState([])


def test_pre_score_state_survives_the_wire() -> None:
    """CycleState travels to the caller between PreScore and Score."""
    snap = snapshot_of([node_with_taints("n", [("a", "", PNS)]), node_with_taints("m", [])])
    plugin = TaintToleration()
    pod = pod_with_tolerations([("x", "Exists", "", PNS)])
    state = fresh_state()
    plugin.pre_score(state, pod, batch_of(snap))
    again = CycleState.decode(state.encode())
    assert plugin.score_nodes(again, pod, batch_of(snap, ["n", "m"])).tolist() == [1, 0]


def test_score_without_pre_score_state_fails() -> None:
    """taint_toleration.go, Score: getPreScoreState's error fails the call."""
    snap = snapshot_of([node_with_taints("n", [])])
    plugin = TaintToleration()
    with pytest.raises(StateError, match='failed to read "PreScoreTaintToleration"'):
        plugin.score(fresh_state(), pod_with_tolerations([]), snap.nodes["n"])
    with pytest.raises(StateError, match='failed to read "PreScoreTaintToleration"'):
        plugin.score_nodes(fresh_state(), pod_with_tolerations([]), batch_of(snap))


# -- NormalizeScore: helper.DefaultNormalizeScore -----------------------------


@pytest.mark.parametrize(
    ("reverse", "scores", "want"),
    [
        (False, [1, 2, 3, 4], [25, 50, 75, 100]),
        (True, [1, 2, 3, 4], [75, 50, 25, 0]),
        (False, [1000, 10, 20, 30], [100, 1, 2, 3]),
        (True, [1000, 10, 20, 30], [0, 99, 98, 97]),
        (False, [1, 1, 1, 1], [100, 100, 100, 100]),
        (False, [1000, 1, 1, 1], [100, 0, 0, 0]),
        (True, [0, 1, 1, 1], [100, 0, 0, 0]),
        (False, [0, 0, 0, 0], [0, 0, 0, 0]),
        (True, [0, 0, 0, 0], [100, 100, 100, 100]),
        (True, [], []),
    ],
    ids=[f"case_{i}" for i in range(9)] + ["no nodes"],
)
def test_default_normalize_score_matches_upstream(
    reverse: bool, scores: list[int], want: list[int]
) -> None:
    """helper/normalize_score_test.go, TestDefaultNormalizeScore."""
    arr = np.asarray(scores, dtype=np.int64)
    default_normalize_score(MAX_NODE_SCORE, reverse, arr)
    assert arr.tolist() == want


# -- batch forms agree with per-node forms ----------------------------------


def test_batch_forms_agree_with_per_node_forms_on_random_clusters() -> None:
    rng = random.Random(7)
    keys, values = ["a", "b", "c"], ["", "1", "2"]
    effects = [NS, PNS, NE]
    ops = ["", "Equal", "Exists", "Gt"]
    for _ in range(60):
        nodes = [
            node_with_taints(
                f"n{i}",
                [
                    (rng.choice(keys), rng.choice(values), rng.choice(effects))
                    for _ in range(rng.randrange(4))
                ],
            )
            for i in range(rng.randrange(1, 25))
        ]
        tolerations: list[Toleration] = [
            (
                rng.choice(["", *keys]),
                rng.choice(ops),
                rng.choice(values),
                rng.choice(["", *effects]),
            )
            for _ in range(rng.randrange(4))
        ]
        pod = pod_with_tolerations(tolerations)
        snap = snapshot_of(nodes)
        nb = batch_of(snap)
        plugin = TaintToleration()
        state = fresh_state()
        verdicts = plugin.filter_nodes(state, pod, nb)
        for k, ni in enumerate(nb):
            assert verdicts.status_of(k) == plugin.filter(state, pod, ni)
        assert len(verdicts.statuses) <= 1  # one shared Status
        plugin.pre_score(state, pod, nb)
        per_node = [plugin.score(state, pod, ni) for ni in nb]
        assert plugin.score_nodes(state, pod, nb).tolist() == per_node


def test_batch_filter_tells_apart_taints_differing_only_in_effect() -> None:
    """The per-call memo keys a taint by key, value and effect."""
    snap = snapshot_of(
        [node_with_taints("ns", [("k", "v", NS)]), node_with_taints("ne", [("k", "v", NE)])]
    )
    pod = pod_with_tolerations([("k", "Equal", "v", NS)])
    verdicts = TaintToleration().filter_nodes(fresh_state(), pod, batch_of(snap, ["ns", "ne"]))
    assert verdicts.passed().tolist() == [True, False]


def test_batch_forms_follow_node_changes_in_one_snapshot() -> None:
    """The TaintIndex behind the batch forms is per snapshot: a node that gains
    or loses a taint, a new tainted node and a deleted one (its slot reused)
    are all seen on the next call, agreeing with the per-node forms."""
    snap = snapshot_of([node_with_taints("a", []), node_with_taints("b", [])])
    pod = pod_with_tolerations([])
    plugin = TaintToleration()

    def check(want_pass: dict[str, bool], want_score: dict[str, int]) -> None:
        nb = batch_of(snap)
        state = fresh_state()
        names = nb.names
        verdicts = plugin.filter_nodes(state, pod, nb)
        assert dict(zip(names, verdicts.passed().tolist(), strict=True)) == want_pass
        for k, ni in enumerate(nb):
            assert verdicts.status_of(k) == plugin.filter(state, pod, ni)
        plugin.pre_score(state, pod, nb)
        scores = plugin.score_nodes(state, pod, nb).tolist()
        assert dict(zip(names, scores, strict=True)) == want_score
        assert scores == [plugin.score(state, pod, ni) for ni in nb]

    check({"a": True, "b": True}, {"a": 0, "b": 0})
    # An update replaces b's record with a tainted one.
    snap.apply(pb.ClusterDelta(upsert_nodes=[node_with_taints("b", [("k", "", NS)])]))
    check({"a": True, "b": False}, {"a": 0, "b": 0})
    snap.apply(pb.ClusterDelta(upsert_nodes=[node_with_taints("a", [("s", "", PNS)])]))
    check({"a": True, "b": False}, {"a": 1, "b": 0})
    # b's taint lifted; a deleted and c takes its slot with a NoExecute taint.
    snap.apply(
        pb.ClusterDelta(
            delete_nodes=["a"],
            upsert_nodes=[node_with_taints("b", []), node_with_taints("c", [("x", "", NE)])],
        )
    )
    check({"b": True, "c": False}, {"b": 0, "c": 0})


def test_the_taint_index_walks_the_nodes_only_after_a_node_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Snapshot.node_generation moves with node upserts and deletions, not
    with pods; while it stands still the index is current and the node
    records are not walked again, in any cycle."""
    snap = snapshot_of([node_with_taints("a", []), node_with_taints("b", [("k", "", NS)])])
    walks = 0
    real_order = snap.node_order

    def counted() -> np.ndarray:
        nonlocal walks
        walks += 1
        return real_order()

    monkeypatch.setattr(snap, "node_order", counted)
    index = taint_index(snap, fresh_state())
    assert (walks, index.tainted_any) == (1, True)
    generation = snap.node_generation
    snap.apply(pb.ClusterDelta(upsert_pods=[make_pod("p").node("a").obj()]))
    assert snap.node_generation == generation
    for _ in range(3):
        assert taint_index(snap, fresh_state()) is index
    assert walks == 1
    # b's taint lifted: one more walk, and the index says so.
    snap.apply(pb.ClusterDelta(upsert_nodes=[node_with_taints("b", [])]))
    assert snap.node_generation > generation
    assert not taint_index(snap, fresh_state()).tainted_any
    assert walks == 2
    generation = snap.node_generation
    snap.apply(pb.ClusterDelta(delete_nodes=["missing"]))
    assert snap.node_generation == generation  # nothing removed
    snap.apply(pb.ClusterDelta(delete_nodes=["a"]))
    assert snap.node_generation > generation


# -- through a whole cycle ---------------------------------------------------

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "TaintToleration": TaintToleration,
    "DefaultBinder": DefaultBinder,
}


def framework() -> Framework:
    """TaintToleration as upstream's default profile enables it: Filter,
    PreScore and Score with weight 3."""
    refs = (PluginRef("TaintToleration"),)
    return Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": (PluginRef("PrioritySort"),),
                "filter": refs,
                "preScore": refs,
                "score": (PluginRef("TaintToleration", 3),),
                "bind": (PluginRef("DefaultBinder"),),
            },
        ),
        REGISTRY,
    )


def test_cycle_prefers_the_node_with_fewest_untolerated_soft_taints() -> None:
    snap = snapshot_of(
        [
            node_with_taints("hard", [("dedicated", "gpu", NS)]),
            node_with_taints("soft2", [("a", "", PNS), ("b", "", PNS)]),
            node_with_taints("soft1", [("a", "", PNS)]),
            node_with_taints("tolerated", [("b", "", PNS)]),
        ]
    )
    pod = pod_with_tolerations([("b", "Exists", "", PNS)])
    result = schedule_pod(framework(), snap, CycleState(), pod, explain=True)
    assert result.status.is_success, result.message
    assert result.node == "tolerated"
    assert result.rejected["hard"] == REJECTED.with_plugin("TaintToleration")
    assert result.scores is not None
    names = result.scores.nodes.names
    weighted = dict(zip(names, result.scores.weighted["TaintToleration"].tolist(), strict=True))
    # Raw 1, 1, 0 -> normalised 0, 0, 100 -> weight 3.
    assert weighted == {"soft2": 0, "soft1": 0, "tolerated": 300}


def test_cycle_failure_message_counts_untolerated_nodes() -> None:
    snap = snapshot_of(
        [
            node_with_taints("a", [("dedicated", "gpu", NS)]),
            node_with_taints("b", [("node.kubernetes.io/not-ready", "", NE)]),
        ]
    )
    result = schedule_pod(framework(), snap, CycleState(), pod_with_tolerations([]))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == "0/2 nodes are available: 2 node(s) had untolerated taint(s)."
    assert result.unschedulable_plugins == {"TaintToleration"}
