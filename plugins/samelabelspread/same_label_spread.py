"""SameLabelSpread: prefer nodes with fewer pods like the incoming one.

For each node, count the pods on it
whose labels match ``labels.SelectorFromSet(pod.Labels)``: every label of the
incoming pod, with the same value, must be on the other pod (its extra
labels do not matter). SelectorFromSet of an empty set is
``labels.Everything()``, so a pod without labels counts every pod on the
node. Score: ``max(100 - 10 * count, 0)``; no NormalizeScore.

It reads the snapshot only (the NodeInfo's pods, what a Go plugin gets from
the framework's SnapshotSharedLister), counts pods of every namespace, and counts every
pod the snapshot puts on the node (assumed and terminating ones included, as
upstream's NodeInfo.Pods()).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import MAX_NODE_SCORE, MIN_NODE_SCORE, ScoreArray, ScorePlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import NodeBatch
from berth.plugins.samelabelspread.args import SameLabelSpreadArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "NAME",
    "SCORE_PER_POD",
    "SameLabelSpread",
    "count_matching",
    "matches_all",
    "spread_score",
]

NAME = "SameLabelSpread"
# Linear decay: each matching pod costs 10 points.
SCORE_PER_POD = 10
# From this many matching pods on, the score is 0: counting can stop.
_SATURATION = -(-(MAX_NODE_SCORE - MIN_NODE_SCORE) // SCORE_PER_POD)

Selector = Sequence[tuple[str, str]]


def matches_all(selector: Selector, labels: Mapping[str, str]) -> bool:
    """``SelectorFromSet(set).Matches(labels)``: every (key, value) of the
    set is in ``labels`` (the Equals requirement: the key must be present,
    so an empty value matches only a present empty value). An empty set
    matches everything."""
    # A proto map's get does not insert; a missing key gives None.
    return all(labels.get(key) == value for key, value in selector)


def count_matching(selector: Selector, pods: Iterable[PodInfo], limit: int | None = None) -> int:
    """How many of ``pods`` match; stops at ``limit`` when given."""
    count = 0
    for p in pods:
        if matches_all(selector, p.proto.labels):
            count += 1
            if limit is not None and count >= limit:
                break
    return count


def spread_score(count: int) -> int:
    """``100 - count*10``, floored at 0."""
    return max(MAX_NODE_SCORE - SCORE_PER_POD * count, MIN_NODE_SCORE)


def _selector_of(pod: PodInfo) -> Selector:
    return tuple(pod.proto.labels.items())


class SameLabelSpread(ScorePlugin[SameLabelSpreadArgs]):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = SameLabelSpreadArgs

    def __init__(
        self, args: SameLabelSpreadArgs | None = None, handle: Handle | None = None
    ) -> None:
        super().__init__(SameLabelSpreadArgs() if args is None else args, handle)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return spread_score(count_matching(_selector_of(pod), node.pods.values(), _SATURATION))

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        selector = _selector_of(pod)
        if not selector:
            # Everything(): the count is the node's pod count, a column.
            counts = nodes.col("pod_count").astype(np.int64)
        else:
            counts = np.fromiter(
                (count_matching(selector, ni.pods.values(), _SATURATION) for ni in nodes),
                dtype=np.int64,
                count=len(nodes),
            )
        scores: ScoreArray = MAX_NODE_SCORE - SCORE_PER_POD * counts
        np.maximum(scores, MIN_NODE_SCORE, out=scores)
        return scores
