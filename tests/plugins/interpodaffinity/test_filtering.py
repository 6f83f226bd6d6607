"""PreFilter, Filter and the PreFilterExtensions against upstream's cases
(filtering_test.go: TestRequiredAffinitySingleNode,
TestRequiredAffinityMultipleNodes, TestPreFilterDisabled,
TestPreFilterStateAddRemovePod, TestPreFilterStateClone,
TestGetTPMapMatchingIncomingAffinityAntiAffinity), written afresh as tables
over the shared fixtures of testutil.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.model import NodeInfo
from berth.framework.status import Code, Status
from berth.framework.testing import fresh_state
from berth.plugins.interpodaffinity import PRE_FILTER_STATE_KEY, InterPodAffinity
from berth.plugins.interpodaffinity.inter_pod_affinity import Counts, PreFilterState
from tests.plugins.interpodaffinity.testutil import (
    AFF,
    ANTI,
    EXISTING,
    OK,
    S1,
    SECURITYSCAN,
    TEAM_NAMESPACES,
    exists_without,
    hosts,
    info,
    node,
    pod,
    securityscan_pod,
    selector,
    setup,
    team_term,
    term,
    term_exists,
    term_in,
    term_not_in,
    two_zones,
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
    """TestRequiredAffinitySingleNode's one node, node1 in region r1, zone z11."""
    return FilterCase(
        name,
        incoming,
        [node("node1", region="r1", zone="z11")],
        pods,
        None if want_pre_filter.code is not Code.SUCCESS else [want],
        want_pre_filter,
        namespaces,
    )


# The terms several cases share.
_AFFINITY_SECURITYSCAN = term_in("service", "region", "securityscan", "value2")
_ANTI_ANTIVIRUS = term_in("service", "node", "antivirusscan", "value2")


def _exists_and_in(value: str) -> list[pb.PodAffinityTerm]:
    """Two terms with different operators: ``service Exists, wrongkey
    DoesNotExist`` and ``service In (value), service NotIn (WrongValue)``."""
    return [
        term("region", exists_without("service")),
        term(
            "region",
            selector(exprs=[("service", "In", [value]), ("service", "NotIn", ["WrongValue"])]),
        ),
    ]


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
        pod(labels=S1, affinity=[_AFFINITY_SECURITYSCAN]),
        [securityscan_pod()],
    ),
    _single(
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity "
        "using not in operator in labelSelector that matches the existing pod",
        pod(labels=S1, affinity=[term_not_in("service", "region", "securityscan3", "value3")]),
        [securityscan_pod()],
    ),
    _single(
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        pod(
            labels=S1,
            affinity=[
                term(
                    "",
                    selector(exprs=[("service", "In", ["securityscan", "value2"])]),
                    namespaces=["DiffNameSpace"],
                )
            ],
        ),
        [securityscan_pod(namespace="ns")],
        want=AFF,
    ),
    _single(
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        pod(labels=S1, affinity=[term_in("service", "region", "antivirusscan", "value2")]),
        [securityscan_pod()],
        want=AFF,
    ),
    _single(
        "satisfies the PodAffinity with different label Operators in multiple "
        "RequiredDuringSchedulingIgnoredDuringExecution",
        pod(labels=S1, affinity=_exists_and_in("securityscan")),
        [securityscan_pod()],
    ),
    _single(
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot "
        "schedule onto the node because one of the matchExpression item don't match.",
        pod(labels=S1, affinity=_exists_and_in("securityscan2")),
        [securityscan_pod()],
        want=AFF,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        pod(labels=S1, affinity=[_AFFINITY_SECURITYSCAN], anti=[_ANTI_ANTIVIRUS]),
        [securityscan_pod()],
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the "
        "existing pod",
        pod(labels=S1, affinity=[_AFFINITY_SECURITYSCAN], anti=[_ANTI_ANTIVIRUS]),
        [securityscan_pod(anti=[_ANTI_ANTIVIRUS])],
    ),
    _single(
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        pod(
            labels=S1,
            affinity=[_AFFINITY_SECURITYSCAN],
            anti=[term_in("service", "zone", "securityscan", "value2")],
        ),
        [securityscan_pod()],
        want=ANTI,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity "
        "symmetry with the existing pod",
        pod(labels=S1, affinity=[_AFFINITY_SECURITYSCAN], anti=[_ANTI_ANTIVIRUS]),
        [securityscan_pod(anti=[term_in("security", "zone", "S1")])],
        want=EXISTING,
    ),
    _single(
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        pod(
            labels=SECURITYSCAN,
            affinity=[term_not_in("service", "region", "securityscan", "value2")],
        ),
        [securityscan_pod("node2")],
        want=AFF,
    ),
    _single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity "
        "constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        pod(labels=S1),
        [securityscan_pod(anti=[term_in("security", "zone", "S1", "value2")])],
        want=EXISTING,
    ),
    _single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity "
        "constraints. satisfy PodAntiAffinity symmetry with the existing pod",
        pod(labels=S1),
        [securityscan_pod(anti=[term_not_in("security", "zone", "S1")])],
        want_pre_filter=Status.skip(),
    ),
    _single(
        "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity "
        "symmetry with incoming pod",
        pod(labels=S1, anti=[term_exists("service", "region"), term_exists("security", "region")]),
        [securityscan_pod(anti=[term_exists("security", "zone")])],
        want=ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each "
        "other on AffinityTerms",
        pod(
            labels=SECURITYSCAN,
            anti=[term_exists("service", "zone"), term_exists("security", "zone")],
        ),
        [securityscan_pod(labels=S1, anti=[term_exists("security", "zone")])],
        want=ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each "
        "other on AffinityTerms",
        pod(labels=S1, anti=[term_exists("security", "zone")]),
        [securityscan_pod(anti=[term_exists("service", "zone"), term_exists("security", "zone")])],
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
            securityscan_pod(
                labels={"def": "", "xyz": ""},
                anti=[term_exists("abc", "zone"), term_exists("def", "zone")],
            )
        ],
        want=ANTI,
    ),
    _single(
        "PodAffinity fails PreFilter with an invalid selector operator (upstream's case uses a "
        "bad label value, which Berth leaves to the API server's validation)",
        pod(labels=S1, affinity=[term("region", selector(exprs=[("service", "Near", ["x"])]))]),
        [securityscan_pod()],
        want_pre_filter=Status.unresolvable(
            "parsing pod: requiredAffinityTerms: 'Near' is not a valid label selector operator"
        ),
    ),
    _single(
        "PodAntiAffinity fails PreFilter with an In requirement without values",
        pod(labels=S1, anti=[term("region", selector(exprs=[("service", "In", [])]))]),
        [securityscan_pod()],
        want_pre_filter=Status.unresolvable(
            "parsing pod: requiredAntiAffinityTerms: for 'in', 'notin' operators, values set "
            "can't be empty (key 'service')"
        ),
    ),
    _single(
        "affinity with NamespaceSelector",
        pod(labels=S1, affinity=[team_term("region", "team1", "service", "securityscan")]),
        [securityscan_pod(namespace="subteam1.team1")],
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "affinity with non-matching NamespaceSelector",
        pod(labels=S1, affinity=[team_term("region", "team1", "service", "securityscan")]),
        [securityscan_pod(namespace="subteam1.team2")],
        want=AFF,
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "anti-affinity with matching NamespaceSelector",
        pod(
            namespace="subteam1.team1",
            labels=S1,
            anti=[team_term("zone", "team1", "service", "securityscan")],
        ),
        [securityscan_pod(namespace="subteam2.team1")],
        want=ANTI,
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "anti-affinity with matching all NamespaceSelector",
        pod(
            namespace="subteam1.team1",
            labels=S1,
            anti=[
                term(
                    "zone",
                    selector(exprs=[("service", "In", ["securityscan"])]),
                    namespace_selector=selector(),
                )
            ],
        ),
        [securityscan_pod(namespace="subteam1.team2")],
        want=ANTI,
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "anti-affinity with non-matching NamespaceSelector",
        pod(
            namespace="subteam1.team1",
            labels=S1,
            anti=[team_term("zone", "team1", "service", "securityscan")],
        ),
        [securityscan_pod(namespace="subteam1.team2")],
        namespaces=TEAM_NAMESPACES,
    ),
    _single(
        "existing pod's anti-affinity namespaceSelector is matched against the incoming pod's "
        "namespace labels",
        pod(namespace="subteam1.team1", labels=S1),
        [
            securityscan_pod(
                namespace="subteam1.team2",
                labels={},
                anti=[team_term("zone", "team1", "security", "S1")],
            )
        ],
        want=EXISTING,
        namespaces=TEAM_NAMESPACES,
    ),
]

_CHINA = {"region": "China"}
_CHINA_AZ1 = {"region": "China", "az": "az1"}
_INDIA = {"region": "India"}
_FOO_BAR = {"foo": "bar"}

# filtering_test.go, TestRequiredAffinityMultipleNodes.
MULTI_NODE_CASES = [
    FilterCase(
        "A pod can be scheduled onto all the nodes that have the same topology key & label value "
        "with one of them has an existing pod that matches the affinity rules",
        pod(affinity=[term_in("foo", "region", "bar")]),
        [node("node1", **_CHINA), node("node2", **_CHINA_AZ1), node("node3", **_INDIA)],
        [pod("p1", node="node1", labels=_FOO_BAR)],
        [OK, OK, AFF],
    ),
    FilterCase(
        "The affinity rule is to schedule all of the pods of this collection to the same zone. "
        "The first pod of the collection should not be blocked from being scheduled onto any "
        "node, even there's no existing pod that matches the rule anywhere.",
        pod(
            labels={**_FOO_BAR, **SECURITYSCAN},
            affinity=[term_in("foo", "zone", "bar"), term_in("service", "zone", "securityscan")],
        ),
        [node("nodeA", zone="az1", hostname="h1"), node("nodeB", zone="az2", hostname="h2")],
        [pod("p1", node="nodeA", labels=_FOO_BAR)],
        [OK, OK],
    ),
    FilterCase(
        "The first pod of the collection can only be scheduled on nodes labelled with the "
        "requested topology keys",
        pod(
            labels={**_FOO_BAR, **SECURITYSCAN},
            affinity=[term_in("foo", "zone", "bar"), term_in("service", "zone", "securityscan")],
        ),
        [
            node("nodeA", zoneLabel="az1", hostname="h1"),
            node("nodeB", zoneLabel="az2", hostname="h2"),
        ],
        [pod("p1", node="nodeA", labels=_FOO_BAR)],
        [AFF, AFF],
    ),
    FilterCase(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that "
        "matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
        pod(anti=[term_in("foo", "region", "abc")]),
        hosts("nodeA", "nodeB", region="r1"),
        [pod("p1", node="nodeA", labels={"foo": "abc"})],
        [ANTI, ANTI],
    ),
    FilterCase(
        "This test ensures that anti-affinity matches a pod when any term of the anti-affinity "
        "rule matches a pod.",
        pod(anti=[term_in("foo", "region", "abc"), term_in("service", "zone", "securityscan")]),
        two_zones(region="r1"),
        [pod("p1", node="nodeA", labels={"foo": "abc", **SECURITYSCAN})],
        [ANTI, ANTI],
    ),
    FilterCase(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that "
        "matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB "
        "but can be scheduled onto nodeC",
        pod(labels={"foo": "123"}, anti=[term_in("foo", "region", "bar")]),
        [*hosts("nodeA", "nodeB", region="r1"), *hosts("nodeC", region="r2")],
        [
            pod("p1", node="nodeA", labels=_FOO_BAR),
            pod("p2", node="nodeC", anti=[term_in("foo", "region", "456")]),
        ],
        [ANTI, ANTI, OK],
    ),
    FilterCase(
        "NodeC has an existing pod that matches the inter pod affinity rule but in a different "
        "namespace, so the pod can be scheduled onto nodeC",
        pod(labels={"foo": "123"}, anti=[term_in("foo", "region", "bar")]),
        [*hosts("nodeA", "nodeB", region="r1"), *hosts("nodeC", region="r2")],
        [
            pod("p1", node="nodeA", labels=_FOO_BAR),
            pod("p2", node="nodeC", namespace="NS1", labels=_FOO_BAR),
        ],
        [ANTI, ANTI, OK],
    ),
    FilterCase(
        "Test existing pod's anti-affinity: if an existing pod has a term with invalid "
        "topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the "
        "term is also checked",
        pod(labels={"foo": ""}),
        two_zones(),
        [pod("p1", node="nodeA", anti=[term_exists("foo", "invalid-node-label")])],
        None,
        Status.skip(),
    ),
    FilterCase(
        "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if "
        "topologyKey matches",
        pod(labels={"foo": "", "bar": ""}, anti=[term_exists("foo", "invalid-node-label")]),
        two_zones(),
        [pod("p1", node="nodeA", labels={"foo": ""})],
        [OK, OK],
    ),
    FilterCase(
        "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it "
        "violates each existingPod's terms on all nodes",
        pod(labels={"foo": "", "bar": ""}),
        two_zones(),
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
        two_zones(),
        [pod("p1", node="nodeA", labels={"foo": ""}), pod("p2", node="nodeB", labels={"bar": ""})],
        [ANTI, ANTI],
    ),
    FilterCase(
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, "
        "it's counted as a single term match - case when one term has invalid topologyKey",
        pod(labels={"foo": "", "bar": ""}),
        two_zones(),
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
        two_zones(region="r1"),
        [pod("p1", node="nodeA", labels={"foo": "", "bar": ""})],
        [OK, AFF],
    ),
    FilterCase(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check "
        "if all topologyKeys match, and the match logic should be satisfied on the same pod",
        pod(affinity=[term_exists("foo", "region"), term_exists("bar", "zone")]),
        two_zones(region="r1"),
        [pod("p1", node="nodeA", labels={"foo": ""}), pod("p2", node="nodeB", labels={"bar": ""})],
        [AFF, AFF],
    ),
]


def _run_filter(case: FilterCase) -> None:
    snap, plugin = setup(case.nodes, case.pods, case.namespaces)
    state = fresh_state()
    incoming = info(case.pod)
    result, st = plugin.pre_filter(state, incoming, snap.all_nodes())
    assert result is None
    assert st == case.want_pre_filter
    if case.want is None:
        return
    got = [plugin.filter(state, incoming, snap.nodes[n.name]) for n in case.nodes]
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
    # TestPreFilterDisabled.
    snap, plugin = setup([node("n1")])
    st = plugin.filter(fresh_state(), info(pod()), snap.nodes["n1"])
    assert st.code is Code.ERROR
    assert "PreFilterInterPodAffinity" in st.message
    verdicts = plugin.filter_nodes(fresh_state(), info(pod()), snap.all_nodes())
    assert verdicts.status_of(0) == st


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


def test_filter_reads_a_node_outside_the_snapshot() -> None:
    # A NodeInfo built for a what-if (preemption, nominated pods) has no
    # slot: the per-node Filter reads its labels alone.
    snap, plugin = setup(two_zones(), [pod("p1", node="nodeA", labels={"foo": ""})])
    state = fresh_state()
    incoming = info(pod(anti=[term_exists("foo", "zone")]))
    plugin.pre_filter(state, incoming, snap.all_nodes())
    assert plugin.filter(state, incoming, NodeInfo(node("x", zone="z1"))) == ANTI
    assert plugin.filter(state, incoming, NodeInfo(node("y", zone="z3"))) == OK


# -- getIncomingAffinityAntiAffinityCounts ---------------------------------------------


def _normal(*keys: str) -> pb.Pod:
    """TestGetTPMapMatchingIncomingAffinityAntiAffinity's existing pod on
    nodeA with the given labels (empty values)."""
    return pod("normal", node="nodeA", labels=dict.fromkeys(keys, ""))


def _exists_terms(*keys: str) -> list[pb.PodAffinityTerm]:
    return [term_exists(k, "hostname") for k in keys]


_HOST_A: Counts = {"hostname": {"nodeA": 1}}


@pytest.mark.parametrize(
    ("name", "existing", "incoming", "want_affinity", "want_anti"),
    [
        (
            "no pod has label that violates incoming pod's affinity and anti-affinity",
            [_normal("bbb")],
            pod("aaa-anti", affinity=_exists_terms("aaa"), anti=_exists_terms("aaa")),
            {},
            {},
        ),
        (
            "existing pod matches incoming pod's affinity and anti-affinity - single term case",
            [_normal("aaa")],
            pod("affi-antiaffi", affinity=_exists_terms("aaa"), anti=_exists_terms("aaa")),
            _HOST_A,
            _HOST_A,
        ),
        (
            "existing pod matches incoming pod's affinity and anti-affinity - multiple terms case",
            [_normal("aaa", "bbb")],
            pod("affi-antiaffi", affinity=_exists_terms("aaa", "bbb"), anti=_exists_terms("aaa")),
            {"hostname": {"nodeA": 2}},  # one for each term
            _HOST_A,
        ),
        (
            "existing pod not match incoming pod's affinity but matches anti-affinity",
            [_normal("aaa")],
            pod(
                "affi-antiaffi",
                affinity=_exists_terms("aaa", "bbb"),
                anti=_exists_terms("aaa", "bbb"),
            ),
            {},
            _HOST_A,
        ),
        (
            "incoming pod's anti-affinity has more than one term - existing pod violates partial "
            "term - case 1",
            [_normal("aaa", "bbb")],
            pod(
                "anaffi-antiaffiti",
                affinity=_exists_terms("aaa", "ccc"),
                anti=_exists_terms("aaa", "ccc"),
            ),
            {},
            _HOST_A,
        ),
        (
            "incoming pod's anti-affinity has more than one term - existing pod violates partial "
            "term - case 2",
            [_normal("bbb")],
            pod(
                "affi-antiaffi",
                affinity=_exists_terms("aaa", "bbb"),
                anti=_exists_terms("aaa", "bbb"),
            ),
            {},
            _HOST_A,
        ),
    ],
    ids=lambda v: v[:80] if isinstance(v, str) else "",
)
def test_incoming_affinity_and_anti_affinity_counts(
    name: str, existing: list[pb.Pod], incoming: pb.Pod, want_affinity: Counts, want_anti: Counts
) -> None:
    snap, plugin = setup(hosts("nodeA"), existing)
    state = fresh_state()
    assert plugin.pre_filter(state, info(incoming), snap.all_nodes())[1].is_success
    s = state.read(PRE_FILTER_STATE_KEY)
    assert s.affinity == want_affinity
    assert s.anti_affinity == want_anti


@pytest.mark.parametrize("existing", [[], [_normal("aaa")]], ids=["nil test", "no-op"])
def test_incoming_pod_without_terms_counts_nothing(existing: list[pb.Pod]) -> None:
    # The same test's "nil test" and "incoming pod without affinity/anti-affinity
    # causes a no-op": nothing to check, so PreFilter skips.
    snap, plugin = setup(hosts("nodeA"), existing)
    state = fresh_state()
    assert plugin.pre_filter(state, info(pod("aaa-normal")), snap.all_nodes())[1].is_skip
    assert PRE_FILTER_STATE_KEY not in state


# -- PreFilterExtensions: AddPod, RemovePod ---------------------------------------------

_ANTI_FOO_BAR = [term_in("foo", "region", "bar")]
_COMPLEX = [
    term_in("foo", "region", "bar", "buzz"),
    term_not_in("service", "zone", "bar", "security", "test"),
]
_ADD_REMOVE_NODES = [
    node("nodeA", region="r1", zone="z11"),
    node("nodeB", region="r1", zone="z12"),
    node("nodeC", region="r2", zone="z21"),
]


def _add_remove_existing(p2_affinity: Sequence[pb.PodAffinityTerm] = ()) -> list[pb.Pod]:
    return [
        pod("p1", labels=_FOO_BAR, node="nodeA"),
        pod("p2", node="nodeC", anti=_ANTI_FOO_BAR, affinity=p2_affinity),
    ]


# filtering_test.go, TestPreFilterStateAddRemovePod: (name, pending pod,
# existing pods, added pod, anti-affinity and affinity counts after adding).
ADD_REMOVE_CASES = [
    (
        "preFilterState anti-affinity terms are updated correctly after adding and removing a pod",
        pod("pending", labels=_FOO_BAR, anti=_ANTI_FOO_BAR),
        _add_remove_existing(),
        pod("addedPod", labels=_FOO_BAR, node="nodeB", anti=_ANTI_FOO_BAR),
        {"region": {"r1": 2}},
        {},
    ),
    (
        "preFilterState anti-affinity terms are updated correctly after adding and removing a "
        "pod, complex terms",
        pod("pending", labels=_FOO_BAR, anti=_COMPLEX),
        _add_remove_existing(),
        pod("addedPod", labels=_FOO_BAR, node="nodeA", anti=_COMPLEX),
        {"region": {"r1": 2}, "zone": {"z11": 2, "z21": 1}},
        {},
    ),
    (
        "preFilterState matching pod affinity and anti-affinity are updated correctly after "
        "adding and removing a pod",
        pod("pending", labels=_FOO_BAR, affinity=_COMPLEX),
        _add_remove_existing(p2_affinity=_COMPLEX),
        pod("addedPod", labels=_FOO_BAR, node="nodeA", anti=_COMPLEX),
        {},
        {"region": {"r1": 2}, "zone": {"z11": 2}},
    ),
]


def _pre_filtered(
    pods: list[pb.Pod], pending: pb.Pod
) -> tuple[InterPodAffinity, dict[str, NodeInfo], CycleState, PreFilterState]:
    snap, plugin = setup(_ADD_REMOVE_NODES, pods)
    state = fresh_state()
    assert plugin.pre_filter(state, info(pending), snap.all_nodes())[1].is_success
    return plugin, snap.nodes, state, state.read(PRE_FILTER_STATE_KEY)


@pytest.mark.parametrize(
    ("name", "pending", "existing", "added", "want_anti", "want_affinity"),
    ADD_REMOVE_CASES,
    ids=lambda v: v[:90] if isinstance(v, str) else "",
)
def test_pre_filter_state_add_remove_pod(
    name: str,
    pending: pb.Pod,
    existing: list[pb.Pod],
    added: pb.Pod,
    want_anti: Counts,
    want_affinity: Counts,
) -> None:
    # The state PreFilter computes with every pod, the added one included.
    _, _, _, all_pods = _pre_filtered([*existing, added], pending)
    plugin, nodes, state, original = _pre_filtered(existing, pending)
    target = nodes[added.node_name]
    incoming, added_info = info(pending), info(added)

    assert plugin.add_pod(state, incoming, added_info, target).is_success
    after = state.read(PRE_FILTER_STATE_KEY)
    assert after.anti_affinity == want_anti
    assert after.affinity == want_affinity
    assert after == all_pods
    # The state is replaced, not changed in place (a clone may share it).
    assert after is not original

    assert plugin.remove_pod(state, incoming, added_info, target).is_success
    assert state.read(PRE_FILTER_STATE_KEY) == original


def test_add_pod_on_a_cloned_state_leaves_the_original_alone() -> None:
    # TestPreFilterStateClone's point: preemption evaluates each node on a
    # clone of the cycle state, so what AddPod/RemovePod change there must not
    # reach the original.
    _, pending, existing, added, _, _ = ADD_REMOVE_CASES[1]
    plugin, nodes, state, original = _pre_filtered(existing, pending)
    clone = state.clone()
    assert plugin.add_pod(clone, info(pending), info(added), nodes["nodeA"]).is_success
    assert clone.read(PRE_FILTER_STATE_KEY) != original
    assert state.read(PRE_FILTER_STATE_KEY) == original
    assert state.read(PRE_FILTER_STATE_KEY).existing_anti_affinity == {"region": {"r2": 1}}


def test_removing_the_last_matching_pod_lets_the_node_pass() -> None:
    # Preemption's dry run: with the only conflicting pod removed, the node
    # passes Filter (counts that reach zero are dropped, as upstream's update does).
    snap, plugin = setup(two_zones(), [pod("victim", node="nodeA", labels={"foo": ""})])
    state = fresh_state()
    incoming = info(pod(anti=[term_exists("foo", "zone")]))
    plugin.pre_filter(state, incoming, snap.all_nodes())
    node_a = snap.nodes["nodeA"]
    assert plugin.filter(state, incoming, node_a) == ANTI
    victim = snap.pods["default/victim"]
    assert plugin.remove_pod(state, incoming, victim, node_a).is_success
    assert state.read(PRE_FILTER_STATE_KEY).anti_affinity == {}
    assert plugin.filter(state, incoming, node_a) == OK
    assert plugin.add_pod(state, incoming, victim, node_a).is_success
    assert plugin.filter(state, incoming, node_a) == ANTI


def test_add_pod_counts_a_nominated_pods_anti_affinity() -> None:
    # RunFilterPluginsWithNominatedPods: a nominated pod with anti-affinity the
    # incoming pod matches blocks its node's topology domain.
    snap, plugin = setup(two_zones())
    state = fresh_state()
    incoming = info(pod(labels=S1, affinity=[term_exists("security", "zone")]))
    plugin.pre_filter(state, incoming, snap.all_nodes())
    nominated = info(pod("nominated", anti=[term_in("security", "zone", "S1")]))
    clone = NodeInfo(snap.nodes["nodeB"].node)
    assert plugin.add_pod(state, incoming, nominated, clone).is_success
    assert state.read(PRE_FILTER_STATE_KEY).existing_anti_affinity == {"zone": {"z2": 1}}
    assert plugin.filter(state, incoming, clone) == EXISTING


def test_extensions_need_the_pre_filter_state() -> None:
    snap, plugin = setup([node("n1")])
    for call in (plugin.add_pod, plugin.remove_pod):
        st = call(fresh_state(), info(pod()), info(pod("other")), snap.nodes["n1"])
        assert st.code is Code.ERROR
        assert st.message == 'error reading "PreFilterInterPodAffinity" from cycleState: not found'
    assert InterPodAffinity.has_extensions()
