"""GPUPriorityPlugin: prefer nodes with more free GPUs.

It scores nodes by the GPUs available to the pod:

* the *free* count, allocatable minus what the pods on the node request, not
  the node's capacity, so a node whose GPUs are all taken does not win;
* a NormalizeScore rescales the raw scores (device counts) to 0..100 over
  the scored nodes (the freest gets 100, the others ``100 * free / max`` with
  integer division; when no node has a free one, all get 0), so the score
  weighs in the sum like any other plugin's instead of adding raw counts
  (0..8 on usual hardware).

It counts a node's GPUs from the first source the node has
(framework/gpus.py), and says which in its debug log:

1. DRA ResourceSlices: the GPU devices nothing holds (no ResourceClaim
   allocates any of it, no pod carries ``berth.dev/gpu-card`` for it);
2. GPU Feature Discovery labels: ``nvidia.com/gpu.count`` (times
   ``nvidia.com/gpu.replicas``) less what the node's pods request of
   ``resourceName``;
3. HAMi's annotation: the healthy cards' split counts less the requests;
4. Berth's ``berth.dev/gpu-cards``: the cards no pod was given;
5. otherwise the node's allocatable ``resourceName`` less the requests
   (upstream's NodeInfo.Allocatable and NodeInfo.Requested).

A source that does not parse counts no free GPU. It reads only the
snapshot, never the API server. ``score_nodes`` starts from the snapshot's
scalar columns for the resource when they exist and replaces the rows of
nodes that have a card source.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from berth.framework.cycle_state import CycleState
from berth.framework.gpus import (
    BERTH_CARD_ANNOTATION,
    BERTH_CARDS_ANNOTATION,
    BERTH_MEMORY_ANNOTATION,
    GFD_COUNT_LABEL,
    HAMI_ANNOTATION,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DraInventory,
    card_use,
    read_node_gpus,
)
from berth.framework.interfaces import MAX_NODE_SCORE, ScoreArray, ScorePlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import NodeBatch, NodesMark, Snapshot
from berth.framework.status import SUCCESS, Status
from berth.plugins.gpupriority.args import GPUPriorityPluginArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = ["ALLOCATABLE", "NAME", "GPUPriority", "free_gpus", "free_on_node", "normalize_free"]

log = logging.getLogger(__name__)

NAME = "GPUPriorityPlugin"

_INT64_MAX = np.iinfo(np.int64).max


def free_on_node(node: NodeInfo, resource: str) -> int:
    """Allocatable minus requested of ``resource`` on the node, at least 0
    (requests above allocatable, e.g. after the node shrank, count as none
    free)."""
    free = node.allocatable.scalar.get(resource, 0) - node.requested.scalar.get(resource, 0)
    return max(free, 0)


# The source named when a node has no card source: its allocatable resource.
ALLOCATABLE = "allocatable"


def free_gpus(node: NodeInfo, resource: str, dra: DraInventory | None) -> tuple[int, str]:
    """The node's free GPUs and the source they were counted from (see the
    module's docstring)."""
    gpus = read_node_gpus(node, dra, BERTH_CARDS_ANNOTATION)
    if gpus is None:
        return free_on_node(node, resource), ALLOCATABLE
    if gpus.problem:
        log.debug("%s: node %s: %s: counted as no free GPU", NAME, node.name, gpus.problem)
        return 0, gpus.name()
    if gpus.resource_capacity is not None:
        requested = node.requested.scalar.get(resource, 0)
        return max(gpus.resource_capacity - requested, 0), gpus.name()
    use = card_use(gpus, node, BERTH_CARD_ANNOTATION, BERTH_MEMORY_ANNOTATION, "", dra)
    free = sum(
        1
        for i, card in enumerate(gpus.cards)
        if card.available and card.used == 0 and use.pods[i] == 0
    )
    return free, gpus.name()


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
        self.dra_drivers = tuple(gpu_args.dra_drivers)

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """ResourceSlices (the DRA source) and ResourceClaims (what their
        allocations take), unless ``draDrivers`` is empty."""
        cfg = args if isinstance(args, GPUPriorityPluginArgs) else GPUPriorityPluginArgs()
        return (RESOURCE_SLICES, RESOURCE_CLAIMS) if cfg.dra_drivers else ()

    def _inventory(self) -> DraInventory | None:
        """The DRA devices of the snapshot, indexed on first use (one per
        call); None without DRA drivers or a snapshot (a plugin built by hand)."""
        if not self.dra_drivers or self._handle is None:
            return None
        return DraInventory(self._handle.snapshot, self.dra_drivers)

    def _free(self, pod: PodInfo, node: NodeInfo, dra: DraInventory | None) -> int:
        free, source = free_gpus(node, self.resource_name, dra)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s: pod %s: node %s has %d free GPUs (%s)", NAME, pod.key, node.name, free, source
            )
        return free

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self._free(pod, node, self._inventory())

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        dra = self._inventory()
        cols = nodes.columns.scalar.get(self.resource_name)
        if cols is None:
            return np.fromiter(
                (self._free(pod, ni, dra) for ni in nodes), dtype=np.int64, count=len(nodes)
            )
        alloc, requested = cols
        free: ScoreArray = alloc[nodes.idx] - requested[nodes.idx]
        np.maximum(free, 0, out=free)
        # Nodes with a card source: counted from it instead.
        has_source = source_index(nodes.snapshot).with_source.copy()
        if dra is not None:
            for name in dra.node_names():
                ni = nodes.snapshot.nodes.get(name)
                if ni is not None and ni.index < len(has_source):
                    has_source[ni.index] = True
        slot = nodes.snapshot.slot
        for k in np.flatnonzero(has_source[nodes.idx]).tolist():
            free[k] = self._free(pod, slot(int(nodes.idx[k])), dra)
        return free

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        normalize_free(scores)
        return SUCCESS


class SourceIndex:
    """For one snapshot: which slots hold a node whose labels or annotations
    describe its cards (GFD, HAMi, Berth's annotation), so the batch form
    reads only those. Rebuilt when a node is added, removed or replaced
    (the snapshot's ``node_generation`` moved); holds no reference to the
    snapshot."""

    __slots__ = ("_mark", "with_source")

    def __init__(self) -> None:
        self._mark = NodesMark()
        self.with_source: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)

    def sync(self, snapshot: Snapshot) -> None:
        if not self._mark.moved(snapshot):
            return
        mask = np.zeros(snapshot.columns.capacity, dtype=np.bool_)
        for ni in snapshot.nodes.values():
            annotations = ni.node.annotations
            if (
                GFD_COUNT_LABEL in ni.node.labels
                or HAMI_ANNOTATION in annotations
                or BERTH_CARDS_ANNOTATION in annotations
            ):
                mask[ni.index] = True
        self.with_source = mask


_INDEXES: weakref.WeakKeyDictionary[Snapshot, SourceIndex] = weakref.WeakKeyDictionary()


def source_index(snapshot: Snapshot) -> SourceIndex:
    """The snapshot's SourceIndex, up to date; dropped with the snapshot."""
    index = _INDEXES.get(snapshot)
    if index is None:
        index = _INDEXES[snapshot] = SourceIndex()
    index.sync(snapshot)
    return index
