"""PodTopologySpread PreFilter/Filter, after upstream's filtering_test.go at
v1.36 (TestSingleConstraint, TestMultipleConstraints, TestPreFilterState,
TestPreFilterStateAddPod, TestPreFilterDisabled). Case ids are upstream's
names. Upstream runs some cases with NodeInclusionPolicyInPodTopologySpread
off; it is GA (locked on) at v1.36 and gives the same results for them (the
pod's node affinity is honoured by default, taints ignored), so they run
here as Berth serves them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState, StateError
from berth.framework.model import PodInfo
from berth.framework.status import Code, Status
from berth.framework.testing import fresh_state, snapshot_of
from berth.plugins.podtopologyspread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PRE_FILTER_STATE_KEY,
    PodTopologySpread,
    PodTopologySpreadArgs,
)
from tests.plugins.podtopologyspread.testutil import DNS, SA, C, node, pod, spread_pod

LIST = PodTopologySpreadArgs(defaulting_type="List")

S, U, X = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE

ZONES = (
    "node-a zone=zone1 node=node-a",
    "node-b zone=zone1 node=node-b",
    "node-x zone=zone2 node=node-x",
    "node-y zone=zone2 node=node-y",
)
P2103 = (
    "p-a1@node-a foo=",
    "p-a2@node-a foo=",
    "p-b1@node-b foo=",
    "p-y1@node-y foo=",
    "p-y2@node-y foo=",
    "p-y3@node-y foo=",
)
POLICY_NODES = (
    "node-a node=node-a foo=",
    "node-b node=node-b foo=",
    "node-x node=node-x foo=",
    "node-y node=node-y",
)
POLICY_PODS = ("p-b1@node-a foo=", "p-b2@node-b foo=", "p-y1@node-y foo=")
TAINT_NODES = (*POLICY_NODES[:3], "node-y node=node-y !taint")
MULTI_POLICY_PODS = ("p-a1@node-a foo=", "p-b1@node-b foo=", "p-y1@node-y foo=")

FilterCase = tuple[str, PodInfo, Sequence[str], Sequence[str], Sequence[Code]]


def _cases() -> list[FilterCase]:
    foo = spread_pod
    return [
        # -- TestSingleConstraint
        ("no existing pods", foo("foo=", C(1, "zone", DNS, "foo")), ZONES, (), (S, S, S, S)),
        (
            "no existing pods, incoming pod doesn't match itself",
            foo("foo=", C(1, "zone", DNS, "bar")),
            ZONES,
            (),
            (S, S, S, S),
        ),
        (
            "existing pods in a different namespace do not count",
            foo("foo=", C(1, "zone", DNS, "foo")),
            ZONES,
            (
                "p-a1@node-a ns=ns1 foo=",
                "p-b1@node-a ns=ns2 foo=",
                "p-x1@node-x foo=",
                "p-y1@node-y foo=",
            ),
            (S, S, U, U),
        ),
        (
            "existing pods do not match null selector",
            foo("foo=", C(1, "zone", DNS, None)),
            ZONES,
            ("p-x1@node-x foo=", "p-y1@node-y foo="),
            (S, S, S, S),
        ),
        (
            "pods spread across zones as 3/3, all nodes fit",
            foo("foo=", C(1, "zone", DNS, "foo")),
            ZONES,
            P2103,
            (S, S, S, S),
        ),
        (
            "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
            foo("foo=", C(1, "zone", DNS, "foo")),
            (ZONES[0], "node-b zon=zone1 node=node-b", ZONES[2], ZONES[3]),
            ("p-a1@node-a foo=", "p-b1@node-b foo=", "p-x1@node-x foo=", "p-y1@node-y foo="),
            (S, X, U, U),
        ),
        (
            "pod cannot be scheduled as all nodes don't have label 'rack'",
            foo("foo=", C(1, "rack", DNS, "foo")),
            (ZONES[0], ZONES[2]),
            (),
            (X, X),
        ),
        (
            "pods spread across nodes as 2/1/0/3, only node-x fits",
            foo("foo=", C(1, "node", DNS, "foo")),
            ZONES,
            P2103,
            (U, U, S, U),
        ),
        (
            "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
            foo("foo=", C(2, "node", DNS, "foo")),
            ZONES,
            P2103,
            (U, S, S, U),
        ),
        (
            "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
            foo("bar=", C(1, "node", DNS, "foo")),
            ZONES,
            P2103,
            (U, S, S, U),
        ),
        (
            "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
            foo("foo=", C(1, "node", DNS, "foo"), affinity_in=("node", ["node-a", "node-y"])),
            ZONES,
            P2103,
            (S, S, S, U),
        ),
        (
            "terminating Pods should be excluded",
            foo("foo=", C(1, "node", DNS, "foo")),
            ("node-a node=node-a", "node-b node=node-b"),
            ("p-a@node-a foo= !terminating", "p-b@node-b foo="),
            (S, U),
        ),
        (
            "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
            foo("foo=", C(1, "zone", DNS, "foo"), affinity_not_in=("node", ["node-b"])),
            ZONES,
            ("p-b1@node-b foo=", "p-b2@node-b foo=", "p-y1@node-y foo="),
            (S, S, U, U),
        ),
        (
            "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < "
            "minDomains, then the third node fits",
            foo("foo=", C(2, "node", DNS, "foo", min_domains=4)),
            ("node-a node=node-a", "node-b node=node-b", "node-c node=node-c"),
            (
                "p-a1@node-a foo=",
                "p-a2@node-a foo=",
                "p-b1@node-b foo=",
                "p-b2@node-b foo=",
                "p-c1@node-c foo=",
            ),
            (U, U, S),
        ),
        (
            "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > "
            "minDomains, then the all nodes fit",
            foo("foo=", C(2, "node", DNS, "foo", min_domains=2)),
            ("node-a node=node-a", "node-b node=node-b", "node-c node=node-c"),
            (
                "p-a1@node-a foo=",
                "p-a2@node-a foo=",
                "p-b1@node-b foo=",
                "p-b2@node-b foo=",
                "p-c1@node-c foo=",
            ),
            (S, S, S),
        ),
        (
            "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < "
            "minDomains, then the third and fourth nodes fit",
            foo("foo=", C(2, "zone", DNS, "foo", min_domains=3)),
            ZONES,
            ("p-b1@node-a foo=", "p-b2@node-b foo=", "p-y1@node-y foo="),
            (U, U, S, S),
        ),
        (
            "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > "
            "minDomains, then the all nodes fit",
            foo("foo=", C(2, "zone", DNS, "foo", min_domains=1)),
            ZONES,
            ("p-b1@node-a foo=", "p-b2@node-b foo=", "p-y1@node-y foo="),
            (S, S, S, S),
        ),
        (
            "NodeAffinityPolicy honored with labelSelectors",
            foo("foo=", C(1, "node", DNS, "foo"), node_selector={"foo": ""}),
            POLICY_NODES,
            POLICY_PODS,
            (U, U, S, S),
        ),
        (
            "NodeAffinityPolicy ignored with labelSelectors",
            foo("foo=", C(1, "node", DNS, "foo", naff="Ignore"), node_selector={"foo": ""}),
            POLICY_NODES,
            POLICY_PODS,
            (U, U, S, U),
        ),
        (
            "NodeAffinityPolicy honored with nodeAffinity",
            foo("foo=", C(1, "node", DNS, "foo"), affinity_in=("foo", [""])),
            POLICY_NODES,
            POLICY_PODS,
            (U, U, S, S),
        ),
        (
            "NodeAffinityPolicy ignored with nodeAffinity",
            foo("foo=", C(1, "node", DNS, "foo", naff="Ignore"), affinity_in=("foo", [""])),
            POLICY_NODES,
            POLICY_PODS,
            (U, U, S, U),
        ),
        (
            "NodeTaintsPolicy honored",
            foo("foo=", C(1, "node", DNS, "foo", ntaint="Honor")),
            TAINT_NODES,
            POLICY_PODS,
            (U, U, S, S),
        ),
        (
            "NodeTaintsPolicy ignored",
            foo("foo=", C(1, "node", DNS, "foo")),
            TAINT_NODES,
            POLICY_PODS,
            (U, U, S, U),
        ),
        # -- TestMultipleConstraints
        (
            "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
            foo("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo")),
            ZONES,
            P2103,
            (U, U, S, U),
        ),
        (
            "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
            foo("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo")),
            ZONES,
            (*P2103, "p-y4@node-y foo="),
            (U, U, U, U),
        ),
        (
            "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
            foo("foo= bar=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "bar")),
            ZONES,
            ("p-a1@node-a foo=", "p-y1@node-y bar="),
            (U, U, S, U),
        ),
        (
            "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
            foo("foo= bar=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "bar")),
            ZONES,
            ("p-a1@node-a foo=", "p-x1@node-x bar=", "p-y1@node-y bar="),
            (U, U, U, U),
        ),
        (
            "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
            foo("foo= bar=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "bar")),
            ZONES,
            (
                "p-a1@node-a foo=",
                "p-a2@node-a foo= bar=",
                "p-y1@node-y foo=",
                "p-y2@node-y foo= bar=",
                "p-y3@node-y foo=",
            ),
            (U, S, U, U),
        ),
        (
            "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' "
            "constraint",
            foo("bar=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "bar")),
            ZONES,
            ("p-a1@node-a foo=", "p-x1@node-x bar=", "p-y1@node-y bar="),
            (S, S, U, U),
        ),
        (
            "two Constraints on zone and node, absence of label 'node' on node-x, "
            "spreads = [1/1, 1/0/0/1]",
            foo("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo")),
            (ZONES[0], ZONES[1], "node-x zone=zone2", ZONES[3]),
            ("p-a1@node-a foo=", "p-y3@node-y foo="),
            (U, S, X, U),
        ),
        (
            "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
            foo(
                "foo=",
                C(1, "zone", DNS, "foo"),
                C(1, "node", DNS, "foo", naff="Ignore"),
                node_selector={"foo": ""},
            ),
            (
                "node-a zone=zone1 node=node-a foo=",
                "node-b zone=zone1 node=node-b foo=",
                "node-x zone=zone2 node=node-x foo=",
                "node-y zone=zone2 node=node-y",
            ),
            MULTI_POLICY_PODS,
            (U, U, S, U),
        ),
        (
            "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
            foo("foo=", C(1, "zone", DNS, "foo", ntaint="Honor"), C(1, "node", DNS, "foo")),
            (
                "node-a zone=zone1 node=node-a foo=",
                "node-b zone=zone1 node=node-b foo=",
                "node-x zone=zone2 node=node-x foo=",
                "node-y zone=zone2 node=node-y !taint",
            ),
            MULTI_POLICY_PODS,
            (U, U, S, U),
        ),
        (
            "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
            foo(
                "foo=",
                C(1, "zone", DNS, "foo"),
                C(1, "node", DNS, "foo"),
                node_selector={"foo": ""},
            ),
            (
                "node-a zone=zone1 node=node-a foo=",
                "node-b zone=zone1 node=node-b",
                "node-x zone=zone2 node=node-x foo=",
                "node-y zone=zone2 node=node-y foo= !taint",
            ),
            MULTI_POLICY_PODS,
            (U, S, S, U),
        ),
        (
            "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
            foo(
                "foo=",
                C(1, "zone", DNS, "foo", ntaint="Honor"),
                C(1, "node", DNS, "foo", naff="Ignore"),
                node_selector={"foo": ""},
            ),
            (
                "node-a zone=zone1 node=node-a foo=",
                "node-b zone=zone1 node=node-b",
                "node-x zone=zone2 node=node-x foo=",
                "node-y zone=zone2 node=node-y foo= !taint",
            ),
            MULTI_POLICY_PODS,
            (U, U, S, U),
        ),
        (
            "two Constraints on zone, spreads = [3/3, 2/1]",
            foo("foo= bar=", C(1, "zone", DNS, "bar"), C(1, "zone", DNS, "foo")),
            ZONES,
            (
                "p-a1@node-a foo= bar=",
                "p-a2@node-a foo=",
                "p-b1@node-b foo= bar=",
                "p-y1@node-y foo=",
                "p-y2@node-y foo= bar=",
                "p-y3@node-y foo=",
            ),
            (U, U, S, S),
        ),
        (
            "two Constraints on zone, spreads = [3/4, 2/1]",
            foo("foo= bar=", C(1, "zone", DNS, "bar"), C(1, "zone", DNS, "foo")),
            ZONES,
            (
                "p-a1@node-a foo= bar=",
                "p-a2@node-a foo=",
                "p-b1@node-b foo= bar=",
                "p-y1@node-y foo=",
                "p-y2@node-y foo= bar=",
                "p-y3@node-y foo=",
                "p-y4@node-y foo=",
            ),
            (U, U, U, U),
        ),
    ]


CASES = _cases()


def run_filter(
    incoming: PodInfo,
    node_specs: Sequence[str],
    pod_specs: Sequence[str],
    args: PodTopologySpreadArgs = LIST,
    batch: bool = False,
) -> list[Code]:
    nodes = [node(s) for s in node_specs]
    snap = snapshot_of(nodes, [pod(s) for s in pod_specs])
    pl = PodTopologySpread(args)
    state = fresh_state()
    _, st = pl.pre_filter(state, incoming, snap.all_nodes())
    assert st.is_success, st
    # Filter may run in another call: the state travels encoded.
    state = fresh_state(state.encode())
    names = [n.name for n in nodes]
    if batch:
        verdicts = pl.filter_nodes(state, incoming, snap.batch(names))
        return [verdicts.status_of(k).code for k in range(len(names))]
    return [pl.filter(state, incoming, snap.nodes[n]).code for n in names]


@pytest.mark.parametrize(
    ("name", "incoming", "nodes", "pods", "want"), CASES, ids=[c[0] for c in CASES]
)
@pytest.mark.parametrize("batch", [False, True], ids=["per-node", "batch"])
def test_filter(
    name: str,
    incoming: PodInfo,
    nodes: Sequence[str],
    pods: Sequence[str],
    want: Sequence[Code],
    batch: bool,
) -> None:
    assert run_filter(incoming, nodes, pods, batch=batch) == list(want)


def test_reasons_are_upstreams() -> None:
    assert (
        ERR_REASON_CONSTRAINTS_NOT_MATCH == "node(s) didn't match pod topology spread constraints"
    )
    assert ERR_REASON_NODE_LABEL_NOT_MATCH == (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )
    snap = snapshot_of([node("node-a zone=z1"), node("node-b")], [pod("p1@node-a foo=")])
    incoming = spread_pod("foo=", C(0, "zone", DNS, "foo"))
    pl = PodTopologySpread(LIST)
    state = fresh_state()
    pl.pre_filter(state, incoming, snap.all_nodes())
    a = pl.filter(state, incoming, snap.nodes["node-a"])
    b = pl.filter(state, incoming, snap.nodes["node-b"])
    assert (a.code, a.reasons) == (U, (ERR_REASON_CONSTRAINTS_NOT_MATCH,))
    assert (b.code, b.reasons) == (X, (ERR_REASON_NODE_LABEL_NOT_MATCH,))


# -- TestPreFilterState (a selection): the counts and critical paths ------------------


def pre_filter_state(
    incoming: PodInfo, node_specs: Sequence[str], pod_specs: Sequence[str]
) -> tuple[list[dict[str, int]], list[int]]:
    snap = snapshot_of([node(s) for s in node_specs], [pod(s) for s in pod_specs])
    state = CycleState()
    _, st = PodTopologySpread(LIST).pre_filter(state, incoming, snap.all_nodes())
    assert st.is_success, st
    s = state.read(PRE_FILTER_STATE_KEY)
    return s.tp_value_to_match_num, [p[0][1] for p in s.critical_paths]


def test_pre_filter_state_clean_cluster_with_one_spreadconstraint() -> None:
    counts, mins = pre_filter_state(
        spread_pod("foo=", C(5, "zone", DNS, {"foo": "bar"})), ZONES, ()
    )
    assert counts == [{"zone1": 0, "zone2": 0}]
    assert mins == [0]


def test_pre_filter_state_normal_case_with_one_spreadconstraint() -> None:
    counts, mins = pre_filter_state(
        spread_pod("foo=", C(1, "zone", DNS, "foo")),
        ZONES,
        (
            "p-a1@node-a foo=",
            "p-a2@node-a foo=",
            "p-b1@node-b foo=",
            "p-y1@node-y foo=",
            "p-y2@node-y foo=",
        ),
    )
    assert counts == [{"zone1": 3, "zone2": 2}]
    assert mins == [2]


def test_pre_filter_state_namespace_mismatch_doesnt_count() -> None:
    counts, _ = pre_filter_state(
        spread_pod("foo=", C(1, "zone", DNS, "foo")),
        ZONES,
        (
            "p-a1@node-a ns=ns1 foo=",
            "p-a2@node-a foo=",
            "p-b1@node-b ns=ns1 foo=",
            "p-y1@node-y ns=ns2 foo=",
            "p-y2@node-y foo=",
        ),
    )
    assert counts == [{"zone1": 1, "zone2": 1}]


def test_pre_filter_state_normal_case_with_two_spreadconstraints() -> None:
    counts, mins = pre_filter_state(
        spread_pod("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo")),
        ZONES,
        (
            "p-a1@node-a foo=",
            "p-a2@node-a foo=",
            "p-b1@node-b foo=",
            "p-y1@node-y foo=",
            "p-y2@node-y foo=",
            "p-y3@node-y foo=",
            "p-y4@node-y foo=",
        ),
    )
    assert counts == [
        {"zone1": 3, "zone2": 4},
        {"node-a": 2, "node-b": 1, "node-x": 0, "node-y": 4},
    ]
    assert mins == [3, 0]


def test_pre_filter_state_soft_constraints_are_left_to_pre_score() -> None:
    incoming = spread_pod("foo=", C(1, "zone", SA, "foo"), C(1, "node", DNS, "foo"))
    counts, _ = pre_filter_state(incoming, ZONES, ("p-a1@node-a foo=",))
    assert counts == [{"node-a": 1, "node-b": 0, "node-x": 0, "node-y": 0}]


def test_pre_filter_state_match_label_keys_are_anded_into_the_selector() -> None:
    incoming = spread_pod("foo= version=v2", C(1, "zone", DNS, "foo", mlk=["version"]))
    counts, _ = pre_filter_state(
        incoming,
        ZONES,
        ("p-a1@node-a foo= version=v1", "p-a2@node-a foo= version=v2", "p-x1@node-x foo="),
    )
    assert counts == [{"zone1": 1, "zone2": 0}]


def test_pre_filter_state_match_label_keys_absent_from_the_pod_are_ignored() -> None:
    incoming = spread_pod("foo=", C(1, "zone", DNS, "foo", mlk=["version"]))
    counts, _ = pre_filter_state(
        incoming, ZONES, ("p-a1@node-a foo= version=v1", "p-x1@node-x foo=")
    )
    assert counts == [{"zone1": 1, "zone2": 1}]


def test_pre_filter_state_empty_selector_counts_no_pods() -> None:
    # countPodsMatchSelector: an empty (everything) selector counts none.
    counts, _ = pre_filter_state(spread_pod("foo=", C(1, "zone", DNS, {})), ZONES, P2103)
    assert counts == [{"zone1": 0, "zone2": 0}]


def test_pre_filter_skips_without_hard_constraints() -> None:
    snap = snapshot_of([node(s) for s in ZONES])
    state = CycleState()
    _, st = PodTopologySpread(LIST).pre_filter(
        state, spread_pod("foo=", C(1, "zone", SA, "foo")), snap.all_nodes()
    )
    assert st.is_skip
    assert PRE_FILTER_STATE_KEY not in state


def test_pre_filter_bad_selector_is_an_error_naming_it() -> None:
    c = C(1, "zone", DNS, None)
    c.label_selector.match_expressions.add(key="foo", operator="Gt", values=["1"])
    snap = snapshot_of([node(s) for s in ZONES])
    _, st = PodTopologySpread(LIST).pre_filter(
        CycleState(), spread_pod("foo=", c), snap.all_nodes()
    )
    assert st.code is Code.ERROR
    assert "matchExpressions[0].operator" in st.message
    assert '"Gt" is not a valid label selector operator' in st.message


def test_filter_without_pre_filter_state_fails() -> None:
    # TestPreFilterDisabled: Filter without PreFilter's state is an error.
    snap = snapshot_of([node("node-a")])
    with pytest.raises(StateError):
        PodTopologySpread(LIST).filter(CycleState(), spread_pod(""), snap.nodes["node-a"])


# -- TestPreFilterStateAddPod (a selection): updateWithPod ---------------------------------


def test_add_pod_counts_a_matching_pod_in_its_domain() -> None:
    incoming = spread_pod("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo"))
    snap = snapshot_of([node(s) for s in ZONES], [pod("p-a1@node-a foo="), pod("p-y1@node-y foo=")])
    state = CycleState()
    PodTopologySpread(LIST).pre_filter(state, incoming, snap.all_nodes())
    s = state.read(PRE_FILTER_STATE_KEY)
    s.add_pod(pod("p-b1@node-b foo="), incoming.proto, snap.nodes["node-b"].node, 1)
    assert s.tp_value_to_match_num == [
        {"zone1": 2, "zone2": 1},
        {"node-a": 1, "node-b": 1, "node-x": 0, "node-y": 1},
    ]
    assert [p[0] for p in s.critical_paths] == [("zone2", 1), ("node-x", 0)]
    # A pod of another namespace, or one that does not match, changes nothing.
    s.add_pod(pod("q@node-x ns=other foo="), incoming.proto, snap.nodes["node-x"].node, 1)
    s.add_pod(pod("r@node-x bar="), incoming.proto, snap.nodes["node-x"].node, 1)
    assert s.tp_value_to_match_num[1]["node-x"] == 0
    # RemovePod.
    s.add_pod(pod("p-a1@node-a foo="), incoming.proto, snap.nodes["node-a"].node, -1)
    assert s.tp_value_to_match_num == [
        {"zone1": 1, "zone2": 1},
        {"node-a": 0, "node-b": 1, "node-x": 0, "node-y": 1},
    ]


def test_add_pod_skips_nodes_without_every_topology_key() -> None:
    incoming = spread_pod("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo"))
    snap = snapshot_of([node(s) for s in ZONES] + [node("node-z zone=zone1")])
    state = CycleState()
    PodTopologySpread(LIST).pre_filter(state, incoming, snap.all_nodes())
    s = state.read(PRE_FILTER_STATE_KEY)
    s.add_pod(pod("p@node-z foo="), incoming.proto, snap.nodes["node-z"].node, 1)
    assert s.tp_value_to_match_num[0] == {"zone1": 0, "zone2": 0}


def test_add_pod_and_remove_pod_extensions_write_a_copy() -> None:
    """filtering.go, AddPod/RemovePod (PreFilterExtensions): the counts of a
    cloned CycleState change, the original's do not (its value is shared
    with the clone); a pod that changes no count leaves the value as it is."""
    incoming = spread_pod("foo=", C(1, "zone", DNS, "foo"), C(1, "node", DNS, "foo"))
    snap = snapshot_of([node(s) for s in ZONES], [pod("p-a1@node-a foo="), pod("p-y1@node-y foo=")])
    plugin = PodTopologySpread(LIST)
    assert plugin.has_extensions()
    state = CycleState()
    plugin.pre_filter(state, incoming, snap.all_nodes())
    original = state.read(PRE_FILTER_STATE_KEY)
    before = [dict(m) for m in original.tp_value_to_match_num]
    clone = state.clone()
    node_b = snap.nodes["node-b"]
    added = PodInfo(pod("p-b1@node-b foo="))
    assert plugin.add_pod(clone, incoming, added, node_b).is_success
    s = clone.read(PRE_FILTER_STATE_KEY)
    assert s.tp_value_to_match_num == [
        {"zone1": 2, "zone2": 1},
        {"node-a": 1, "node-b": 1, "node-x": 0, "node-y": 1},
    ]
    assert state.read(PRE_FILTER_STATE_KEY).tp_value_to_match_num == before
    assert plugin.remove_pod(clone, incoming, added, node_b).is_success
    assert clone.read(PRE_FILTER_STATE_KEY).tp_value_to_match_num == before
    # Another namespace: nothing to count, the value stays the same object.
    current = clone.read(PRE_FILTER_STATE_KEY)
    other = PodInfo(pod("q@node-b ns=other foo="))
    assert plugin.add_pod(clone, incoming, other, node_b).is_success
    assert clone.read(PRE_FILTER_STATE_KEY) is current
    # Without PreFilter's state: upstream's getPreFilterState error.
    st = plugin.add_pod(CycleState(), incoming, added, node_b)
    assert st == Status.error('reading "PreFilterPodTopologySpread" from cycleState: not found')


def test_state_survives_the_round_trip() -> None:
    incoming = spread_pod("foo=", C(2, "zone", DNS, "foo", min_domains=3, ntaint="Honor"))
    snap = snapshot_of([node(s) for s in ZONES], [pod(s) for s in P2103])
    state = CycleState()
    PodTopologySpread(LIST).pre_filter(state, incoming, snap.all_nodes())
    again = fresh_state(state.encode()).read(PRE_FILTER_STATE_KEY)
    assert again == state.read(PRE_FILTER_STATE_KEY)


def _tolerating(key: str) -> Sequence[pb.Toleration]:
    return [pb.Toleration(key=key, operator="Exists", effect="NoSchedule")]


def test_taints_policy_honor_counts_nodes_whose_taints_the_pod_tolerates() -> None:
    incoming = spread_pod(
        "foo=",
        C(1, "node", DNS, "foo", ntaint="Honor"),
        tolerations=_tolerating("node.kubernetes.io/unschedulable"),
    )
    # node-y's taint is tolerated: its domain counts (1/1/0/1), so node-a and
    # node-b are over the skew and node-y too.
    assert run_filter(incoming, TAINT_NODES, POLICY_PODS) == [U, U, S, U]
