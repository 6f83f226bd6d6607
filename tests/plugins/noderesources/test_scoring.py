"""NodeResourcesFit scoring strategies with upstream's exact expected numbers:
least_allocated_test.go (TestLeastAllocatedScoringStrategy),
most_allocated_test.go (TestMostAllocatedScoringStrategy),
requested_to_capacity_ratio_test.go (TestRequestedToCapacityRatioScoringStrategy,
TestBrokenLinearFunction, TestResourceBinPackingSingleExtended). Case ids are
upstream's test names. Quantities are upstream's strings: "4000" CPU is 4000
cores, "10000" memory is 10000 bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo
from berth.framework.shape_score import broken_linear, broken_linear_array, go_div, go_div_array
from berth.framework.testing import fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.noderesources import Fit, NodeResourcesFitArgs
from berth.plugins.noderesources.args import (
    RequestedToCapacityRatioParam,
    ResourceSpec,
    ScoringStrategy,
    UtilizationShapePoint,
)
from berth.plugins.noderesources.least_allocated import least_resource_scorer
from berth.plugins.noderesources.most_allocated import most_resource_scorer
from berth.plugins.noderesources.requested_to_capacity_ratio import (
    requested_to_capacity_ratio_scorer,
)
from berth.plugins.noderesources.resource_allocation import (
    IntArray,
    ScoreFunctions,
)

EXT = "abc.com/xyz"  # upstream's extendedRes
DEFAULT = [ResourceSpec("cpu", 1), ResourceSpec("memory", 1)]
WITH_EXT = [*DEFAULT, ResourceSpec(EXT, 1)]  # upstream's extendedResourceSet
MEM2_CPU1 = [ResourceSpec("memory", 2), ResourceSpec("cpu", 1)]
EXT2_CPU_MEM = [ResourceSpec(EXT, 2), ResourceSpec("cpu", 1), ResourceSpec("memory", 1)]


def node(name: str, cpu: str | None = None, memory: str | None = None, **scalar: str) -> pb.Node:
    """st.MakeNode().Name(name).Capacity(...); no capacity at all when cpu is None."""
    w = make_node(name)
    if cpu is not None:
        w.capacity(cpu=cpu, memory=memory or "0", **scalar)
    return w.obj()


def pod(*reqs: dict[str, str], on: str = "", bare_container: bool = False) -> pb.Pod:
    """st.MakePod().Req(...)...; ``bare_container`` is .Container("c")."""
    w = make_pod().node(on)
    for r in reqs:
        w.req(**r)
    if bare_container:
        w.container("container")
    return w.obj()


TWO_CONTAINERS = pod({"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"})
NODES_4K_6K = [node("node1", "4000", "10000"), node("node2", "6000", "10000")]
NODES_10K = [node("node1", "10000", "20000"), node("node2", "10000", "20000")]


@dataclass
class ScoreCase:
    pod: pb.Pod
    nodes: list[pb.Node]
    want: list[int]
    resources: list[ResourceSpec] = field(default_factory=lambda: list(DEFAULT))
    existing: list[pb.Pod] = field(default_factory=list)


def score_all(args: NodeResourcesFitArgs, case: ScoreCase) -> tuple[list[int], list[int]]:
    """(per-node Score, batch Score) after PreScore, in node order."""
    snap = snapshot_of(case.nodes, case.existing)
    plugin = Fit(args)
    p = PodInfo(case.pod)
    names = [n.name for n in case.nodes]
    state = fresh_state()
    assert plugin.pre_score(state, p, snap.batch(names)).is_success
    per_node = [plugin.score(state, p, snap.nodes[n]) for n in names]
    batch = plugin.score_nodes(state, p, snap.batch(names)).tolist()
    return per_node, batch


LEAST_ALLOCATED = {
    "nothing scheduled, nothing requested": ScoreCase(
        pod(), [node("node1", "4000", "10000"), node("node2", "4000", "10000")], [100, 100]
    ),
    "nothing scheduled, resources requested, differently sized nodes": ScoreCase(
        TWO_CONTAINERS, NODES_4K_6K, [37, 50]
    ),
    "no resources requested, pods scheduled": ScoreCase(
        pod(),
        [node("node1", "4000", "10000"), node("node2", "4000", "10000")],
        [100, 100],
        existing=[pod(on="node1"), pod(on="node1"), pod(on="node2"), pod(on="node2")],
    ),
    "no resources requested, pods scheduled with resources": ScoreCase(
        pod(),
        NODES_10K,
        [70, 57],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "0"}, on="node2"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "resources requested, pods scheduled with resources": ScoreCase(
        TWO_CONTAINERS,
        NODES_10K,
        [57, 45],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "resources requested, pods scheduled with resources, differently sized nodes": ScoreCase(
        TWO_CONTAINERS,
        [node("node1", "10000", "20000"), node("node2", "10000", "50000")],
        [57, 60],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "requested resources exceed node capacity": ScoreCase(
        pod({"cpu": "3000", "memory": "0"}),
        [node("node1", "4000", "10000"), node("node2", "4000", "10000")],
        [50, 25],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "zero node resources, pods scheduled with resources": ScoreCase(
        pod(),
        [node("node1"), node("node2")],
        [0, 0],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "nothing scheduled, resources requested with different weight on CPU and memory, differently sized nodes": ScoreCase(
        TWO_CONTAINERS, NODES_4K_6K, [41, 50], MEM2_CPU1
    ),
    "bypass extended resource if the pod does not request": ScoreCase(
        TWO_CONTAINERS,
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [50, 50],
        WITH_EXT,
    ),
    "honor extended resource if the pod requests": ScoreCase(
        pod({"cpu": "3000", "memory": "5000", EXT: "2"}),
        [
            node("node1", "6000", "10000", **{EXT: "4"}),
            node("node2", "6000", "10000", **{EXT: "10"}),
        ],
        [50, 60],
        WITH_EXT,
    ),
    "if the node doesn't have a resource": ScoreCase(
        pod({"cpu": "3000", "memory": "4000"}),
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [55, 55],
        EXT2_CPU_MEM,
    ),
}


@pytest.mark.parametrize("case", list(LEAST_ALLOCATED.values()), ids=list(LEAST_ALLOCATED))
def test_least_allocated_scores_match_upstream(case: ScoreCase) -> None:
    args = NodeResourcesFitArgs(scoring_strategy=ScoringStrategy("LeastAllocated", case.resources))
    per_node, batch = score_all(args, case)
    assert per_node == batch == case.want


MOST_ALLOCATED = {
    "nothing scheduled, nothing requested": ScoreCase(
        pod(), [node("node1", "4000", "10000"), node("node2", "4000", "10000")], [0, 0]
    ),
    "nothing scheduled, resources requested, differently sized nodes": ScoreCase(
        TWO_CONTAINERS, NODES_4K_6K, [62, 50]
    ),
    "no resources requested, pods scheduled with resources": ScoreCase(
        pod(),
        NODES_10K,
        [30, 42],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "0"}, on="node2"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "resources requested, pods scheduled with resources": ScoreCase(
        TWO_CONTAINERS,
        NODES_10K,
        [42, 55],
        existing=[
            pod({"cpu": "3000", "memory": "0"}, on="node1"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
    "resources requested equal node capacity": ScoreCase(
        pod({"cpu": "2000", "memory": "4000"}, {"cpu": "3000", "memory": "5000"}),
        [node("node1", "5000", "10000"), node("node2", "10000", "9000")],
        [95, 75],
    ),
    "nothing scheduled, resources requested, differently sized nodes, memory weight 2": ScoreCase(
        TWO_CONTAINERS, NODES_4K_6K, [58, 50], MEM2_CPU1
    ),
    # Containers without requests count 100m CPU and 200Mi memory.
    "no resources requested, pods scheduled, nonzero request for resource": ScoreCase(
        pod(bare_container=True),
        [node("node1", "250m", "1000Mi"), node("node2", "250m", "1000Mi")],
        [80, 30],
        existing=[pod(on="node1", bare_container=True), pod(on="node1", bare_container=True)],
    ),
    "bypass extended resource if the pod does not request": ScoreCase(
        TWO_CONTAINERS,
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [50, 50],
        WITH_EXT,
    ),
    "honor extended resource if the pod request": ScoreCase(
        pod({"cpu": "3000", "memory": "5000", EXT: "2"}),
        [
            node("node1", "6000", "10000", **{EXT: "4"}),
            node("node2", "6000", "10000", **{EXT: "10"}),
        ],
        [50, 40],
        WITH_EXT,
    ),
    "if the node doesn't have a resource": ScoreCase(
        pod({"cpu": "3000", "memory": "4000"}),
        [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXT: "4"})],
        [45, 45],
        EXT2_CPU_MEM,
    ),
}


@pytest.mark.parametrize("case", list(MOST_ALLOCATED.values()), ids=list(MOST_ALLOCATED))
def test_most_allocated_scores_match_upstream(case: ScoreCase) -> None:
    args = NodeResourcesFitArgs(scoring_strategy=ScoringStrategy("MostAllocated", case.resources))
    per_node, batch = score_all(args, case)
    assert per_node == batch == case.want


def rtcr(resources: list[ResourceSpec], *points: tuple[int, int]) -> NodeResourcesFitArgs:
    shape = [UtilizationShapePoint(u, s) for u, s in points]
    return NodeResourcesFitArgs(
        scoring_strategy=ScoringStrategy(
            "RequestedToCapacityRatio", resources, RequestedToCapacityRatioParam(shape)
        )
    )


REQUESTED_TO_CAPACITY_RATIO = {
    "nothing scheduled, nothing requested (default - least requested nodes have priority)": ScoreCase(
        pod(),
        [node("node1", "4000", "10000"), node("node2", "4000", "10000")],
        [100, 100],
        existing=[pod(on="node1"), pod(on="node1")],
    ),
    # (25 + 50) / 2 = 37.5 rounds half away from zero to 38 (math.Round).
    "nothing scheduled, resources requested, differently sized nodes (default - least requested nodes have priority)": ScoreCase(
        TWO_CONTAINERS, NODES_4K_6K, [38, 50], existing=[pod(on="node1"), pod(on="node1")]
    ),
    "no resources requested, pods scheduled with resources (default - least requested nodes have priority)": ScoreCase(
        pod(),
        NODES_4K_6K,
        [38, 50],
        existing=[
            pod({"cpu": "3000", "memory": "5000"}, on="node1"),
            pod({"cpu": "3000", "memory": "5000"}, on="node2"),
        ],
    ),
}


@pytest.mark.parametrize(
    "case", list(REQUESTED_TO_CAPACITY_RATIO.values()), ids=list(REQUESTED_TO_CAPACITY_RATIO)
)
def test_requested_to_capacity_ratio_scores_match_upstream(case: ScoreCase) -> None:
    per_node, batch = score_all(rtcr(case.resources, (0, 10), (100, 0)), case)
    assert per_node == batch == case.want


FOO = "intel.com/foo"
BIN_PACKING_NODES = [
    node("node1", "4000m", str(10000 * 1024 * 1024), **{FOO: "8"}),
    node("node2", "4000m", str(10000 * 1024 * 1024), **{FOO: "4"}),
]
BIN_PACKING_SINGLE_EXTENDED = {
    "nothing scheduled, nothing requested": ScoreCase(pod(), BIN_PACKING_NODES, [0, 0]),
    "resources requested, pods scheduled with less resources": ScoreCase(
        pod({FOO: "2"}), BIN_PACKING_NODES, [2, 5], existing=[pod()]
    ),
    "resources requested, pods scheduled with resources, on node with existing pod running": ScoreCase(
        pod({FOO: "2"}), BIN_PACKING_NODES, [2, 10], existing=[pod({FOO: "2"}, on="node2")]
    ),
    "resources requested, pods scheduled with more resources": ScoreCase(
        pod({FOO: "4"}), BIN_PACKING_NODES, [5, 10], existing=[pod()]
    ),
}


@pytest.mark.parametrize(
    "case", list(BIN_PACKING_SINGLE_EXTENDED.values()), ids=list(BIN_PACKING_SINGLE_EXTENDED)
)
def test_resource_bin_packing_single_extended_matches_upstream(case: ScoreCase) -> None:
    per_node, batch = score_all(rtcr([ResourceSpec(FOO, 1)], (0, 0), (100, 1)), case)
    assert per_node == batch == case.want


# requested_to_capacity_ratio_test.go, TestBrokenLinearFunction.
BROKEN_LINEAR = {
    "case_0": (
        [(10, 1), (90, 9)],
        {-10: 1, 0: 1, 9: 1, 10: 1, 15: 1, 19: 1, 20: 2, 89: 8, 90: 9, 99: 9, 100: 9, 110: 9},
    ),
    "case_1": (
        [(0, 2), (40, 10), (100, 0)],
        {-10: 2, 0: 2, 20: 6, 30: 8, 40: 10, 70: 5, 100: 0, 110: 0},
    ),
    "case_2": (
        [(0, 2), (40, 2), (100, 2)],
        {-10: 2, 0: 2, 20: 2, 30: 2, 40: 2, 70: 2, 100: 2, 110: 2},
    ),
    # Not upstream's: a falling segment, where Go's truncating division
    # (toward zero) and floor division part: 10 - 7*1/3 -> 10 - 2 = 8.
    "falling segment truncates toward zero": ([(0, 10), (3, 3)], {1: 8, 2: 6}),
}


@pytest.mark.parametrize(("shape", "points"), list(BROKEN_LINEAR.values()), ids=list(BROKEN_LINEAR))
def test_broken_linear_function_matches_upstream(
    shape: list[tuple[int, int]], points: dict[int, int]
) -> None:
    ps = np.array(list(points), dtype=np.int64)
    assert [broken_linear(shape, p) for p in points] == list(points.values())
    assert broken_linear_array(shape, ps).tolist() == list(points.values())


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3), (-8, 2, -4), (-1, 3, 0), (0, 5, 0)],
)
def test_go_division_truncates_toward_zero(a: int, b: int, want: int) -> None:
    assert go_div(a, b) == want
    got = go_div_array(np.array([a], dtype=np.int64), np.array([b], dtype=np.int64))
    assert got.tolist() == [want]


def test_score_without_pre_score_recomputes_like_upstream() -> None:
    snap = snapshot_of(NODES_4K_6K)
    plugin = Fit()
    p = PodInfo(TWO_CONTAINERS)
    assert [plugin.score(fresh_state(), p, snap.nodes[n]) for n in ("node1", "node2")] == [37, 50]
    assert plugin.score_nodes(fresh_state(), p, snap.batch(["node1", "node2"])).tolist() == [37, 50]


STRATEGIES = {
    "LeastAllocated": lambda w: least_resource_scorer(w),
    "MostAllocated": lambda w: most_resource_scorer(w),
    "RequestedToCapacityRatio": lambda w: requested_to_capacity_ratio_scorer(
        w,
        [UtilizationShapePoint(0, 10), UtilizationShapePoint(30, 2), UtilizationShapePoint(100, 9)],
    ),
}


@pytest.mark.parametrize("make", list(STRATEGIES.values()), ids=list(STRATEGIES))
@pytest.mark.parametrize("signed", [False, True], ids=["sane amounts", "negative amounts too"])
def test_strategy_batch_form_equals_go_arithmetic_of_the_one_node_form(
    make: Callable[[list[int]], ScoreFunctions], signed: bool
) -> None:
    # Negative amounts never come from a real cluster; they drive the exact
    # (Go-rounding) fallback paths of the batch forms.
    rng = np.random.default_rng(7)
    n, weights = 400, [1, 3, 100]
    fns = make(weights)
    low = -50 if signed else 0
    columns: list[tuple[IntArray, IntArray] | None] = []
    for _ in weights:
        alloc = rng.integers(low, 100, n, dtype=np.int64)
        alloc[rng.random(n) < 0.2] = 0
        columns.append((rng.integers(low, 150, n, dtype=np.int64), alloc))
    columns.append(None)  # a resource no node has
    fns_with_none = make([*weights, 5])
    got = fns_with_none.many(columns, n).tolist()
    for k in range(n):
        row_req = [int(c[0][k]) for c in columns if c is not None] + [0]
        row_alloc = [int(c[1][k]) for c in columns if c is not None] + [0]
        assert got[k] == fns_with_none.one(row_req, row_alloc), k
    assert fns.many(columns[:-1], n).tolist() == got
