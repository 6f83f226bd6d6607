"""NodeAffinity, ported from upstream's node_affinity_test.go at v1.36
(TestNodeAffinity, TestNodeAffinityPriority), plus the batch forms checked
against the per-node forms on random clusters, CycleState across the wire,
and whole cycles through the Framework."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.config import load_config
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import MAX_NODE_SCORE, Plugin, PreFilterResult
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code, Status
from berth.framework.testing import batch_of, fresh_state, snapshot_of
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.nodeaffinity import (
    ERR_REASON_CONFLICT,
    ERR_REASON_ENFORCED,
    ERR_REASON_POD,
    PRE_FILTER_STATE_KEY,
    PRE_SCORE_STATE_KEY,
    NodeAffinity,
    NodeAffinityArgs,
)
from berth.plugins.nodeaffinity.node_affinity import default_normalize_score
from berth.plugins.queuesort import PrioritySort
from tests.plugins.nodeaffinity.testutil import affinity_pod, labelled_node, match, name_in, term

POD_MISMATCH = Status.unresolvable(ERR_REASON_POD)
ENFORCED = Status.unresolvable(ERR_REASON_ENFORCED)
CONFLICT = Status.unresolvable(ERR_REASON_CONFLICT)
SKIP = Status.skip()
OK = Status()


def args_of(added_affinity: dict[str, Any]) -> NodeAffinityArgs:
    """Args as a configuration file spells them (camelCase)."""
    return msgspec.convert({"addedAffinity": added_affinity}, NodeAffinityArgs)


def zone_is(zone: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}


NAME_IS_NODE2 = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node2"]}]}


# -- TestNodeAffinity ------------------------------------------------------------------


@dataclass
class FilterCase:
    pod: PodInfo
    labels: dict[str, str] = field(default_factory=dict)
    node_name: str = ""
    want_status: Status = OK
    want_pre_filter_status: Status = OK
    want_pre_filter_result: PreFilterResult | None = None
    args: NodeAffinityArgs | None = None
    run_pre_filter: bool = True


FILTER_CASES = [
    pytest.param(
        FilterCase(affinity_pod(node_selector={"foo": "bar"}), want_status=POD_MISMATCH),
        id="missing labels",
    ),
    pytest.param(
        FilterCase(affinity_pod(node_selector={"foo": "bar"}), labels={"foo": "bar"}),
        id="same labels",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(node_selector={"foo": "bar"}), labels={"foo": "bar", "baz": "blah"}
        ),
        id="node labels are superset",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(node_selector={"foo": "bar", "baz": "blah"}),
            labels={"foo": "bar"},
            want_status=POD_MISMATCH,
        ),
        id="node labels are subset",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("foo", "In", "bar", "value2"))]),
            labels={"foo": "bar"},
        ),
        id="Pod with matchExpressions using In operator that matches the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("kernel-version", "Gt", "0204"))]),
            labels={"kernel-version": "0206"},
        ),
        id="Pod with matchExpressions using Gt operator that matches the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("mem-type", "NotIn", "DDR", "DDR2"))]),
            labels={"mem-type": "DDR3"},
        ),
        id="Pod with matchExpressions using NotIn operator that matches the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("GPU", "Exists"))]),
            labels={"GPU": "NVIDIA-GRID-K1"},
        ),
        id="Pod with matchExpressions using Exists operator that matches the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("foo", "In", "value1", "value2"))]),
            labels={"foo": "bar"},
            want_status=POD_MISMATCH,
        ),
        id="Pod with affinity that don't match node's labels won't schedule onto the node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term()]), labels={"foo": "bar"}, want_status=POD_MISMATCH
        ),
        id="Pod with empty MatchExpressions is not a valid value will match no objects",
    ),
    pytest.param(
        FilterCase(affinity_pod(), labels={"foo": "bar"}, want_pre_filter_status=SKIP),
        id="Pod with no Affinity will schedule onto a node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(node_affinity=True), labels={"foo": "bar"}, want_pre_filter_status=SKIP
        ),
        id="Pod with Affinity but nil NodeSelector will schedule onto a node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[term(match("GPU", "Exists"), match("GPU", "NotIn", "AMD", "INTER"))]
            ),
            labels={"GPU": "NVIDIA-GRID-K1"},
        ),
        id="Pod with multiple matchExpressions ANDed that matches the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[term(match("GPU", "Exists"), match("GPU", "In", "AMD", "INTER"))]
            ),
            labels={"GPU": "NVIDIA-GRID-K1"},
            want_status=POD_MISMATCH,
        ),
        id="Pod with multiple matchExpressions ANDed that doesn't match the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[
                    term(match("foo", "In", "bar", "value2")),
                    term(match("diffkey", "In", "wrong", "value2")),
                ]
            ),
            labels={"foo": "bar"},
        ),
        id="Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(node_selector={"foo": "bar"}, required=[term(match("foo", "Exists"))]),
            labels={"foo": "bar"},
        ),
        id="Pod with an Affinity and a PodSpec.NodeSelector both are satisfied",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(node_selector={"foo": "bar"}, required=[term(match("foo", "Exists"))]),
            labels={"foo": "barrrrrr"},
            want_status=POD_MISMATCH,
        ),
        id="Pod with an Affinity matches node's labels but the PodSpec.NodeSelector is not satisfied",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("foo", "NotIn", "invalid value: ___@#$%^"))]),
            labels={"foo": "bar"},
            want_status=POD_MISMATCH,
        ),
        id="Pod with an invalid value in Affinity term won't be scheduled onto the node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(fields=[name_in("node1")])]),
            node_name="node1",
            want_pre_filter_result=PreFilterResult(frozenset({"node1"})),
        ),
        id="Pod with matchFields using In operator that matches the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(fields=[name_in("node1")])]),
            node_name="node2",
            want_status=POD_MISMATCH,
            want_pre_filter_result=PreFilterResult(frozenset({"node1"})),
        ),
        id="Pod with matchFields using In operator that does not match the existing node",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[
                    term(fields=[name_in("node1"), name_in("node2")]),
                    term(match("foo", "In", "bar")),
                ]
            ),
            node_name="node2",
            labels={"foo": "bar"},
        ),
        id="Pod with two terms: matchFields does not match, but matchExpressions matches",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("foo", "In", "bar"), fields=[name_in("node1")])]),
            node_name="node2",
            labels={"foo": "bar"},
            want_pre_filter_result=PreFilterResult(frozenset({"node1"})),
            want_status=POD_MISMATCH,
        ),
        id="Pod with one term: matchFields does not match, but matchExpressions matches",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("foo", "In", "bar"), fields=[name_in("node1")])]),
            node_name="node1",
            labels={"foo": "bar"},
            want_pre_filter_result=PreFilterResult(frozenset({"node1"})),
        ),
        id="Pod with one term: both matchFields and matchExpressions match",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[
                    term(fields=[name_in("node1")]),
                    term(match("foo", "In", "not-match-to-bar")),
                ]
            ),
            node_name="node2",
            labels={"foo": "bar"},
            want_status=POD_MISMATCH,
        ),
        id="Pod with two terms: both matchFields and matchExpressions do not match",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[term(fields=[name_in("node1")]), term(fields=[name_in("node2")])]
            ),
            node_name="node2",
            want_pre_filter_result=PreFilterResult(frozenset({"node1", "node2"})),
        ),
        id="Pod with two terms of node.Name affinity",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(fields=[name_in("node1"), name_in("node2")])]),
            node_name="node2",
            labels={"foo": "bar"},
            want_pre_filter_status=CONFLICT,
            want_status=POD_MISMATCH,
        ),
        id="Pod with two conflicting mach field requirements",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("zone", "In", "foo"))]),
            node_name="node2",
            labels={"zone": "foo"},
            args=args_of(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [NAME_IS_NODE2]
                    }
                }
            ),
        ),
        id="Matches added affinity and Pod's node affinity",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("zone", "In", "bar"))]),
            node_name="node2",
            labels={"zone": "foo"},
            args=args_of(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [NAME_IS_NODE2]
                    }
                }
            ),
            want_status=POD_MISMATCH,
        ),
        id="Matches added affinity but not Pod's node affinity",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(),
            node_name="node2",
            labels={"zone": "foo"},
            args=args_of(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [zone_is("bar")]
                    }
                }
            ),
            want_status=ENFORCED,
        ),
        id="Doesn't match added affinity",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(node_selector={"foo": "bar"}),
            labels={"foo": "bar", "baz": "blah"},
            run_pre_filter=False,
        ),
        id="Matches node selector correctly even if PreFilter is not called",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[term(match("GPU", "Exists"), match("GPU", "NotIn", "AMD", "INTER"))]
            ),
            labels={"GPU": "NVIDIA-GRID-K1"},
            run_pre_filter=False,
        ),
        id="Matches node affinity correctly even if PreFilter is not called",
    ),
    # Beyond upstream's table.
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(match("zone", "In", "bar"))]),
            node_name="node2",
            labels={"zone": "foo"},
            args=args_of(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [zone_is("bar")]
                    }
                }
            ),
            want_status=ENFORCED,
        ),
        id="the added affinity is checked first and gives its own reason",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(),
            node_name="node2",
            args=args_of(
                {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
            ),
            want_status=ENFORCED,
        ),
        id="added required affinity with no terms matches no node, and PreFilter runs",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[]),
            node_name="node2",
            want_status=POD_MISMATCH,
        ),
        id="required affinity with no terms: PreFilter does not narrow, Filter rejects",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(required=[term(fields=[name_in()])]),
            node_name="node2",
            want_pre_filter_status=CONFLICT,
            want_status=POD_MISMATCH,
        ),
        id="metadata.name In with no values names no node: a conflict",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[term(fields=[name_in("node1", "node2"), name_in("node2", "node3")])]
            ),
            node_name="node2",
            want_pre_filter_result=PreFilterResult(frozenset({"node2"})),
            want_status=POD_MISMATCH,
        ),
        id="names of one term intersect (a field requirement with two values never matches)",
    ),
    pytest.param(
        FilterCase(
            affinity_pod(
                required=[term(fields=[name_in("node2"), match("metadata.name", "NotIn", "x")])]
            ),
            node_name="node2",
            want_pre_filter_result=PreFilterResult(frozenset({"node2"})),
        ),
        id="NotIn fields do not narrow, the In beside them does",
    ),
]


def _pre_filter(
    plugin: NodeAffinity, state: CycleState, pod: PodInfo, node: pb.Node
) -> tuple[PreFilterResult | None, Status]:
    snap = snapshot_of([node])
    return plugin.pre_filter(state, pod, batch_of(snap))


@pytest.mark.parametrize("case", FILTER_CASES)
def test_node_affinity_filter(case: FilterCase) -> None:
    """TestNodeAffinity: PreFilter's status and result, then Filter on a
    node (a bare NodeInfo, as upstream's test builds it, so an unnamed node
    has no fields)."""
    plugin = NodeAffinity(case.args)
    node = pb.Node(name=case.node_name, labels=case.labels)
    state = fresh_state()
    if case.run_pre_filter:
        result, status = _pre_filter(plugin, state, case.pod, labelled_node("other"))
        assert status == case.want_pre_filter_status
        assert result == case.want_pre_filter_result
    assert plugin.filter(state, case.pod, NodeInfo(node)) == case.want_status


@pytest.mark.parametrize("case", FILTER_CASES)
def test_node_affinity_filter_nodes_agrees(case: FilterCase) -> None:
    """The same table through the batch form, the node in a snapshot."""
    plugin = NodeAffinity(case.args)
    snap = snapshot_of([labelled_node(case.node_name or "node", case.labels)])
    state = fresh_state()
    if case.run_pre_filter:
        plugin.pre_filter(state, case.pod, batch_of(snap))
    verdicts = plugin.filter_nodes(state, case.pod, batch_of(snap))
    assert verdicts.status_of(0) == case.want_status


def test_pre_filter_state_travels_to_the_caller_and_back() -> None:
    """PreFilter's state is encoded for the wire; Filter reads it back."""
    plugin = NodeAffinity()
    pod = affinity_pod(
        node_selector={"zone": "a"},
        required=[term(match("gpu", "Exists"), match("gen", "Gt", "3"))],
    )
    snap = snapshot_of(
        [
            labelled_node("yes", {"zone": "a", "gpu": "x", "gen": "4"}),
            labelled_node("old", {"zone": "a", "gpu": "x", "gen": "3"}),
            labelled_node("away", {"zone": "b", "gpu": "x", "gen": "9"}),
        ]
    )
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, batch_of(snap))
    assert status.is_success
    wire = fresh_state(state.encode())
    assert PRE_FILTER_STATE_KEY in wire
    verdicts = plugin.filter_nodes(wire, pod, batch_of(snap, ["yes", "old", "away"]))
    assert [verdicts.status_of(k) for k in range(3)] == [OK, POD_MISMATCH, POD_MISMATCH]


# -- TestNodeAffinityPriority ---------------------------------------------------------------

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}

FOO_BAR = term(match("foo", "In", "bar"))
AFFINITY1 = [(2, FOO_BAR)]
AFFINITY2 = [
    (2, FOO_BAR),
    (4, term(match("key", "In", "value"))),
    (5, term(match("foo", "In", "bar"), match("key", "In", "value"), match("az", "In", "az1"))),
]
BROKEN_KEY_ERROR = (
    '[0].matchExpressions[0].key: Invalid value: "invalid key": name part must consist of '
    "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


@dataclass
class ScoreCase:
    pod: PodInfo
    nodes: list[tuple[str, dict[str, str]]]
    expected: list[int] = field(default_factory=list)
    args: NodeAffinityArgs | None = None
    run_pre_score: bool = False
    want_pre_score_status: Status = OK


SCORE_CASES = [
    pytest.param(
        ScoreCase(
            affinity_pod(),
            [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
            expected=[0, 0, 0],
        ),
        id="all nodes are same priority as NodeAffinity is nil",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(),
            [("node1", LABEL1)],
            run_pre_score=True,
            want_pre_score_status=SKIP,
        ),
        id="Skip is returned in PreScore when NodeAffinity is nil",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(preferred=[(2, term(match("invalid key", "In", "bar")))]),
            [("node1", LABEL1)],
            run_pre_score=True,
            want_pre_score_status=Status.error(BROKEN_KEY_ERROR),
        ),
        id="PreScore returns error when an incoming Pod has a broken affinity",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(preferred=AFFINITY1),
            [("node1", LABEL4), ("node2", LABEL2), ("node3", LABEL3)],
            expected=[0, 0, 0],
            run_pre_score=True,
        ),
        id="no node matches preferred scheduling requirements in NodeAffinity of pod",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(preferred=AFFINITY1),
            [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
            expected=[MAX_NODE_SCORE, 0, 0],
            run_pre_score=True,
        ),
        id="only node1 matches the preferred scheduling requirements of pod",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(preferred=AFFINITY2),
            [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
            expected=[18, MAX_NODE_SCORE, 36],
            run_pre_score=True,
        ),
        id="all nodes matches the preferred scheduling requirements of pod but with different priorities",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(),
            [("node1", LABEL1), ("node2", LABEL2)],
            expected=[MAX_NODE_SCORE, 0],
            args=args_of(
                {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 2,
                            "preference": {
                                "matchExpressions": [
                                    {"key": "foo", "operator": "In", "values": ["bar"]}
                                ]
                            },
                        }
                    ]
                }
            ),
            run_pre_score=True,
        ),
        id="added affinity",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(preferred=AFFINITY1),
            [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL5)],
            expected=[40, 60, MAX_NODE_SCORE],
            args=args_of(
                {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 3,
                            "preference": {
                                "matchExpressions": [
                                    {"key": "key", "operator": "In", "values": ["value"]}
                                ]
                            },
                        }
                    ]
                }
            ),
            run_pre_score=True,
        ),
        id="added affinity and pod has default affinity",
    ),
    pytest.param(
        ScoreCase(
            affinity_pod(preferred=AFFINITY2),
            [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
            expected=[18, MAX_NODE_SCORE, 36],
        ),
        id="calculate the priorities correctly even if PreScore is not called",
    ),
]


def _scores(case: ScoreCase, batch: bool) -> tuple[Status, list[int]]:
    plugin = NodeAffinity(case.args)
    names = [name for name, _ in case.nodes]
    snap = snapshot_of([labelled_node(name, labels) for name, labels in case.nodes])
    nodes = batch_of(snap, names)
    state = fresh_state()
    if case.run_pre_score:
        status = plugin.pre_score(state, case.pod, nodes)
        if not status.is_success:
            return status, []
    if batch:
        raw = plugin.score_nodes(state, case.pod, nodes)
    else:
        raw = np.asarray([plugin.score(state, case.pod, ni) for ni in nodes], dtype=np.int64)
    assert plugin.normalize_score(state, case.pod, nodes, raw).is_success
    return OK, raw.tolist()


@pytest.mark.parametrize("case", SCORE_CASES)
def test_node_affinity_priority(case: ScoreCase) -> None:
    """TestNodeAffinityPriority: PreScore (when run), Score per node,
    NormalizeScore."""
    status, scores = _scores(case, batch=False)
    assert status == case.want_pre_score_status
    assert scores == case.expected


@pytest.mark.parametrize("case", SCORE_CASES)
def test_node_affinity_priority_batch_agrees(case: ScoreCase) -> None:
    status, scores = _scores(case, batch=True)
    assert status == case.want_pre_score_status
    assert scores == case.expected


def test_pre_score_state_travels_to_the_caller_and_back() -> None:
    plugin = NodeAffinity()
    pod = affinity_pod(preferred=AFFINITY2)
    snap = snapshot_of([labelled_node("node1", LABEL1), labelled_node("node5", LABEL5)])
    state = CycleState()
    assert plugin.pre_score(state, pod, batch_of(snap)).is_success
    wire = fresh_state(state.encode())
    assert PRE_SCORE_STATE_KEY in wire
    assert plugin.score_nodes(wire, pod, batch_of(snap, ["node1", "node5"])).tolist() == [2, 11]


def test_pre_score_runs_for_added_preferred_terms_even_of_weight_zero() -> None:
    """New keeps addedPrefSchedTerms when the list has entries, even if
    every one has weight 0, so PreScore does not Skip; they score 0."""
    plugin = NodeAffinity(
        args_of(
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "preference": zone_is("a")}
                ]
            }
        )
    )
    snap = snapshot_of([labelled_node("n", {"zone": "a"})])
    state = fresh_state()
    assert plugin.pre_score(state, affinity_pod(), batch_of(snap)).is_success
    assert plugin.score_nodes(state, affinity_pod(), batch_of(snap)).tolist() == [0]


@pytest.mark.parametrize(
    ("raw", "reverse", "want"),
    [
        ([0, 0, 0], False, [0, 0, 0]),
        ([0, 0, 0], True, [100, 100, 100]),
        ([2, 11, 4], False, [18, 100, 36]),
        ([2, 11, 4], True, [82, 0, 64]),
        ([-3, 6], False, [-50, 100]),
        ([-3, -1], False, [-3, -1]),
    ],
)
def test_default_normalize_score(raw: list[int], reverse: bool, want: list[int]) -> None:
    """helper.DefaultNormalizeScore: truncating division, nothing scaled
    when the top score is 0 or below."""
    scores = np.asarray(raw, dtype=np.int64)
    default_normalize_score(MAX_NODE_SCORE, reverse, scores)
    assert scores.tolist() == want


# -- batch forms against per-node forms ------------------------------------------------------


def _random_requirement(rng: random.Random) -> pb.NodeSelectorRequirement:
    key = rng.choice(["zone", "gen", "gpu", "tier"])
    op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])
    if op in ("Exists", "DoesNotExist"):
        return match(key, op)
    if op in ("Gt", "Lt"):
        return match(key, op, str(rng.randint(0, 5)))
    return match(key, op, *rng.sample(["a", "b", "c", "1", "3"], rng.randint(1, 2)))


def _random_term(rng: random.Random, names: list[str]) -> pb.NodeSelectorTerm:
    exprs = [_random_requirement(rng) for _ in range(rng.randint(0, 2))]
    fields = []
    if rng.random() < 0.3:
        fields = [match("metadata.name", rng.choice(["In", "NotIn"]), rng.choice(names))]
    return term(*exprs, fields=fields)


def _random_labels(rng: random.Random) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key in ("zone", "gen", "gpu", "tier"):
        if rng.random() < 0.7:
            labels[key] = rng.choice(["a", "b", "c", "1", "3", "5", "x7"])
    return labels


@pytest.mark.parametrize("seed", range(60))
def test_batch_forms_agree_with_per_node_forms_on_random_clusters(seed: int) -> None:
    """The batch forms (label columns, framework/label_index.py) give every
    node the per-node forms' verdict and score, over every operator,
    matchFields In and NotIn, the args' added affinity, and a batch that is
    a shuffled subset of the snapshot's nodes."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(30)]
    snap = snapshot_of([labelled_node(n, _random_labels(rng)) for n in names])
    added = None
    if rng.random() < 0.5:
        added = args_of(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "tier", "operator": "NotIn", "values": ["c"]}
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 7,
                        "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    }
                ],
            }
        )
    plugin = NodeAffinity(added)
    required = (
        [_random_term(rng, names) for _ in range(rng.randint(0, 3))] if rng.random() < 0.8 else None
    )
    pod = affinity_pod(
        required=required,
        preferred=[
            (rng.randint(1, 100), _random_term(rng, names)) for _ in range(rng.randint(0, 3))
        ],
        node_selector={"zone": rng.choice("abc")} if rng.random() < 0.3 else None,
    )
    nodes = batch_of(snap) if seed % 2 else batch_of(snap, rng.sample(names, rng.randint(1, 30)))
    state = fresh_state()
    plugin.pre_filter(state, pod, nodes)
    verdicts = plugin.filter_nodes(state, pod, nodes)
    for k, ni in enumerate(nodes):
        assert verdicts.status_of(k) == plugin.filter(state, pod, ni), ni.name
    plugin.pre_score(state, pod, nodes)
    batch_scores = plugin.score_nodes(state, pod, nodes).tolist()
    assert batch_scores == [plugin.score(state, pod, ni) for ni in nodes]


# -- whole cycles -----------------------------------------------------------------------------

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "NodeAffinity": NodeAffinity,
    "DefaultBinder": DefaultBinder,
}


def framework(args: NodeAffinityArgs | None = None) -> Framework:
    """NodeAffinity as upstream's default profile enables it: PreFilter,
    Filter, PreScore and Score with weight 2."""
    refs = (PluginRef("NodeAffinity"),)
    return Framework(
        ProfileConfig(
            "test",
            {
                "queueSort": (PluginRef("PrioritySort"),),
                "preFilter": refs,
                "filter": refs,
                "preScore": refs,
                "score": (PluginRef("NodeAffinity", 2),),
                "bind": (PluginRef("DefaultBinder"),),
            },
            {} if args is None else {"NodeAffinity": args},
        ),
        REGISTRY,
    )


def test_cycle_places_the_pod_on_the_preferred_matching_node() -> None:
    snap = snapshot_of(
        [
            labelled_node("a-ssd", {"zone": "a", "disk": "ssd"}),
            labelled_node("a-hdd", {"zone": "a", "disk": "hdd"}),
            labelled_node("b-ssd", {"zone": "b", "disk": "ssd"}),
        ]
    )
    pod = affinity_pod(
        node_selector={"zone": "a"}, preferred=[(10, term(match("disk", "In", "ssd")))]
    )
    result = schedule_pod(framework(), snap, CycleState(), pod, explain=True)
    assert result.status.is_success, result.message
    assert result.node == "a-ssd"
    assert result.rejected["b-ssd"] == POD_MISMATCH.with_plugin("NodeAffinity")
    assert result.scores is not None
    weighted = dict(
        zip(result.scores.nodes.names, result.scores.weighted["NodeAffinity"].tolist(), strict=True)
    )
    assert weighted == {"a-ssd": 200, "a-hdd": 0}


def test_cycle_failure_message_counts_mismatched_nodes() -> None:
    snap = snapshot_of([labelled_node(f"n{i}", {"zone": "b"}) for i in range(3)])
    result = schedule_pod(
        framework(), snap, CycleState(), affinity_pod(node_selector={"zone": "a"})
    )
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.message == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    assert result.unschedulable_plugins == {"NodeAffinity"}


def test_cycle_with_enforced_affinity_names_its_reason() -> None:
    args = args_of(
        {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [zone_is("a")]}}
    )
    snap = snapshot_of([labelled_node("n1", {"zone": "a"}), labelled_node("n2", {"zone": "b"})])
    result = schedule_pod(
        framework(args), snap, CycleState(), affinity_pod(node_selector={"zone": "b"})
    )
    assert result.message == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) didn't match scheduler-enforced node affinity."
    )


def test_cycle_narrows_to_the_named_nodes() -> None:
    """PreFilterResult: only the named node is filtered."""
    snap = snapshot_of([labelled_node(f"n{i}") for i in range(5)])
    pod = affinity_pod(required=[term(fields=[name_in("n3")])])
    result = schedule_pod(framework(), snap, CycleState(), pod)
    assert result.status.is_success, result.message
    assert result.node == "n3"
    assert result.evaluated == 1


def test_cycle_with_conflicting_names_fails_in_pre_filter() -> None:
    snap = snapshot_of([labelled_node("n1"), labelled_node("n2")])
    pod = affinity_pod(required=[term(fields=[name_in("n1"), name_in("n2")])])
    result = schedule_pod(framework(), snap, CycleState(), pod)
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.pre_filter_status == CONFLICT.with_plugin("NodeAffinity")
    assert result.message == "0/2 nodes are available: pod affinity terms conflict."


def test_pod_without_node_constraints_skips_filter_and_score() -> None:
    snap = snapshot_of([labelled_node("n1"), labelled_node("n2")])
    state = CycleState()
    result = schedule_pod(framework(), snap, state, affinity_pod(), explain=True)
    assert result.status.is_success
    assert "NodeAffinity" in state.skip_filter_plugins
    assert "NodeAffinity" in state.skip_score_plugins


def test_args_are_validated_when_the_plugin_is_built() -> None:
    bad = args_of(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Bad"}]}]
            }
        }
    )
    with pytest.raises(ValueError, match="Unsupported value"):
        NodeAffinity(bad)


def test_readme_configuration_loads_and_schedules(tmp_path: Path) -> None:
    """The README's scheduler-config.yaml is a valid configuration."""
    readme = (
        Path(__file__).resolve().parents[3] / "plugins" / "nodeaffinity" / "README.md"
    ).read_text()
    yaml_text = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(yaml_text)
    config = load_config(path, REGISTRY)
    (profile,) = config.profiles
    assert [(r.name, r.weight) for r in profile.enabled("score")] == [("NodeAffinity", 2)]
    args = profile.plugin_args["NodeAffinity"]
    assert isinstance(args, NodeAffinityArgs)
    fw = Framework(profile, REGISTRY)
    snap = snapshot_of(
        [
            labelled_node("linux", {"kubernetes.io/os": "linux"}),
            labelled_node("windows", {"kubernetes.io/os": "windows"}),
        ]
    )
    result = schedule_pod(fw, snap, CycleState(), affinity_pod())
    assert result.node == "linux", result.message
