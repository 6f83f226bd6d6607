"""LeastAllocated: favour nodes with the most room left.

Port of pkg/scheduler/framework/plugins/noderesources/least_allocated.go
(leastResourceScorer, leastRequestedScore). Per resource, on a 0..100 scale:
``(allocatable - requested) * 100 / allocatable``, 0 once requested exceeds
allocatable; the node score is the weighted mean over the resources the node
has, all in int64 division.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from berth.framework.interfaces import MAX_NODE_SCORE
from berth.framework.shape_score import go_div, go_div_array
from berth.plugins.noderesources.resource_allocation import (
    IntArray,
    ScoreFunctions,
    weighted_mean_scorer,
)

__all__ = ["least_requested_score", "least_resource_scorer"]


def least_requested_score(requested: int, capacity: int) -> int:
    """leastRequestedScore for one resource on one node."""
    if capacity == 0 or requested > capacity:
        return 0
    return go_div((capacity - requested) * MAX_NODE_SCORE, capacity)


def least_requested_scores(requested: IntArray, capacity: IntArray) -> tuple[IntArray, bool]:
    """leastRequestedScore over columns; also whether every score is >= 0.
    Rows with capacity 0 hold garbage: the caller leaves them out."""
    if capacity.min() >= 0:
        # The usual case. Clamping the free room at 0 is the
        # "requested > capacity" rule, and a non-negative numerator over a
        # positive capacity divides the same in Go and numpy.
        free = capacity - requested
        np.maximum(free, 0, out=free)
        free *= MAX_NODE_SCORE
        free //= np.maximum(capacity, 1)
        return free, True
    # A negative allocatable (never reported by a sane kubelet) takes Go's
    # exact path.
    score = go_div_array(
        (capacity - requested) * MAX_NODE_SCORE, np.where(capacity == 0, 1, capacity)
    )
    score[requested > capacity] = 0
    return score, False


def least_requested_stacked(
    weights: Sequence[int],
) -> Callable[[IntArray, IntArray], IntArray | None]:
    """leastResourceScorer over (k, n) matrices where every node has every
    resource: each row's leastRequestedScore, weighted, summed, divided by
    the weights' sum. None when some allocatable is negative (the columns'
    form then takes Go's exact path)."""
    weight_sum = sum(weights)
    weight_col = (
        None if all(w == 1 for w in weights) else np.array(weights, dtype=np.int64).reshape(-1, 1)
    )

    def stacked(requested: IntArray, capacity: IntArray) -> IntArray | None:
        if np.count_nonzero(capacity < 0):
            return None
        n = capacity.shape[1]
        if weight_sum == 0:
            return np.zeros(n, dtype=np.int64)
        # As least_requested_scores' usual case, every capacity positive.
        free = capacity - requested
        np.maximum(free, 0, out=free)
        free *= MAX_NODE_SCORE
        free //= capacity
        if weight_col is not None:
            free *= weight_col
        total: IntArray = free[0]
        for row in free[1:]:
            total += row
        # Non-negative over a positive sum: floor division is Go's.
        total //= weight_sum
        return total

    return stacked


def least_resource_scorer(weights: Sequence[int]) -> ScoreFunctions:
    """leastResourceScorer over resources with these weights."""
    functions = weighted_mean_scorer(weights, least_requested_score, least_requested_scores)
    return replace(functions, stacked=least_requested_stacked(weights))
