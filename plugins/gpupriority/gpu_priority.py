"""GPUPriorityPlugin: prefer nodes with more free GPUs.

It scores nodes by the GPUs available to the pod:

* the *free* count, allocatable minus what the pods on the node request, not
  the node's capacity, so a node whose GPUs are all taken does not win;
* a NormalizeScore rescales the raw scores (device counts) to 0..100 over
  the scored nodes (the freest gets 100, the others ``100 * free / max`` with
  integer division; when no node has a free one, all get 0), so the score
  weighs in the sum like any other plugin's instead of adding raw counts
  (0..8 on usual hardware).

It reads only the snapshot: the node's allocatable and the summed requests
of the pods on it (upstream's NodeInfo.Allocatable and NodeInfo.Requested),
never the API server. ``score_nodes`` reads the
snapshot's scalar columns for the resource when they exist; otherwise (no
node has or requests it) it asks each NodeInfo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import MAX_NODE_SCORE, ScoreArray, ScorePlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.plugins.gpupriority.args import GPUPriorityPluginArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = ["NAME", "GPUPriority", "free_on_node", "normalize_free"]

NAME = "GPUPriorityPlugin"

_INT64_MAX = np.iinfo(np.int64).max


def free_on_node(node: NodeInfo, resource: str) -> int:
    """Allocatable minus requested of ``resource`` on the node, at least 0
    (requests above allocatable, e.g. after the node shrank, count as none
    free)."""
    free = node.allocatable.scalar.get(resource, 0) - node.requested.scalar.get(resource, 0)
    return max(free, 0)


def normalize_free(scores: ScoreArray) -> None:
    """In place: ``MAX_NODE_SCORE * s // max(scores)`` (Go's int64 division;
    every value is >= 0 after clamping), all 0 when the largest is 0."""
    if len(scores) == 0:
        return
    np.maximum(scores, 0, out=scores)
    top = int(scores.max())
    if top == 0:
        return
    if top <= _INT64_MAX // MAX_NODE_SCORE:
        scores *= MAX_NODE_SCORE
        scores //= top
        return
    # Counts so large that the product would overflow int64: exact Python ints.
    scores[:] = [s * MAX_NODE_SCORE // top for s in scores.tolist()]


class GPUPriority(ScorePlugin[GPUPriorityPluginArgs]):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = GPUPriorityPluginArgs

    def __init__(
        self, args: GPUPriorityPluginArgs | None = None, handle: Handle | None = None
    ) -> None:
        gpu_args = GPUPriorityPluginArgs() if args is None else args
        # Checked here too, so a plugin built in code is checked like one
        # built from a configuration file.
        gpu_args.validate()
        super().__init__(gpu_args, handle)
        self.resource_name = gpu_args.resource_name

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return free_on_node(node, self.resource_name)

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        cols = nodes.columns.scalar.get(self.resource_name)
        if cols is None:
            return np.fromiter(
                (free_on_node(ni, self.resource_name) for ni in nodes),
                dtype=np.int64,
                count=len(nodes),
            )
        alloc, requested = cols
        free: ScoreArray = alloc[nodes.idx] - requested[nodes.idx]
        np.maximum(free, 0, out=free)
        return free

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        normalize_free(scores)
        return SUCCESS
