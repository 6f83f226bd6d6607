"""LeastAllocated: favour nodes with the most room left.

Port of pkg/scheduler/framework/plugins/noderesources/least_allocated.go
(leastResourceScorer, leastRequestedScore). Per resource, on a 0..100 scale:
``(allocatable - requested) * 100 / allocatable``, 0 once requested exceeds
allocatable; the node score is the weighted mean over the resources the node
has, all in int64 division.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def least_resource_scorer(weights: Sequence[int]) -> ScoreFunctions:
    """leastResourceScorer over resources with these weights."""
    return weighted_mean_scorer(weights, least_requested_score, least_requested_scores)
