"""Score helpers shared by plugins (upstream pkg/scheduler/framework/plugins/helper)."""

from __future__ import annotations

import numpy as np

from berth.framework.interfaces import ScoreArray


def default_normalize_score(max_priority: int, reverse: bool, scores: ScoreArray) -> None:
    """helper.DefaultNormalizeScore (plugins/helper/normalize_score.go), in place: scale
    [0, max(scores)] to [0, max_priority] with Go's truncating integer division;
    ``reverse`` then subtracts from max_priority. When the largest score is 0 (or below)
    nothing is scaled, and ``reverse`` gives every node max_priority."""
    if not np.count_nonzero(scores):
        # All 0 (or none): a quicker test than the max below, same outcome.
        if reverse:
            scores.fill(max_priority)
        return
    top = max(int(scores.max()), 0)
    if top == 0:
        if reverse:
            scores[:] = max_priority
        return
    product = scores * max_priority
    # Go's "/" truncates toward zero; numpy's "//" floors.
    scaled = np.abs(product) // top
    scaled = np.where(product < 0, -scaled, scaled)
    if reverse:
        scaled = max_priority - scaled
    scores[:] = scaled


__all__ = ["default_normalize_score"]
