"""PreScore, Score and NormalizeScore against upstream's cases
(scoring_test.go: TestPreferredAffinity,
TestPreferredAffinityWithHardPodAffinitySymmetricWeight), written afresh as
tables over the shared fixtures of testutil.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.status import Code
from berth.framework.testing import fresh_state
from berth.plugins.interpodaffinity import PRE_SCORE_STATE_KEY, InterPodAffinityArgs
from berth.plugins.interpodaffinity.inter_pod_affinity import PreScoreState
from tests.plugins.interpodaffinity.testutil import (
    AZ1,
    AZ2,
    RG_CHINA,
    RG_CHINA_AZ1,
    RG_INDIA,
    S1,
    S2,
    TEAM_NAMESPACES,
    exists_without,
    info,
    node,
    pod,
    selector,
    setup,
    term,
    term_in,
)

STAY_S1_REGION = [(5, term_in("security", "region", "S1"))]
STAY_S2_REGION = [(6, term_in("security", "region", "S2"))]
AFFINITY3 = [
    (
        8,
        term("region", selector(exprs=[("security", "NotIn", ["S1"]), ("security", "In", ["S2"])])),
    ),
    (2, term("region", exists_without("security"))),
]
HARD_AFFINITY = [
    term_in("security", "region", "S1", "value2"),
    term("region", exists_without("security")),
]
AWAY_S1_AZ = [(5, term_in("security", "az", "S1"))]
AWAY_S2_AZ = [(5, term_in("security", "az", "S2"))]


@dataclass
class ScoreCase:
    name: str
    pod: pb.Pod
    nodes: list[pb.Node]
    pods: list[pb.Pod] = field(default_factory=list)
    want: list[int] | None = None  # None: PreScore skips
    hard_weight: int = 1
    ignore_existing: bool = False
    namespaces: tuple[pb.ClusterObject, ...] = ()


def _n3() -> list[pb.Node]:
    """node1 in China, node2 in India, node3 in az1 (no region)."""
    return [node("node1", **RG_CHINA), node("node2", **RG_INDIA), node("node3", **AZ1)]


def _china_india() -> list[pb.Node]:
    return [node("node1", **RG_CHINA), node("node2", **RG_INDIA)]


def _e(
    name: str,
    node_name: str,
    labels: dict[str, str],
    affinity: Sequence[pb.PodAffinityTerm] = (),
    preferred: Sequence[tuple[int, pb.PodAffinityTerm]] = (),
    preferred_anti: Sequence[tuple[int, pb.PodAffinityTerm]] = (),
) -> pb.Pod:
    """An existing pod of scoring_test.go (e1, e2, ...)."""
    return pod(
        name,
        node=node_name,
        labels=labels,
        affinity=affinity,
        preferred=preferred,
        preferred_anti=preferred_anti,
    )


def _s1_s2_s1() -> list[pb.Pod]:
    return [_e("e1", "node1", S1), _e("e2", "node2", S2), _e("e3", "node3", S1)]


def _team_preferred(*namespaces: str) -> list[tuple[int, pb.PodAffinityTerm]]:
    """Weight 5 for ``security In (S1)`` pods in team1's namespaces (and
    ``namespaces``), per region."""
    return [
        (
            5,
            term(
                "region",
                selector(exprs=[("security", "In", ["S1"])]),
                namespaces,
                namespace_selector=selector({"team": "team1"}),
            ),
        )
    ]


def _existing_with_preferred_terms() -> list[pb.Pod]:
    return [
        _e(
            "e1",
            "node1",
            S1,
            preferred=[(8, term_in("security", "region", "S1"))],
            preferred_anti=[(5, term_in("security", "az", "S2"))],
        ),
        _e("e2", "node2", S2, preferred=STAY_S2_REGION),
    ]


# scoring_test.go, TestPreferredAffinity.
SCORE_CASES = [
    ScoreCase("all nodes are same priority as Affinity is nil", pod(labels=S1), _n3()),
    ScoreCase(
        "Affinity: pod that matches topology key & pods in nodes will get high score comparing to "
        "others which doesn't match either pods in nodes or in topology key",
        pod(labels=S1, preferred=STAY_S1_REGION),
        _n3(),
        _s1_s2_s1(),
        [100, 0, 0],
    ),
    ScoreCase(
        "All the nodes that have the same topology key & label value with one of them has an "
        "existing pod that match the affinity rules, have the same score",
        pod(preferred=STAY_S1_REGION),
        [node("node1", **RG_CHINA), node("node2", **RG_CHINA_AZ1), node("node3", **RG_INDIA)],
        [_e("e1", "node1", S1)],
        [100, 100, 0],
    ),
    ScoreCase(
        "Affinity: nodes in one region has more matching pods comparing to other region, so the "
        "region which has more matches will get high score",
        pod(labels=S1, preferred=STAY_S2_REGION),
        [
            node("node1", **RG_CHINA),
            node("node2", **RG_INDIA),
            node("node3", **RG_CHINA),
            node("node4", **RG_CHINA),
            node("node5", **RG_INDIA),
        ],
        [
            _e(f"e{i}", n, S2)
            for i, n in enumerate(("node1", "node1", "node2", "node3", "node4", "node5"), 1)
        ],
        [100, 0, 100, 100, 0],
    ),
    ScoreCase(
        "Affinity: different Label operators and values for pod affinity scheduling preference, "
        "including some match failures",
        pod(labels=S1, preferred=AFFINITY3),
        _n3(),
        _s1_s2_s1(),
        [20, 100, 0],
    ),
    ScoreCase(
        "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in "
        "pod affinity symmetry",
        pod(labels=S2),
        _n3(),
        [
            _e("e1", "node1", S1, preferred=STAY_S1_REGION),
            _e("e2", "node2", S2, preferred=STAY_S2_REGION),
        ],
        [0, 100, 0],
    ),
    ScoreCase(
        "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod "
        "affinity symmetry",
        pod(labels=S1),
        _n3(),
        [
            _e("e1", "node1", S1, affinity=HARD_AFFINITY),
            _e("e2", "node2", S2, affinity=HARD_AFFINITY),
        ],
        [100, 100, 0],
    ),
    ScoreCase(
        "Anti Affinity: pod that does not match existing pods in node will get high score",
        pod(labels=S1, preferred_anti=AWAY_S1_AZ),
        [node("node1", **AZ1), node("node2", **RG_CHINA)],
        [_e("e1", "node1", S1), _e("e2", "node2", S2)],
        [0, 100],
    ),
    ScoreCase(
        "Anti Affinity: pod that does not match topology key & match the pods in nodes will get "
        "higher score comparing to others",
        pod(labels=S1, preferred_anti=AWAY_S1_AZ),
        [node("node1", **AZ1), node("node2", **RG_CHINA)],
        [_e("e1", "node1", S1), _e("e2", "node1", S1)],
        [0, 100],
    ),
    ScoreCase(
        "Anti Affinity: one node has more matching pods comparing to other node, so the node "
        "which has more unmatches will get high score",
        pod(labels=S1, preferred_anti=AWAY_S1_AZ),
        [node("node1", **AZ1), node("node2", **RG_INDIA)],
        [_e("e1", "node1", S1), _e("e2", "node1", S1), _e("e3", "node2", S2)],
        [0, 100],
    ),
    ScoreCase(
        "Anti Affinity symmetry: the existing pods in node which has anti affinity match will get "
        "high score",
        pod(labels=S2),
        [node("node1", **AZ1), node("node2", **AZ2)],
        [
            _e("e1", "node1", S1, preferred_anti=AWAY_S2_AZ),
            _e("e2", "node2", S2, preferred_anti=AWAY_S1_AZ),
        ],
        [0, 100],
    ),
    ScoreCase(
        "Avoid panic when partial nodes in a topology don't have pods with affinity",
        pod(labels=S1),
        [node("node1", **RG_CHINA), node("node2", **RG_CHINA)],
        [_e("e1", "node1", S1, preferred_anti=AWAY_S1_AZ)],
        None,
    ),
    ScoreCase(
        "Affinity with pods matching NamespaceSelector",
        pod(namespace="subteam1.team1", labels=S1, preferred=_team_preferred()),
        _china_india(),
        [
            pod("e1", namespace="subteam1.team2", node="node1", labels=S1),
            pod("e2", namespace="subteam2.team1", node="node2", labels=S1),
        ],
        [0, 100],
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "Affinity with pods matching both NamespaceSelector and Namespaces fields",
        pod(namespace="subteam1.team1", labels=S1, preferred=_team_preferred("subteam2.team2")),
        _china_india(),
        [
            pod("e1", namespace="subteam1.team2", node="node1", labels=S1),
            pod("e2", namespace="subteam2.team1", node="node2", labels=S1),
            pod("e3", namespace="subteam2.team2", node="node2", labels=S1),
        ],
        [0, 100],
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "Ignore preferred terms of existing pods",
        pod(labels=S2),
        _china_india(),
        _existing_with_preferred_terms(),
        None,
        ignore_existing=True,
    ),
    ScoreCase(
        "Do not ignore preferred terms of existing pods",
        pod(labels=S2),
        _china_india(),
        _existing_with_preferred_terms(),
        [0, 100],
    ),
    ScoreCase("No nodes to score", pod(labels=S2), [], want=None),
]

_HARD_POD_AFFINITY = [
    term(
        "region",
        selector(exprs=[("service", "In", ["S1"])]),
        namespaces=["", "subteam2.team2"],
        namespace_selector=selector(exprs=[("team", "In", ["team1"])]),
    )
]


def _hard_case(
    name: str, namespace: str, want: list[int] | None, hard_weight: int = 1
) -> ScoreCase:
    """TestPreferredAffinityWithHardPodAffinitySymmetricWeight: a pod with
    ``service: S1`` in ``namespace``, and two existing pods (node1, node2)
    whose required affinity selects it through namespaces and a team
    namespaceSelector."""
    existing = [
        pod(f"e{i}", namespace="", node=n, affinity=_HARD_POD_AFFINITY)
        for i, n in enumerate(("node1", "node2"), 1)
    ]
    return ScoreCase(
        name,
        pod(namespace=namespace, labels={"service": "S1"}),
        _n3(),
        existing,
        want,
        hard_weight=hard_weight,
        namespaces=TEAM_NAMESPACES,
    )


# scoring_test.go, TestPreferredAffinityWithHardPodAffinitySymmetricWeight.
HARD_WEIGHT_CASES = [
    _hard_case("with default weight", "", [100, 100, 0]),
    _hard_case("with zero weight", "", None, hard_weight=0),
    _hard_case("with no matching namespace", "subteam1.team2", None),
    _hard_case("with matching NamespaceSelector", "subteam1.team1", [100, 100, 0]),
    _hard_case("with matching Namespaces", "subteam2.team2", [100, 100, 0]),
]


def _run_score(case: ScoreCase) -> None:
    args = InterPodAffinityArgs(
        hard_pod_affinity_weight=case.hard_weight,
        ignore_preferred_terms_of_existing_pods=case.ignore_existing,
    )
    snap, plugin = setup(case.nodes, case.pods, case.namespaces, args)
    state = fresh_state()
    incoming = info(case.pod)
    batch = snap.batch(n.name for n in case.nodes)
    st = plugin.pre_score(state, incoming, batch)
    if case.want is None:
        assert st.is_skip, st
        return
    assert st.is_success, st
    scores = plugin.score_nodes(state, incoming, batch)
    per_node = [plugin.score(state, incoming, snap.nodes[n.name]) for n in case.nodes]
    assert scores.tolist() == per_node
    assert plugin.normalize_score(state, incoming, batch, scores).is_success
    assert scores.tolist() == case.want


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda c: c.name[:90])
def test_preferred_affinity(case: ScoreCase) -> None:
    _run_score(case)


@pytest.mark.parametrize("case", HARD_WEIGHT_CASES, ids=lambda c: c.name)
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(case: ScoreCase) -> None:
    _run_score(case)


def test_ignore_preferred_terms_of_existing_pods_only_skips_pods_without_their_own() -> None:
    # scoring.go: the flag makes PreScore Skip when the incoming pod has no
    # preferred terms; processExistingPod does not read it, so for a pod
    # with preferred terms the existing pods' terms count as usual.
    existing = [_e("e1", "node1", S1, preferred=[(8, term_in("security", "region", "S2"))])]
    args = InterPodAffinityArgs(ignore_preferred_terms_of_existing_pods=True)
    snap, plugin = setup(_china_india(), existing, args=args)
    batch = snap.all_nodes()
    plain = info(pod(labels=S2))
    assert plugin.pre_score(fresh_state(), plain, batch).is_skip
    with_terms = info(pod(labels=S2, preferred=[(1, term_in("security", "region", "S9"))]))
    state = fresh_state()
    assert plugin.pre_score(state, with_terms, batch).is_success
    assert plugin.score_nodes(state, with_terms, batch).tolist() == [8, 0]


def test_pre_score_counts_pods_on_nodes_that_are_not_candidates() -> None:
    # scoring.go, PreScore lists every node of the snapshot, not the
    # feasible ones: a matching pod on a filtered-out node still scores its
    # topology domain.
    nodes = [node("a", zone="z1"), node("b", zone="z1"), node("c", zone="z2")]
    snap, plugin = setup(nodes, [pod("e", node="a", labels=S1)])
    state = fresh_state()
    incoming = info(pod(preferred=[(7, term_in("security", "zone", "S1"))]))
    batch = snap.batch(["b", "c"])
    assert plugin.pre_score(state, incoming, batch).is_success
    scores = plugin.score_nodes(state, incoming, batch)
    assert scores.tolist() == [7, 0]


def test_weights_that_cancel_out_still_score() -> None:
    # processTerm creates the pair's entry even when the weights sum to 0, so
    # PreScore does not Skip (index != -1) and every node normalizes to 0.
    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    existing = [
        _e("e1", "a", S1, preferred=[(4, term_in("security", "zone", "S2"))]),
        _e("e2", "a", S1, preferred_anti=[(4, term_in("security", "zone", "S2"))]),
    ]
    snap, plugin = setup(nodes, existing)
    state = fresh_state()
    incoming = info(pod(labels=S2))
    assert plugin.pre_score(state, incoming, snap.all_nodes()).is_success
    assert state.read(PRE_SCORE_STATE_KEY).topology_score == {"zone": {"z1": 0}}
    scores = plugin.score_nodes(state, incoming, snap.all_nodes())
    assert plugin.normalize_score(state, incoming, snap.all_nodes(), scores).is_success
    assert scores.tolist() == [0, 0]


def test_normalize_score_handles_negative_and_equal_scores() -> None:
    snap, plugin = setup([node("a", az="1"), node("b", az="2"), node("c", az="3")])
    state = fresh_state()
    incoming = info(pod(labels=S1, preferred_anti=AWAY_S1_AZ))
    # Min-max over negative scores: -10 -> 0, -5 -> 50, 0 -> 100.
    state.write(PRE_SCORE_STATE_KEY, PreScoreState({"az": {"1": -10, "2": -5}}))
    batch = snap.all_nodes()
    assert plugin.score_nodes(state, incoming, batch).tolist() == [-10, -5, 0]
    scores = np.asarray([-10, -5, 0], dtype=np.int64)
    plugin.normalize_score(state, incoming, batch, scores)
    assert scores.tolist() == [0, 50, 100]
    same = np.asarray([-3, -3, -3], dtype=np.int64)
    plugin.normalize_score(state, incoming, batch, same)
    assert same.tolist() == [0, 0, 0]
    # int64(float64) truncates: 1/3 of the range is 33.
    thirds = np.asarray([0, 1, 3], dtype=np.int64)
    plugin.normalize_score(state, incoming, batch, thirds)
    assert thirds.tolist() == [0, 33, 100]


def test_invalid_preferred_terms_fail_pre_score() -> None:
    snap, plugin = setup([node("n1", region="r1")])
    bad = pod(preferred=[(1, term("region", selector(exprs=[("security", "In", [])])))])
    st = plugin.pre_score(fresh_state(), info(bad), snap.all_nodes())
    assert st.code is Code.ERROR
    assert st.message.startswith("failed to parse pod: preferredAffinityTerms:")
