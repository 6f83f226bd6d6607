"""The stacked scoring path of NodeResourcesFit (LeastAllocated) and
NodeResourcesBalancedAllocation: when every scored resource has columns of
its own and every candidate has some of each, the scores come from (resources
x candidates) matrices. Checked equal to the per-node form (the reference)
and to the columns' form on random clusters, and the cases that must fall
back to the columns' form do."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.model import PodInfo
from berth.framework.snapshot import INT_ROWS, NodeColumns
from berth.framework.testing import fresh_state, make_node, make_pod, snapshot_of
from berth.plugins.noderesources import (
    BalancedAllocation,
    Fit,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
)
from berth.plugins.noderesources.args import LEAST_ALLOCATED, ResourceSpec, ScoringStrategy
from berth.plugins.noderesources.balanced_allocation import (
    improvement_scores,
    improvement_scores_two,
)
from berth.plugins.noderesources.least_allocated import least_resource_scorer

CPU_MEMORY = [ResourceSpec("cpu", 1), ResourceSpec("memory", 1)]
WEIGHTED = [ResourceSpec("cpu", 3), ResourceSpec("memory", 2), ResourceSpec("ephemeral-storage", 5)]


def _cluster(rng: random.Random, n: int) -> tuple[list[pb.Node], list[pb.Pod]]:
    """Every node has some CPU, memory and ephemeral storage; some are
    overcommitted (their pods request more than they have)."""
    nodes: list[pb.Node] = []
    pods: list[pb.Pod] = []
    for i in range(n):
        name = f"n{i}"
        nodes.append(
            make_node(name)
            .capacity(
                cpu=f"{rng.choice([1, 500, 1000, 4000, 16000])}m",
                memory=rng.choice([1, 1000, 4096, 10000]),
                **{"ephemeral-storage": rng.choice([1, 100, 1000])},
            )
            .obj()
        )
        for _ in range(rng.randrange(5)):
            r: dict[str, Any] = {"ephemeral-storage": rng.choice([0, 50, 700])}
            if rng.random() < 0.8:
                r["cpu"] = f"{rng.choice([0, 100, 700, 3000, 9000])}m"
            if rng.random() < 0.8:
                r["memory"] = rng.choice([0, 300, 2000, 9000])
            pods.append(make_pod(f"e{len(pods)}").node(name).req(**r).obj())
    return nodes, pods


def _pod(rng: random.Random) -> PodInfo:
    r: dict[str, Any] = {"ephemeral-storage": rng.choice([0, 10, 400])}
    if rng.random() < 0.8:
        r["cpu"] = f"{rng.choice([0, 250, 1000, 5000])}m"
    if rng.random() < 0.8:
        r["memory"] = rng.choice([0, 500, 3000])
    return PodInfo(make_pod("incoming").req(**r).obj())


@pytest.mark.parametrize("resources", [CPU_MEMORY, WEIGHTED], ids=["cpu-memory", "weighted"])
def test_fit_stacked_scores_equal_the_per_node_form(resources: list[ResourceSpec]) -> None:
    fit = Fit(NodeResourcesFitArgs(scoring_strategy=ScoringStrategy(LEAST_ALLOCATED, resources)))
    _assert_stacked_equals_per_node(fit, random.Random(20261128))


def _assert_stacked_equals_per_node(plugin: Fit | BalancedAllocation, rng: random.Random) -> None:
    """On random clusters, the plugin's scores over all nodes and over a subset
    equal its per-node Score, with its stacked form in use."""
    for _ in range(20):
        snap = snapshot_of(*_cluster(rng, 40))
        batch = snap.all_nodes()
        assert plugin.scorer.stacked(batch) is not None
        part = batch.take(rng.sample(range(len(batch)), 13))
        for _ in range(4):
            pod = _pod(rng)
            state = fresh_state()
            if not plugin.pre_score(state, pod, batch).is_success:
                continue
            for nodes in (batch, part):
                want = [plugin.score(state, pod, ni) for ni in nodes]
                assert plugin.score_nodes(state, pod, nodes).tolist() == want


def test_least_allocated_stacked_form_equals_the_columns_form() -> None:
    rng = np.random.default_rng(11)
    n, weights = 300, [1, 3, 100]
    fns = least_resource_scorer(weights)
    assert fns.stacked is not None
    alloc = rng.integers(1, 100, (3, n), dtype=np.int64)
    requested = rng.integers(0, 150, (3, n), dtype=np.int64)
    want = fns.many(list(zip(requested, alloc, strict=True)), n).tolist()
    got = fns.stacked(requested.copy(), alloc)
    assert got is not None
    assert got.tolist() == want
    # A negative allocatable is left to the columns' form (Go's rounding).
    alloc[1, 7] = -3
    assert fns.stacked(requested.copy(), alloc) is None


def test_a_node_without_a_scored_resource_takes_the_columns_form() -> None:
    nodes = [
        make_node("a").capacity(cpu="2", memory=1000).obj(),
        make_node("b").capacity(cpu="2").obj(),
    ]
    snap = snapshot_of(nodes, [])
    fit = Fit()
    pod = PodInfo(make_pod("p").req(cpu="1", memory=100).obj())
    assert fit.scorer.stacked(snap.all_nodes()) is None
    state = fresh_state()
    fit.pre_score(state, pod, snap.all_nodes())
    want = [fit.score(state, pod, ni) for ni in snap.all_nodes()]
    assert fit.score_nodes(state, pod, snap.all_nodes()).tolist() == want


def test_balanced_allocation_stacked_scores_equal_the_per_node_form() -> None:
    plugin = BalancedAllocation(NodeResourcesBalancedAllocationArgs(CPU_MEMORY))
    _assert_stacked_equals_per_node(plugin, random.Random(26))


def test_improvement_scores_two_equals_the_general_form() -> None:
    rng = np.random.default_rng(3)
    n = 500
    alloc = rng.integers(1, 1 << 40, (2, n), dtype=np.int64)
    used = (alloc * rng.uniform(0, 1.3, (2, n))).astype(np.int64)
    pod = [int(rng.integers(0, 1 << 38)), 0]
    with_pod = used + np.array(pod, dtype=np.int64).reshape(2, 1)
    want = improvement_scores(list(zip(with_pod, alloc, strict=True)), pod, n).tolist()
    assert improvement_scores_two(used.copy(), alloc, pod).tolist() == want


def test_node_columns_are_rows_of_one_matrix_across_growth_and_clearing() -> None:
    cols = NodeColumns(capacity=2)
    cols.alloc_cpu[1] = 5
    cols.req_mem[0] = 7
    cols.grow(9)
    assert cols.ints.shape == (len(INT_ROWS), cols.capacity)
    assert cols.ints[INT_ROWS["alloc_cpu"], 1] == 5
    assert cols.ints[INT_ROWS["req_mem"], 0] == 7
    cols.pod_count[8] = 3
    assert cols.ints[INT_ROWS["pod_count"], 8] == 3
    cols.clear(1)
    assert not cols.ints[:, 1].any()
    assert cols.req_mem[0] == 7
