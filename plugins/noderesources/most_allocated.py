"""MostAllocated: favour the fullest nodes (bin packing).

Port of pkg/scheduler/framework/plugins/noderesources/most_allocated.go
(mostResourceScorer, mostRequestedScore). Per resource:
``min(requested, allocatable) * 100 / allocatable``; requested can exceed
allocatable because pods without requests count the non-zero defaults.
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

__all__ = ["most_requested_score", "most_resource_scorer"]


def most_requested_score(requested: int, capacity: int) -> int:
    """mostRequestedScore for one resource on one node."""
    if capacity == 0:
        return 0
    return go_div(min(requested, capacity) * MAX_NODE_SCORE, capacity)


def most_requested_scores(requested: IntArray, capacity: IntArray) -> tuple[IntArray, bool]:
    """mostRequestedScore over columns; also whether every score is >= 0.
    Rows with capacity 0 hold garbage: the caller leaves them out."""
    used = np.minimum(requested, capacity)
    used *= MAX_NODE_SCORE
    if capacity.min() >= 0 and requested.min() >= 0:
        used //= np.maximum(capacity, 1)
        return used, True
    return go_div_array(used, np.where(capacity == 0, 1, capacity)), False


def most_resource_scorer(weights: Sequence[int]) -> ScoreFunctions:
    """mostResourceScorer over resources with these weights."""
    return weighted_mean_scorer(weights, most_requested_score, most_requested_scores)
