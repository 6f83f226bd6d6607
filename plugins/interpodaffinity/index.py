"""Per-snapshot indexes of what InterPodAffinity asks of the existing pods.

Upstream's PreFilter and PreScore walk the snapshot's NodeInfos, in parallel:
every pod when the incoming pod has terms of its own, else only the nodes
listed by ``HavePodsWithRequiredAntiAffinityList`` and
``HavePodsWithAffinityList`` (pkg/scheduler/backend/cache/snapshot.go). A
Python walk over 5000 nodes costs milliseconds per cycle, so Berth keeps, per
snapshot, the pods on its nodes grouped by what a cycle asks of them, each
group with the number of its pods per node slot:

* ``by_signature``: every pod by its namespace and labels (what the incoming
  pod's terms read of it); pods of one workload share one entry;
* ``required_anti``: the existing pods' required anti-affinity terms (what
  PreFilter checks the incoming pod against), one count per term occurrence;
* ``hard_affinity``, ``weighted``: their required affinity terms (scored with
  hardPodAffinityWeight) and their preferred terms with signed weights
  (what PreScore checks the incoming pod against).

A cycle then decides each distinct signature or term once and adds the
counts of the slots of the matching ones, so its cost follows the number of
distinct groups and matching pods, not the cluster: a pod without terms in a
cluster where no pod has terms does no per-node work at all. The index
follows the snapshot through ``Snapshot.watch_pods`` (O(change) per delta);
it is built by one walk when first asked for. Topology values are read from
the nodes' labels when a cycle counts, so relabelled nodes need no upkeep.

A group spread over a good share of the node slots (a workload's replicas,
or their anti-affinity term, one per node) also keeps its counts as a dense
array over the slots (``SlotCounts.dense``), kept current with the dict, so a
cycle sums it per topology value with numpy over the label column without
first building arrays from the dict. It is kept only while the group holds at
least one slot in ``_DENSE_RATIO`` (so the array costs no more memory than the
dict beside it) and at least ``_DENSE_MIN`` slots.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Mapping
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import Snapshot
from berth.plugins.interpodaffinity.terms import AffinityTerm, Signature, parsed_terms, signature

__all__ = ["AffinityIndex", "DenseCounts", "SlotCounts", "affinity_index"]

DenseCounts = npt.NDArray[np.int32]

# A group keeps a dense array while it holds at least _DENSE_MIN slots and at
# least one slot in _DENSE_RATIO of the snapshot's capacity (an int32 per
# slot against a dict entry and its int per held slot); it drops the array
# below half of either, so a group at the edge does not build it over and
# over.
_DENSE_MIN: Final = 32
_DENSE_RATIO: Final = 16


class SlotCounts(dict[int, int]):
    """Node slot -> number of pods (or term occurrences) there; never holds
    zero. ``dense``: the same counts as an array over the slots (zero where
    the dict has no entry; it may be shorter than the snapshot's capacity,
    slots past its end hold nothing), or None for a group on few slots."""

    __slots__ = ("dense",)

    def __init__(self) -> None:
        super().__init__()
        self.dense: DenseCounts | None = None


K = TypeVar("K", bound=Hashable)


def _capacity(ni: NodeInfo) -> int:
    owner = ni.owner
    return owner.columns.capacity if isinstance(owner, Snapshot) else ni.index + 1


def _bump(groups: dict[K, SlotCounts], key: K, slot: int, change: int, capacity: int) -> None:
    slots = groups.get(key)
    if slots is None:
        if change <= 0:
            return
        slots = groups[key] = SlotCounts()
    held = len(slots)
    left = slots.get(slot, 0) + change
    if left > 0:
        slots[slot] = left
    else:
        slots.pop(slot, None)
        if not slots:
            del groups[key]
            return
    dense = slots.dense
    if dense is not None:
        if slot < len(dense):
            dense[slot] = max(left, 0)
        elif left > 0:
            # A slot past the array's end: the snapshot grew since.
            grown = np.zeros(max(capacity, slot + 1), dtype=np.int32)
            grown[: len(dense)] = dense
            grown[slot] = left
            slots.dense = grown
    if len(slots) != held:
        _densify(slots, capacity)


def _densify(slots: SlotCounts, capacity: int) -> None:
    """Gives ``slots`` its dense array, or takes it away, as its number of
    slots against ``capacity`` asks (the module docstring)."""
    n = len(slots)
    if slots.dense is None:
        if n >= _DENSE_MIN and n * _DENSE_RATIO >= capacity:
            size = max(capacity, max(slots) + 1)
            dense = np.zeros(size, dtype=np.int32)
            m = len(slots)
            dense[np.fromiter(slots.keys(), np.int64, m)] = np.fromiter(slots.values(), np.int64, m)
            slots.dense = dense
    elif 2 * n < _DENSE_MIN or 2 * n * _DENSE_RATIO < capacity:
        slots.dense = None


class AffinityIndex:
    """The pods of one snapshot's NodeInfos, grouped (module docstring).
    Holds no reference to the snapshot."""

    __slots__ = (
        "__weakref__",
        "by_signature",
        "hard_affinity",
        "labels",
        "required_anti",
        "weighted",
    )

    def __init__(self) -> None:
        self.by_signature: dict[Signature, SlotCounts] = {}
        # The labels of each signature as a dict, for selectors to read.
        self.labels: dict[Signature, dict[str, str]] = {}
        self.required_anti: dict[AffinityTerm, SlotCounts] = {}
        self.hard_affinity: dict[AffinityTerm, SlotCounts] = {}
        # (weight, term): positive for preferred affinity, negative for
        # preferred anti-affinity.
        self.weighted: dict[tuple[int, AffinityTerm], SlotCounts] = {}

    def pod_changed(self, ni: NodeInfo, pod: PodInfo, change: int) -> None:
        """``Snapshot.watch_pods``'s callback: ``pod`` joined (+1) or left
        (-1) the node ``ni``."""
        slot = ni.index
        capacity = _capacity(ni)
        sig = signature(pod)
        _bump(self.by_signature, sig, slot, change, capacity)
        if sig not in self.by_signature:
            self.labels.pop(sig, None)
        elif sig not in self.labels:
            self.labels[sig] = dict(sig[1])
        if not pod.has_pod_affinity:
            # Not in upstream's PodsWithAffinity: no terms of its own.
            return
        terms = parsed_terms(pod)
        for t in terms.required_anti_affinity:
            _bump(self.required_anti, t, slot, change, capacity)
        for t in terms.required_affinity:
            _bump(self.hard_affinity, t, slot, change, capacity)
        for w, t in terms.preferred_affinity:
            _bump(self.weighted, (w, t), slot, change, capacity)
        for w, t in terms.preferred_anti_affinity:
            _bump(self.weighted, (-w, t), slot, change, capacity)

    def add_all(self, snapshot: Snapshot) -> None:
        for ni in snapshot.nodes.values():
            for pod in ni.pods.values():
                self.pod_changed(ni, pod, 1)


_INDEXES: Final[weakref.WeakKeyDictionary[Snapshot, AffinityIndex]] = weakref.WeakKeyDictionary()


def affinity_index(snapshot: Snapshot) -> AffinityIndex:
    """The snapshot's index: built by one walk at the first call, kept
    current by the snapshot from then on, dropped with the snapshot."""
    index = _INDEXES.get(snapshot)
    if index is None:
        index = AffinityIndex()
        index.add_all(snapshot)
        snapshot.watch_pods(index.pod_changed)
        _INDEXES[snapshot] = index
    return index


def slot_labels(snapshot: Snapshot, slot: int) -> Mapping[str, str]:
    """The labels of the node in ``slot``."""
    return snapshot.slot(slot).node.labels
