"""Scores from a user-given curve, with Go's integer division.

Port of pkg/scheduler/framework/plugins/helper/shape_score.go
(BuildBrokenLinearFunction), shared by NodeResourcesFit's RequestedToCapacityRatio
strategy and VolumeBinding's storage capacity scoring, and of Go's int64 division
(the quotient truncated toward zero), which upstream's score arithmetic relies on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from berth.framework.snapshot import IntArray

__all__ = ["Shape", "broken_linear", "broken_linear_array", "go_div", "go_div_array"]


def go_div(a: int, b: int) -> int:
    """int64 division as Go does it: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def go_div_array(a: IntArray, b: IntArray) -> IntArray:
    """Elementwise Go division (truncating); numpy's ``//`` floors, which
    differs when the signs differ and the division is inexact."""
    q: IntArray = a // b
    inexact_negative = (q < 0) & (q * b != a)
    if inexact_negative.any():
        q = q + inexact_negative
    return q


Shape = Sequence[tuple[int, int]]


def broken_linear(shape: Shape, p: int) -> int:
    """helper.BuildBrokenLinearFunction at ``p``: ``shape`` is (utilization,
    score) points in increasing utilization; flat before the first and after
    the last point, linear (int64 division) in between."""
    for i, (util, score) in enumerate(shape):
        if p <= util:
            if i == 0:
                return score
            prev_util, prev_score = shape[i - 1]
            return prev_score + go_div((score - prev_score) * (p - prev_util), util - prev_util)
    return shape[-1][1]


def broken_linear_array(shape: Shape, p: IntArray) -> IntArray:
    """``broken_linear`` elementwise."""
    out = np.full(p.shape, shape[-1][1], dtype=np.int64)
    done = np.zeros(p.shape, dtype=np.bool_)
    for i, (util, score) in enumerate(shape):
        hit = ~done & (p <= util)
        if not hit.any():
            continue
        if i == 0:
            out[hit] = score
        else:
            prev_util, prev_score = shape[i - 1]
            num = (score - prev_score) * (p[hit] - prev_util)
            den = np.full(num.shape, util - prev_util, dtype=np.int64)
            out[hit] = prev_score + go_div_array(num, den)
        done |= hit
    return out
