"""RequestedToCapacityRatio: score by a user-given curve of utilization.

Port of pkg/scheduler/framework/plugins/noderesources/requested_to_capacity_ratio.go
(requestedToCapacityRatioScorer, buildRequestedToCapacityRatioScorerFunction)
with the shape's broken linear function from berth.framework.shape_score. Shape scores 0..10 are scaled by
MaxNodeScore / MaxCustomPriorityScore = 10; a resource whose score is 0 does
not count toward the weighted mean, which is rounded half away from zero
(math.Round).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from berth.framework.interfaces import MAX_NODE_SCORE
from berth.framework.shape_score import broken_linear, broken_linear_array, go_div, go_div_array
from berth.plugins.noderesources.args import MAX_CUSTOM_PRIORITY_SCORE, UtilizationShapePoint
from berth.plugins.noderesources.resource_allocation import (
    IntArray,
    ResourceColumns,
    ScoreFunctions,
)

__all__ = ["requested_to_capacity_ratio_scorer"]

_MAX_UTILIZATION = 100


def _go_round(x: float) -> int:
    """math.Round: halves away from zero."""
    whole = math.trunc(x)
    if abs(x - whole) >= 0.5:
        whole += 1 if x > 0 else -1
    return whole


def requested_to_capacity_ratio_scorer(
    weights: Sequence[int], shape: Sequence[UtilizationShapePoint]
) -> ScoreFunctions:
    weights = tuple(weights)
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    points = tuple((p.utilization, p.score * scale) for p in shape)

    def raw(p: int) -> int:
        return broken_linear(points, p)

    def raw_many(p: IntArray) -> IntArray:
        return broken_linear_array(points, p)

    def utilization(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return _MAX_UTILIZATION
        return go_div(requested * _MAX_UTILIZATION, capacity)

    def one(requested: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for req, alloc, weight in zip(requested, allocatable, weights, strict=True):
            if alloc == 0:
                continue
            score = raw(utilization(req, alloc))
            if score > 0:
                node_score += score * weight
                weight_sum += weight
        return 0 if weight_sum == 0 else _go_round(node_score / weight_sum)

    def many(columns: ResourceColumns, n: int) -> IntArray:
        node_score = np.zeros(n, dtype=np.int64)
        weight_sum = np.zeros(n, dtype=np.int64)
        for col, weight in zip(columns, weights, strict=True):
            if col is None:
                continue
            req, alloc = col
            has = alloc != 0
            util = go_div_array(req * _MAX_UTILIZATION, np.where(has, alloc, 1))
            util[(req > alloc) | ~has] = _MAX_UTILIZATION
            score = raw_many(util)
            counted = has & (score > 0)
            node_score += np.where(counted, score * weight, 0)
            weight_sum += counted * weight
        ratio = node_score / np.maximum(weight_sum, 1)
        # math.Round on non-negative ratios: floor(x + 0.5), done exactly.
        whole = np.floor(ratio)
        rounded = whole + (ratio - whole >= 0.5)
        return rounded.astype(np.int64)

    return ScoreFunctions(one, many)
