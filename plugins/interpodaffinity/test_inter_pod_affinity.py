"""InterPodAffinity against upstream's cases (filtering_test.go:
TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes;
scoring_test.go: TestPreferredAffinity, TestPreferredAffinityWithHardPodAffinitySymmetricWeight;
plugin_test / validation: the args), written afresh as tables."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np
import pytest

from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.model import NodeInfo
from plugins.framework.status import Code, Status
from plugins.framework.testing import fresh_state
from plugins.interpodaffinity import (
    ERR_REASON_AFFINITY,
    ERR_REASON_ANTI_AFFINITY,
    ERR_REASON_EXISTING_ANTI_AFFINITY,
    NAMESPACES,
    InterPodAffinity,
    InterPodAffinityArgs,
)
from plugins.interpodaffinity.testutil import (
    info,
    namespace,
    node,
    pod,
    selector,
    setup,
    term,
    term_exists,
    term_in,
    term_not_in,
)

AFF = Status.unresolvable(ERR_REASON_AFFINITY)
ANTI = Status.unschedulable(ERR_REASON_ANTI_AFFINITY)
EXISTING = Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
OK = Status()

RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}
S1 = {"security": "S1"}
S2 = {"security": "S2"}

# scoring_test.go's namespaces.
TEAM_NAMESPACES = (
    namespace("subteam1.team1", team="team1"),
    namespace("subteam2.team1", team="team1"),
    namespace("subteam1.team2", team="team2"),
    namespace("subteam2.team2", team="team2"),
)


@dataclass
class FilterCase:
    name: str
    pod: pb.Pod
    nodes: list[pb.Node]
    pods: list[pb.Pod] = field(default_factory=list)
    # Per node, in order; None when PreFilter ends the cycle or skips.
    want: list[Status] | None = None
    want_pre_filter: Status = OK
    namespaces: tuple[pb.ClusterObject, ...] = ()


def _single(
    name: str,
    incoming: pb.Pod,
    pods: list[pb.Pod],
    want: Status = OK,
    want_pre_filter: Status = OK,
    namespaces: tuple[pb.ClusterObject, ...] = (),
) -> FilterCase:
    n1 = node("node1", region="r1", zone="z11")
    return FilterCase(
        name,
        incoming,
        [n1],
        pods,
        None if want_pre_filter.code is not Code.SUCCESS else [want],
        want_pre_filter,
        namespaces,
    )


_EXISTING_SEC = pod("existing", labels={"service": "securityscan"}, node="node1")
_S1 = {"security": "S1"}

# filtering_test.go, TestRequiredAffinitySingleNode.
SINGLE_NODE_CASES = [
    _single(
        "A pod that has no required pod affinity scheduling rules can schedule onto a node "
        "with no existing pods",
        pod(),
        [],
        want_pre_filter=Status.skip(),
    ),
    _single(
        "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In "
        "operator that matches the existing pod",
        pod(labels=_S1, affinity=[term_in("service", "region", "securityscan", "value2")]),
        [_EXISTING_SEC],
    ),
    _single(
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity "
        "using not in operator in labelSelector that matches the existing pod",
        pod(labels=_S1, affinity=[term_not_in("service", "region", "securityscan3", "value3")]),
        [_EXISTING_SEC],
    ),
    _single(
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        pod(
            labels=_S1,
            affinity=[
                term(
                    "",
                    selector(exprs=[("service", "In", ["securityscan", "value2"])]),
                    namespaces=["DiffNameSpace"],
                )
            ],
        ),
        [pod("existing", namespace="ns", labels={"service": "securityscan"}, node="node1")],
        want=AFF,
    ),
    _single(
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        pod(labels=_S1, affinity=[term_in("service", "region", "antivirusscan", "value2")]),
        [_EXISTING_SEC],
        want=AFF,
    ),
    _single(
        "satisfies the PodAffinity with different label Operators in multiple "
        "RequiredDuringSchedulingIgnoredDuringExecution",
        pod(
            labels=_S1,
            affinity=[
                term(
                    "region",
                    selector(exprs=[("service", "Exists", ()), ("wrongkey", "DoesNotExist", ())]),
                ),
                term(
                    "region",
                    selector(
                        exprs=[
                            ("service", "In", ["securityscan"]),
                            ("service", "NotIn", ["WrongValue"]),
                        ]
                    ),
                ),
            ],
        ),
        [_EXISTING_SEC],
    ),
    _single(
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot "
        "schedule onto the node because one of the matchExpression item don't match.",
        pod(
            labels=_S1,
            affinity=[
                term(
                    "region",
                    selector(exprs=[("service", "Exists", ()), ("wrongkey", "DoesNotExist", ())]),
                ),
                term(
                    "region",
                    selector(
                        exprs=[
                            ("service", "In", ["securityscan2"]),
                            ("service", "NotIn", ["WrongValue"]),
                        ]
                    ),
                ),
            ],
        ),
        [_EXISTING_SEC],
        want=AFF,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        pod(
            labels=_S1,
            affinity=[term_in("service", "region", "securityscan", "value2")],
            anti=[term_in("service", "node", "antivirusscan", "value2")],
        ),
        [_EXISTING_SEC],
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the "
        "existing pod",
        pod(
            labels=_S1,
            affinity=[term_in("service", "region", "securityscan", "value2")],
            anti=[term_in("service", "node", "antivirusscan", "value2")],
        ),
        [
            pod(
                "existing",
                labels={"service": "securityscan"},
                node="node1",
                anti=[term_in("service", "node", "antivirusscan", "value2")],
            )
        ],
    ),
    _single(
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        pod(
            labels=_S1,
            affinity=[term_in("service", "region", "securityscan", "value2")],
            anti=[term_in("service", "zone", "securityscan", "value2")],
        ),
        [_EXISTING_SEC],
        want=ANTI,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity "
        "symmetry with the existing pod",
        pod(
            labels=_S1,
            affinity=[term_in("service", "region", "securityscan", "value2")],
            anti=[term_in("service", "node", "antivirusscan", "value2")],
        ),
        [
            pod(
                "existing",
                labels={"service": "securityscan"},
                node="node1",
                anti=[term_in("security", "zone", "S1")],
            )
        ],
        want=EXISTING,
    ),
    _single(
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        pod(
            labels={"service": "securityscan"},
            affinity=[term_not_in("service", "region", "securityscan", "value2")],
        ),
        [pod("existing", labels={"service": "securityscan"}, node="node2")],
        want=AFF,
    ),
    _single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity "
        "constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        pod(labels=_S1),
        [
            pod(
                "existing",
                labels={"service": "securityscan"},
                node="node1",
                anti=[term_in("security", "zone", "S1", "value2")],
            )
        ],
        want=EXISTING,
    ),
    _single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity "
        "constraints. satisfy PodAntiAffinity symmetry with the existing pod",
        pod(labels=_S1),
        [
            pod(
                "existing",
                labels={"service": "securityscan"},
                node="node1",
                anti=[term_not_in("security", "zone", "S1")],
            )
        ],
        want_pre_filter=Status.skip(),
    ),
    _single(
        "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity "
        "symmetry with incoming pod",
        pod(labels=_S1, anti=[term_exists("service", "region"), term_exists("security", "region")]),
        [
            pod(
                "existing",
                labels={"service": "securityscan"},
                node="node1",
                anti=[term_exists("security", "zone")],
            )
        ],
        want=ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each "
        "other on AffinityTerms",
        pod(
            labels={"service": "securityscan"},
            anti=[term_exists("service", "zone"), term_exists("security", "zone")],
        ),
        [pod("existing", labels=_S1, node="node1", anti=[term_exists("security", "zone")])],
        want=ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each "
        "other on AffinityTerms",
        pod(labels=_S1, anti=[term_exists("security", "zone")]),
        [
            pod(
                "existing",
                labels={"service": "securityscan"},
                node="node1",
                anti=[term_exists("service", "zone"), term_exists("security", "zone")],
            )
        ],
        want=EXISTING,
    ),
    _single(
        "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each "
        "other on AffinityTerms",
        pod(
            labels={"abc": "", "xyz": ""},
            anti=[term_exists("abc", "zone"), term_exists("def", "zone")],
        ),
        [
            pod(
                "existing",
                labels={"def": "", "xyz": ""},
                node="node1",
                anti=[term_exists("abc", "zone"), term_exists("def", "zone")],
            )
        ],
        want=ANTI,
    ),
    _single(
        "PodAffinity fails PreFilter with an invalid selector operator (upstream's case uses a "
        "bad label value, which Berth leaves to the API server's validation)",
        pod(labels=_S1, affinity=[term("region", selector(exprs=[("service", "Near", ["x"])]))]),
        [_EXISTING_SEC],
        want_pre_filter=Status.unresolvable(
            "parsing pod: requiredAffinityTerms: 'Near' is not a valid label selector operator"
        ),
    ),
    _single(
        "PodAntiAffinity fails PreFilter with an In requirement without values",
        pod(labels=_S1, anti=[term("region", selector(exprs=[("service", "In", [])]))]),
        [_EXISTING_SEC],
        want_pre_filter=Status.unresolvable(
            "parsing pod: requiredAntiAffinityTerms: for 'in', 'notin' operators, values set "
            "can't be empty (key 'service')"
        ),
    ),
    _single(
        "affinity with NamespaceSelector",
        pod(
            labels=_S1,
            affinity=[
                term(
                    "region",
                    selector(exprs=[("service", "In", ["securityscan"])]),
                    namespace_selector=selector({"team": "team1"}),
                )
            ],
        ),
        [
            pod(
                "existing",
                namespace="subteam1.team1",
                labels={"service": "securityscan"},
                node="node1",
            )
        ],
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "affinity with non-matching NamespaceSelector",
        pod(
            labels=_S1,
            affinity=[
                term(
                    "region",
                    selector(exprs=[("service", "In", ["securityscan"])]),
                    namespace_selector=selector({"team": "team1"}),
                )
            ],
        ),
        [
            pod(
                "existing",
                namespace="subteam1.team2",
                labels={"service": "securityscan"},
                node="node1",
            )
        ],
        want=AFF,
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "anti-affinity with matching NamespaceSelector",
        pod(
            "p",
            namespace="subteam1.team1",
            labels=_S1,
            anti=[
                term(
                    "zone",
                    selector(exprs=[("service", "In", ["securityscan"])]),
                    namespace_selector=selector({"team": "team1"}),
                )
            ],
        ),
        [
            pod(
                "existing",
                namespace="subteam2.team1",
                labels={"service": "securityscan"},
                node="node1",
            )
        ],
        want=ANTI,
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "anti-affinity with matching all NamespaceSelector",
        pod(
            "p",
            namespace="subteam1.team1",
            labels=_S1,
            anti=[
                term(
                    "zone",
                    selector(exprs=[("service", "In", ["securityscan"])]),
                    namespace_selector=selector(),
                )
            ],
        ),
        [
            pod(
                "existing",
                namespace="subteam1.team2",
                labels={"service": "securityscan"},
                node="node1",
            )
        ],
        want=ANTI,
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "anti-affinity with non-matching NamespaceSelector",
        pod(
            "p",
            namespace="subteam1.team1",
            labels=_S1,
            anti=[
                term(
                    "zone",
                    selector(exprs=[("service", "In", ["securityscan"])]),
                    namespace_selector=selector({"team": "team1"}),
                )
            ],
        ),
        [
            pod(
                "existing",
                namespace="subteam1.team2",
                labels={"service": "securityscan"},
                node="node1",
            )
        ],
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "existing pod's anti-affinity namespaceSelector is matched against the incoming pod's "
        "namespace labels",
        pod("p", namespace="subteam1.team1", labels=_S1),
        [
            pod(
                "existing",
                namespace="subteam1.team2",
                node="node1",
                anti=[
                    term(
                        "zone",
                        selector({"security": "S1"}),
                        namespace_selector=selector({"team": "team1"}),
                    )
                ],
            )
        ],
        want=EXISTING,
        namespaces=TEAM_NAMESPACES,
    ),
]

_CHINA = {"region": "China"}
_CHINA_AZ1 = {"region": "China", "az": "az1"}
_INDIA = {"region": "India"}

# filtering_test.go, TestRequiredAffinityMultipleNodes.
MULTI_NODE_CASES = [
    FilterCase(
        "A pod can be scheduled onto all the nodes that have the same topology key & label value "
        "with one of them has an existing pod that matches the affinity rules",
        pod(affinity=[term_in("foo", "region", "bar")]),
        [node("node1", **_CHINA), node("node2", **_CHINA_AZ1), node("node3", **_INDIA)],
        [pod("p1", node="node1", labels={"foo": "bar"})],
        [OK, OK, AFF],
    ),
    FilterCase(
        "The affinity rule is to schedule all of the pods of this collection to the same zone. "
        "The first pod of the collection should not be blocked from being scheduled onto any "
        "node, even there's no existing pod that matches the rule anywhere.",
        pod(
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[term_in("foo", "zone", "bar"), term_in("service", "zone", "securityscan")],
        ),
        [node("nodeA", zone="az1", hostname="h1"), node("nodeB", zone="az2", hostname="h2")],
        [pod("p1", node="nodeA", labels={"foo": "bar"})],
        [OK, OK],
    ),
    FilterCase(
        "The first pod of the collection can only be scheduled on nodes labelled with the "
        "requested topology keys",
        pod(
            labels={"foo": "bar", "service": "securityscan"},
            affinity=[term_in("foo", "zone", "bar"), term_in("service", "zone", "securityscan")],
        ),
        [
            node("nodeA", zoneLabel="az1", hostname="h1"),
            node("nodeB", zoneLabel="az2", hostname="h2"),
        ],
        [pod("p1", node="nodeA", labels={"foo": "bar"})],
        [AFF, AFF],
    ),
    FilterCase(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that "
        "matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
        pod(anti=[term_in("foo", "region", "abc")]),
        [
            node("nodeA", region="r1", hostname="nodeA"),
            node("nodeB", region="r1", hostname="nodeB"),
        ],
        [pod("p1", node="nodeA", labels={"foo": "abc"})],
        [ANTI, ANTI],
    ),
    FilterCase(
        "This test ensures that anti-affinity matches a pod when any term of the anti-affinity "
        "rule matches a pod.",
        pod(anti=[term_in("foo", "region", "abc"), term_in("service", "zone", "securityscan")]),
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [pod("p1", node="nodeA", labels={"foo": "abc", "service": "securityscan"})],
        [ANTI, ANTI],
    ),
    FilterCase(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that "
        "matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB "
        "but can be scheduled onto nodeC",
        pod(labels={"foo": "123"}, anti=[term_in("foo", "region", "bar")]),
        [
            node("nodeA", region="r1", hostname="nodeA"),
            node("nodeB", region="r1", hostname="nodeB"),
            node("nodeC", region="r2", hostname="nodeC"),
        ],
        [
            pod("p1", node="nodeA", labels={"foo": "bar"}),
            pod("p2", node="nodeC", anti=[term_in("foo", "region", "456")]),
        ],
        [ANTI, ANTI, OK],
    ),
    FilterCase(
        "NodeC has an existing pod that matches the inter pod affinity rule but in a different "
        "namespace, so the pod can be scheduled onto nodeC",
        pod(labels={"foo": "123"}, anti=[term_in("foo", "region", "bar")]),
        [
            node("nodeA", region="r1", hostname="nodeA"),
            node("nodeB", region="r1", hostname="nodeB"),
            node("nodeC", region="r2", hostname="nodeC"),
        ],
        [
            pod("p1", node="nodeA", labels={"foo": "bar"}),
            pod("p2", node="nodeC", namespace="NS1", labels={"foo": "bar"}),
        ],
        [ANTI, ANTI, OK],
    ),
    FilterCase(
        "Test existing pod's anti-affinity: if an existing pod has a term with invalid "
        "topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the "
        "term is also checked",
        pod(labels={"foo": ""}),
        [node("nodeA", zone="z1", hostname="nodeA"), node("nodeB", zone="z2", hostname="nodeB")],
        [pod("p1", node="nodeA", anti=[term_exists("foo", "invalid-node-label")])],
        None,
        Status.skip(),
    ),
    FilterCase(
        "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if "
        "topologyKey matches",
        pod(labels={"foo": "", "bar": ""}, anti=[term_exists("foo", "invalid-node-label")]),
        [node("nodeA", zone="z1", hostname="nodeA"), node("nodeB", zone="z2", hostname="nodeB")],
        [pod("p1", node="nodeA", labels={"foo": ""})],
        [OK, OK],
    ),
    FilterCase(
        "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it "
        "violates each existingPod's terms on all nodes",
        pod(labels={"foo": "", "bar": ""}),
        [node("nodeA", zone="z1", hostname="nodeA"), node("nodeB", zone="z2", hostname="nodeB")],
        [
            pod("p1", node="nodeA", anti=[term_exists("foo", "zone")]),
            pod("p2", node="nodeB", anti=[term_exists("bar", "zone")]),
        ],
        [EXISTING, EXISTING],
    ),
    FilterCase(
        "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at "
        "least violates one anti-affinity rule of existingPod",
        pod(anti=[term_exists("foo", "zone"), term_exists("bar", "zone")]),
        [node("nodeA", zone="z1", hostname="nodeA"), node("nodeB", zone="z2", hostname="nodeB")],
        [pod("p1", node="nodeA", labels={"foo": ""}), pod("p2", node="nodeB", labels={"bar": ""})],
        [ANTI, ANTI],
    ),
    FilterCase(
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, "
        "it's counted as a single term match - case when one term has invalid topologyKey",
        pod(labels={"foo": "", "bar": ""}),
        [node("nodeA", zone="z1", hostname="nodeA"), node("nodeB", zone="z2", hostname="nodeB")],
        [
            pod(
                "p1",
                node="nodeA",
                labels={"foo": ""},
                anti=[term_exists("foo", "invalid-node-label"), term_exists("bar", "zone")],
            )
        ],
        [EXISTING, OK],
    ),
    FilterCase(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check "
        "if all topologyKeys match",
        pod(affinity=[term_exists("foo", "region"), term_exists("bar", "zone")]),
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [pod("p1", node="nodeA", labels={"foo": "", "bar": ""})],
        [OK, AFF],
    ),
    FilterCase(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check "
        "if all topologyKeys match, and the match logic should be satisfied on the same pod",
        pod(affinity=[term_exists("foo", "region"), term_exists("bar", "zone")]),
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [pod("p1", node="nodeA", labels={"foo": ""}), pod("p2", node="nodeB", labels={"bar": ""})],
        [AFF, AFF],
    ),
]


def _run_filter(case: FilterCase, args: InterPodAffinityArgs | None = None) -> None:
    snap, plugin = setup(case.nodes, case.pods, case.namespaces, args)
    state = fresh_state()
    incoming = info(case.pod)
    result, st = plugin.pre_filter(state, incoming, snap.all_nodes())
    assert result is None
    assert st == case.want_pre_filter
    if case.want is None:
        return
    by_name: dict[str, NodeInfo] = snap.nodes
    got = [plugin.filter(state, incoming, by_name[n.name]) for n in case.nodes]
    assert got == case.want
    # The batch form agrees with the per-node form.
    verdicts = plugin.filter_nodes(state, incoming, snap.batch(n.name for n in case.nodes))
    assert [verdicts.status_of(k) for k in range(len(case.nodes))] == case.want


@pytest.mark.parametrize("case", SINGLE_NODE_CASES, ids=lambda c: c.name[:90])
def test_required_affinity_single_node(case: FilterCase) -> None:
    _run_filter(case)


@pytest.mark.parametrize("case", MULTI_NODE_CASES, ids=lambda c: c.name[:90])
def test_required_affinity_multiple_nodes(case: FilterCase) -> None:
    _run_filter(case)


def test_filter_without_pre_filter_state_is_an_error() -> None:
    snap, plugin = setup([node("n1")])
    st = plugin.filter(fresh_state(), info(pod()), snap.nodes["n1"])
    assert st.code is Code.ERROR
    assert "PreFilterInterPodAffinity" in st.message


def test_pre_filter_state_survives_the_round_trip_to_the_caller() -> None:
    # CycleState travels to the caller and back between RPCs: Filter must
    # work on a decoded copy.
    case = MULTI_NODE_CASES[0]
    snap, plugin = setup(case.nodes, case.pods)
    state = fresh_state()
    incoming = info(case.pod)
    plugin.pre_filter(state, incoming, snap.all_nodes())
    again = fresh_state(state.encode())
    got = [plugin.filter(again, incoming, snap.nodes[n.name]) for n in case.nodes]
    assert got == case.want


# -- scoring ----------------------------------------------------------------------

STAY_S1_REGION = [(5, term_in("security", "region", "S1"))]
STAY_S2_REGION = [(6, term_in("security", "region", "S2"))]
AFFINITY3 = [
    (
        8,
        term(
            "region",
            selector(exprs=[("security", "NotIn", ["S1"]), ("security", "In", ["S2"])]),
        ),
    ),
    (
        2,
        term(
            "region", selector(exprs=[("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())])
        ),
    ),
]
HARD_AFFINITY = [
    term_in("security", "region", "S1", "value2"),
    term("region", selector(exprs=[("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())])),
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
    return [node("node1", **RG_CHINA), node("node2", **RG_INDIA), node("node3", **AZ1)]


# scoring_test.go, TestPreferredAffinity.
SCORE_CASES = [
    ScoreCase("all nodes are same priority as Affinity is nil", pod(labels=S1), _n3()),
    ScoreCase(
        "Affinity: pod that matches topology key & pods in nodes will get high score comparing to "
        "others which doesn't match either pods in nodes or in topology key",
        pod(labels=S1, preferred=STAY_S1_REGION),
        _n3(),
        [
            pod("e1", node="node1", labels=S1),
            pod("e2", node="node2", labels=S2),
            pod("e3", node="node3", labels=S1),
        ],
        [100, 0, 0],
    ),
    ScoreCase(
        "All the nodes that have the same topology key & label value with one of them has an "
        "existing pod that match the affinity rules, have the same score",
        pod(preferred=STAY_S1_REGION),
        [node("node1", **RG_CHINA), node("node2", **RG_CHINA_AZ1), node("node3", **RG_INDIA)],
        [pod("e1", node="node1", labels=S1)],
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
            pod("e1", node="node1", labels=S2),
            pod("e2", node="node1", labels=S2),
            pod("e3", node="node2", labels=S2),
            pod("e4", node="node3", labels=S2),
            pod("e5", node="node4", labels=S2),
            pod("e6", node="node5", labels=S2),
        ],
        [100, 0, 100, 100, 0],
    ),
    ScoreCase(
        "Affinity: different Label operators and values for pod affinity scheduling preference, "
        "including some match failures",
        pod(labels=S1, preferred=AFFINITY3),
        _n3(),
        [
            pod("e1", node="node1", labels=S1),
            pod("e2", node="node2", labels=S2),
            pod("e3", node="node3", labels=S1),
        ],
        [20, 100, 0],
    ),
    ScoreCase(
        "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in "
        "pod affinity symmetry",
        pod(labels=S2),
        _n3(),
        [
            pod("e1", node="node1", labels=S1, preferred=STAY_S1_REGION),
            pod("e2", node="node2", labels=S2, preferred=STAY_S2_REGION),
        ],
        [0, 100, 0],
    ),
    ScoreCase(
        "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod "
        "affinity symmetry",
        pod(labels=S1),
        _n3(),
        [
            pod("e1", node="node1", labels=S1, affinity=HARD_AFFINITY),
            pod("e2", node="node2", labels=S2, affinity=HARD_AFFINITY),
        ],
        [100, 100, 0],
    ),
    ScoreCase(
        "Anti Affinity: pod that does not match existing pods in node will get high score",
        pod(labels=S1, preferred_anti=AWAY_S1_AZ),
        [node("node1", **AZ1), node("node2", **RG_CHINA)],
        [pod("e1", node="node1", labels=S1), pod("e2", node="node2", labels=S2)],
        [0, 100],
    ),
    ScoreCase(
        "Anti Affinity: pod that does not match topology key & match the pods in nodes will get "
        "higher score comparing to others",
        pod(labels=S1, preferred_anti=AWAY_S1_AZ),
        [node("node1", **AZ1), node("node2", **RG_CHINA)],
        [pod("e1", node="node1", labels=S1), pod("e2", node="node1", labels=S1)],
        [0, 100],
    ),
    ScoreCase(
        "Anti Affinity: one node has more matching pods comparing to other node, so the node "
        "which has more unmatches will get high score",
        pod(labels=S1, preferred_anti=AWAY_S1_AZ),
        [node("node1", **AZ1), node("node2", **RG_INDIA)],
        [
            pod("e1", node="node1", labels=S1),
            pod("e2", node="node1", labels=S1),
            pod("e3", node="node2", labels=S2),
        ],
        [0, 100],
    ),
    ScoreCase(
        "Anti Affinity symmetry: the existing pods in node which has anti affinity match will get "
        "high score",
        pod(labels=S2),
        [node("node1", **AZ1), node("node2", **AZ2)],
        [
            pod("e1", node="node1", labels=S1, preferred_anti=AWAY_S2_AZ),
            pod("e2", node="node2", labels=S2, preferred_anti=AWAY_S1_AZ),
        ],
        [0, 100],
    ),
    ScoreCase(
        "Avoid panic when partial nodes in a topology don't have pods with affinity",
        pod(labels=S1),
        [node("node1", **RG_CHINA), node("node2", **RG_CHINA)],
        [pod("e1", node="node1", labels=S1, preferred_anti=AWAY_S1_AZ)],
        None,
    ),
    ScoreCase(
        "Affinity with pods matching NamespaceSelector",
        pod(
            namespace="subteam1.team1",
            labels=S1,
            preferred=[
                (
                    5,
                    term(
                        "region",
                        selector(exprs=[("security", "In", ["S1"])]),
                        namespace_selector=selector({"team": "team1"}),
                    ),
                )
            ],
        ),
        [node("node1", **RG_CHINA), node("node2", **RG_INDIA)],
        [
            pod("e1", namespace="subteam1.team2", node="node1", labels=S1),
            pod("e2", namespace="subteam2.team1", node="node2", labels=S1),
        ],
        [0, 100],
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "Affinity with pods matching both NamespaceSelector and Namespaces fields",
        pod(
            namespace="subteam1.team1",
            labels=S1,
            preferred=[
                (
                    5,
                    term(
                        "region",
                        selector(exprs=[("security", "In", ["S1"])]),
                        namespaces=["subteam2.team2"],
                        namespace_selector=selector({"team": "team1"}),
                    ),
                )
            ],
        ),
        [node("node1", **RG_CHINA), node("node2", **RG_INDIA)],
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
        [node("node1", **RG_CHINA), node("node2", **RG_INDIA)],
        [
            pod(
                "e1",
                node="node1",
                labels=S1,
                preferred=[(8, term_in("security", "region", "S1"))],
                preferred_anti=[(5, term_in("security", "az", "S2"))],
            ),
            pod("e2", node="node2", labels=S2, preferred=STAY_S2_REGION),
        ],
        None,
        ignore_existing=True,
    ),
    ScoreCase(
        "Do not ignore preferred terms of existing pods",
        pod(labels=S2),
        [node("node1", **RG_CHINA), node("node2", **RG_INDIA)],
        [
            pod(
                "e1",
                node="node1",
                labels=S1,
                preferred=[(8, term_in("security", "region", "S1"))],
                preferred_anti=[(5, term_in("security", "az", "S2"))],
            ),
            pod("e2", node="node2", labels=S2, preferred=STAY_S2_REGION),
        ],
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
_S_S1 = {"service": "S1"}

# scoring_test.go, TestPreferredAffinityWithHardPodAffinitySymmetricWeight.
HARD_WEIGHT_CASES = [
    ScoreCase(
        "with default weight",
        pod(namespace="", labels=_S_S1),
        _n3(),
        [
            pod("e1", namespace="", node="node1", affinity=_HARD_POD_AFFINITY),
            pod("e2", namespace="", node="node2", affinity=_HARD_POD_AFFINITY),
        ],
        [100, 100, 0],
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "with zero weight",
        pod(namespace="", labels=_S_S1),
        _n3(),
        [
            pod("e1", namespace="", node="node1", affinity=_HARD_POD_AFFINITY),
            pod("e2", namespace="", node="node2", affinity=_HARD_POD_AFFINITY),
        ],
        None,
        hard_weight=0,
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "with no matching namespace",
        pod(namespace="subteam1.team2", labels=_S_S1),
        _n3(),
        [
            pod("e1", namespace="", node="node1", affinity=_HARD_POD_AFFINITY),
            pod("e2", namespace="", node="node2", affinity=_HARD_POD_AFFINITY),
        ],
        None,
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "with matching NamespaceSelector",
        pod(namespace="subteam1.team1", labels=_S_S1),
        _n3(),
        [
            pod("e1", namespace="", node="node1", affinity=_HARD_POD_AFFINITY),
            pod("e2", namespace="", node="node2", affinity=_HARD_POD_AFFINITY),
        ],
        [100, 100, 0],
        namespaces=TEAM_NAMESPACES,
    ),
    ScoreCase(
        "with matching Namespaces",
        pod(namespace="subteam2.team2", labels=_S_S1),
        _n3(),
        [
            pod("e1", namespace="", node="node1", affinity=_HARD_POD_AFFINITY),
            pod("e2", namespace="", node="node2", affinity=_HARD_POD_AFFINITY),
        ],
        [100, 100, 0],
        namespaces=TEAM_NAMESPACES,
    ),
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
    nodes = [node("node1", **RG_CHINA), node("node2", **RG_INDIA)]
    existing = [
        pod("e1", node="node1", labels=S1, preferred=[(8, term_in("security", "region", "S2"))])
    ]
    args = InterPodAffinityArgs(ignore_preferred_terms_of_existing_pods=True)
    snap, plugin = setup(nodes, existing, args=args)
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


def test_normalize_score_handles_negative_and_equal_scores() -> None:
    snap, plugin = setup([node("a", az="1"), node("b", az="2"), node("c", az="3")])
    state = fresh_state()
    incoming = info(pod(labels=S1, preferred_anti=AWAY_S1_AZ))
    # Min-max over negative scores: -10 -> 0, -5 -> 50, 0 -> 100.
    from plugins.interpodaffinity.inter_pod_affinity import PRE_SCORE_STATE_KEY, PreScoreState

    state.write(PRE_SCORE_STATE_KEY, PreScoreState({"az": {"1": -10, "2": -5}}))
    batch = snap.all_nodes()
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


# -- namespaces -------------------------------------------------------------------


def test_reads_core_v1_namespaces() -> None:
    assert InterPodAffinity.reads(None) == (NAMESPACES,)
    assert NAMESPACES.group == "" and NAMESPACES.resource == "namespaces"
    assert not NAMESPACES.namespaced


def test_namespace_selector_follows_namespace_label_changes() -> None:
    # A namespace relabelled in a later delta changes which pods count.
    from plugins.framework.testing import apply_objects

    nodes = [node("a", zone="z1"), node("b", zone="z2")]
    existing = [pod("e", namespace="other", node="a", labels=S1)]
    snap, plugin = setup(nodes, existing, [namespace("other", team="x")])
    incoming = info(
        pod(affinity=[term("zone", selector(S1), namespace_selector=selector({"team": "y"}))])
    )
    state = fresh_state()
    plugin.pre_filter(state, incoming, snap.all_nodes())
    assert plugin.filter(state, incoming, snap.nodes["a"]) == AFF
    apply_objects(snap, [namespace("other", team="y")])
    state = fresh_state()
    plugin.pre_filter(state, incoming, snap.all_nodes())
    assert plugin.filter(state, incoming, snap.nodes["a"]) == OK
    assert plugin.filter(state, incoming, snap.nodes["b"]) == AFF


# -- snapshot bookkeeping -----------------------------------------------------------


def test_node_info_lists_pods_with_affinity_and_required_anti_affinity() -> None:
    snap, _ = setup(
        [node("a")],
        [
            pod("plain", node="a"),
            pod("pref", node="a", preferred=STAY_S1_REGION),
            pod("anti", node="a", anti=[term_exists("x", "zone")]),
        ],
    )
    ni = snap.nodes["a"]
    assert {p.name for p in ni.pods_with_affinity.values()} == {"pref", "anti"}
    assert {p.name for p in ni.pods_with_required_anti_affinity.values()} == {"anti"}
    delta = pb.ClusterDelta(delete_pods=["default/anti"])
    snap.apply(delta)
    assert {p.name for p in ni.pods_with_affinity.values()} == {"pref"}
    assert not ni.pods_with_required_anti_affinity


# -- args ---------------------------------------------------------------------------


def test_args_defaults_are_upstreams() -> None:
    args = msgspec.convert({}, InterPodAffinityArgs)
    assert args.hard_pod_affinity_weight == 1
    assert args.ignore_preferred_terms_of_existing_pods is False


@pytest.mark.parametrize("weight", [0, 1, 100])
def test_args_accept_weights_in_range(weight: int) -> None:
    InterPodAffinity(InterPodAffinityArgs(hard_pod_affinity_weight=weight))


@pytest.mark.parametrize("weight", [-1, 101])
def test_args_refuse_weights_out_of_range(weight: int) -> None:
    # validation_pluginargs.go, validateHardPodAffinityWeight.
    with pytest.raises(ValueError) as exc:
        InterPodAffinity(InterPodAffinityArgs(hard_pod_affinity_weight=weight))
    assert str(exc.value) == (
        f"hardPodAffinityWeight: Invalid value: {weight}: not in valid range [0, 100]"
    )


def test_args_refuse_unknown_fields() -> None:
    with pytest.raises(msgspec.ValidationError, match="hardPodAffinityWeigth"):
        msgspec.convert({"hardPodAffinityWeigth": 2}, InterPodAffinityArgs)
