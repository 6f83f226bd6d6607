"""The cluster snapshot plugins read during a cycle.

Two views of the same facts:

* ``NodeInfo`` objects (per node, with its pods), for plugins written per node;
* ``NodeColumns``: one numpy array per fact with a row per node slot, for
  plugins that compute over all candidate nodes at once.

Both are kept current incrementally: applying a delta costs O(objects in the
delta), never O(cluster): a request carries what changed since the
caller's last one, not the whole cluster.

Cycles walk the nodes in upstream's NodeTree order
(pkg/scheduler/backend/cache/node_tree.go): nodes grouped by zone, the zones in
the order they first got a node, nodes within a zone in the order they were
added, listed round-robin across zones. Like upstream's snapshot
(cache.UpdateSnapshot, updateNodeInfoSnapshotList), the walk order is rebuilt
only when a node is added or removed; a node whose zone labels change moves
in the tree, and the walk shows it at the next addition or removal.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.label_index import LabelColumn, NodeLabels
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# A NodeInfo's node name (NodeInfo.name without the Python property call).
_NODE_NAME = operator.attrgetter("node.name")
# Snapshot.watch_pods: (node, pod, +1 joined / -1 left).
PodWatcher = Callable[[NodeInfo, PodInfo, int], None]

# Zone and region labels (k8s.io/api/core/v1 well_known_labels.go); the
# deprecated beta labels take precedence, as in GetZoneKey.
LABEL_ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION_BETA = "failure-domain.beta.kubernetes.io/region"
LABEL_REGION = "topology.kubernetes.io/region"


def zone_key(labels: Mapping[str, str]) -> str:
    """The node's failure zone as k8s.io/component-helpers/node/topology
    GetZoneKey builds it: "" without zone and region labels, else
    ``region + ":\\x00:" + zone``. A beta label that is present wins even when
    empty."""
    zone = labels[LABEL_ZONE_BETA] if LABEL_ZONE_BETA in labels else labels.get(LABEL_ZONE, "")
    if LABEL_REGION_BETA in labels:
        region = labels[LABEL_REGION_BETA]
    else:
        region = labels.get(LABEL_REGION, "")
    if not region and not zone:
        return ""
    return region + ":\x00:" + zone


class SnapshotError(ValueError):
    """A delta that cannot be applied; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


_INT_COLUMNS = (
    "alloc_cpu",
    "alloc_mem",
    "alloc_eph",
    "alloc_pods",
    "req_cpu",
    "req_mem",
    "req_eph",
    "nz_cpu",
    "nz_mem",
    "pod_count",
)
# Row of each integer column in ``NodeColumns.ints``.
INT_ROWS: Mapping[str, int] = MappingProxyType({name: i for i, name in enumerate(_INT_COLUMNS)})


class NodeColumns:
    """Numpy columns with one row per node slot. Rows of deleted nodes are
    reused; ``valid`` marks live rows. The integer columns are the rows of
    one matrix, ``ints`` (row numbers in INT_ROWS), so a plugin that reads
    several of them over its candidates gathers them with one indexing
    (``ints[rows, idx]``) instead of one per column."""

    ints: npt.NDArray[np.int64]

    alloc_cpu: IntArray
    alloc_mem: IntArray
    alloc_eph: IntArray
    alloc_pods: IntArray
    req_cpu: IntArray
    req_mem: IntArray
    req_eph: IntArray
    nz_cpu: IntArray
    nz_mem: IntArray
    pod_count: IntArray
    unschedulable: BoolArray
    valid: BoolArray

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._bind(np.zeros((len(_INT_COLUMNS), capacity), dtype=np.int64))
        self.unschedulable = np.zeros(capacity, dtype=np.bool_)
        self.valid = np.zeros(capacity, dtype=np.bool_)
        # Extended resources: name -> (allocatable, requested).
        self.scalar: dict[str, tuple[IntArray, IntArray]] = {}

    def _bind(self, ints: npt.NDArray[np.int64]) -> None:
        """Take ``ints`` as the integer columns, each name a view of its row."""
        self.ints = ints
        for row, name in enumerate(_INT_COLUMNS):
            setattr(self, name, ints[row])

    def grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        new = max(needed, self.capacity * 2)
        ints = np.zeros((len(_INT_COLUMNS), new), dtype=np.int64)
        ints[:, : self.capacity] = self.ints
        self._bind(ints)
        for name in ("unschedulable", "valid"):
            old = getattr(self, name)
            arr = np.zeros(new, dtype=old.dtype)
            arr[: self.capacity] = old
            setattr(self, name, arr)
        for name, (alloc, req) in list(self.scalar.items()):
            a = np.zeros(new, dtype=np.int64)
            r = np.zeros(new, dtype=np.int64)
            a[: self.capacity] = alloc
            r[: self.capacity] = req
            self.scalar[name] = (a, r)
        self.capacity = new

    def scalar_columns(self, name: str) -> tuple[IntArray, IntArray]:
        cols = self.scalar.get(name)
        if cols is None:
            cols = (
                np.zeros(self.capacity, dtype=np.int64),
                np.zeros(self.capacity, dtype=np.int64),
            )
            self.scalar[name] = cols
        return cols

    def write(self, ni: NodeInfo) -> None:
        i = ni.index
        a = ni.allocatable
        r = ni.requested
        self.alloc_cpu[i] = a.milli_cpu
        self.alloc_mem[i] = a.memory
        self.alloc_eph[i] = a.ephemeral_storage
        self.alloc_pods[i] = a.allowed_pod_number
        # Sums of pods' requests (each within int64) can pass int64: saturated,
        # so such a node is full rather than a crash or a wrapped-around free node.
        self.req_cpu[i] = _int64(r.milli_cpu)
        self.req_mem[i] = _int64(r.memory)
        self.req_eph[i] = _int64(r.ephemeral_storage)
        self.nz_cpu[i] = _int64(ni.non_zero_requested[0])
        self.nz_mem[i] = _int64(ni.non_zero_requested[1])
        self.pod_count[i] = len(ni.pods)
        self.unschedulable[i] = ni.node.unschedulable
        self.valid[i] = True
        for name, (alloc, req) in self.scalar.items():
            alloc[i] = a.scalar.get(name, 0)
            req[i] = _int64(r.scalar.get(name, 0))
        for name in a.scalar.keys() | r.scalar.keys():
            if name not in self.scalar:
                alloc, req = self.scalar_columns(name)
                alloc[i] = a.scalar.get(name, 0)
                req[i] = _int64(r.scalar.get(name, 0))

    def clear(self, i: int) -> None:
        self.ints[:, i] = 0
        self.unschedulable[i] = False
        self.valid[i] = False
        for alloc, req in self.scalar.values():
            alloc[i] = 0
            req[i] = 0


def _int64(value: int) -> int:
    """``value`` saturated to the int64 range of the columns."""
    return min(max(value, -(2**63)), 2**63 - 1)


_NO_OBJECTS: Mapping[tuple[str, str], ClusterObject] = MappingProxyType({})
_NO_PODS: Mapping[str, PodInfo] = MappingProxyType({})


class NodesMark:
    """Where an index over a snapshot's node records last synced: the
    snapshot (weakly) and its ``node_generation``. ``moved`` says whether the
    index must look at the nodes again."""

    __slots__ = ("_generation", "_snapshot")

    def __init__(self) -> None:
        self._snapshot: weakref.ref[Snapshot] | None = None
        self._generation = -1

    def moved(self, snapshot: Snapshot) -> bool:
        """True, and ``snapshot`` remembered as it is now, when it is another
        snapshot than last time or a node was added, removed or replaced
        since; False while nothing but pods changed."""
        ref = self._snapshot
        same = ref is not None and ref() is snapshot
        if same and snapshot.node_generation == self._generation:
            return False
        if not same:
            self._snapshot = weakref.ref(snapshot)
        self._generation = snapshot.node_generation
        return True


class Snapshot:
    """Nodes and the pods that occupy them, and the other objects plugins
    read (``objects``), as of one generation."""

    # An upsert of a bound pod with the record the snapshot already holds
    # only moves it last on its node (False: removed and added like any
    # other; the tests compare the two).
    reuse_equal_pods = True

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.columns = NodeColumns()
        self._slots: list[NodeInfo | None] = []
        self._free: list[int] = []
        # Pods bound to a node the snapshot does not (yet) have.
        self._orphans: dict[str, dict[str, PodInfo]] = {}
        # upstream's nodeTree: zone key -> slots of its nodes in insertion
        # order; the dict keeps the zones in the order they appeared (a zone
        # that empties is dropped, and comes back last).
        self._zones: dict[str, list[int]] = {}
        self._zone_of: dict[int, str] = {}
        self._order: IntArray | None = None
        # (group, resource) -> (namespace, name) -> object.
        self._objects: dict[tuple[str, str], dict[tuple[str, str], ClusterObject]] = {}
        # Bumped whenever a node is added, removed or its record replaced (not
        # for pods): an index over node records (TaintToleration's taints,
        # ImageLocality's images) built at one value is current while it holds.
        self.node_generation = 0
        # Bumped whenever an object of ``objects`` is upserted or deleted: a
        # result computed from them at one value is current while it holds.
        self.object_generation = 0
        # Nominated pods (status.nominatedNodeName set, not bound): node name
        # -> uid -> pod, in the order they were nominated. They are in
        # ``pods`` but in no NodeInfo (upstream keeps them in the scheduling
        # queue's nominator, PodNominator.NominatedPodsForNode).
        self._nominated: dict[str, dict[str, PodInfo]] = {}
        # Slots of the nodes that have nominated pods, as a mask over the
        # columns' rows; rebuilt lazily after a change to either.
        self._nominated_mask: BoolArray | None = None
        # Told of every pod that joins or leaves a NodeInfo (``watch_pods``).
        self._pod_watchers: list[PodWatcher] = []
        # Pods a ScheduleBatch assumed whose removal waits for the next delta
        # (``remove_later``), by uid.
        self._tentative: dict[str, PodInfo] = {}
        # Per profile: its opportunistic batching state across the cycles run
        # on this snapshot (framework/batch.py, ``batch_for``).
        self.batches: dict[str, object] = {}
        # Label key -> its column over the slots, for the keys plugins asked
        # for (``label_column``); kept current as nodes come and go.
        self._label_columns: dict[str, LabelColumn] = {}

    def watch_pods(self, watcher: PodWatcher) -> None:
        """From now on, call ``watcher(node, pod, +1)`` whenever a pod joins
        a NodeInfo of this snapshot and ``watcher(node, pod, -1)`` whenever
        one leaves (deleted, replaced, or its node deleted), so a plugin can
        keep an index per snapshot current in O(change) (InterPodAffinity's,
        upstream's HavePodsWithAffinityList and more). Pods already there are
        not reported: the caller indexes them when it starts watching.
        Nominated pods and NodeInfo clones are no NodeInfo of the snapshot."""
        self._pod_watchers.append(watcher)

    def _tell(self, ni: NodeInfo, pod: PodInfo, change: int) -> None:
        for watcher in self._pod_watchers:
            watcher(ni, pod, change)

    # -- reading -------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def objects(self, group: str, resource: str) -> Mapping[tuple[str, str], ClusterObject]:
        """Every object of a kind a plugin reads (``Plugin.reads``), keyed by
        (namespace, name), namespace "" for cluster-scoped ones. Empty when
        the caller shipped none. Read-only: plugins must not change it."""
        return self._objects.get((group, resource), _NO_OBJECTS)

    def object(self, group: str, resource: str, namespace: str, name: str) -> ClusterObject | None:
        """One object, or None when the snapshot does not hold it."""
        kind = self._objects.get((group, resource))
        return None if kind is None else kind.get((namespace, name))

    @property
    def object_count(self) -> int:
        return sum(len(objs) for objs in self._objects.values())

    @property
    def has_nominated_pods(self) -> bool:
        """Is any pod nominated to a node? (The common answer, no, lets Filter
        skip the nominated-pods pass.)"""
        return bool(self._nominated)

    def nominated_pods_for_node(self, node: str) -> Mapping[str, PodInfo]:
        """The pods nominated to ``node`` by uid, in nomination order
        (upstream's PodNominator.NominatedPodsForNode): pods whose
        status.nominatedNodeName names it and whose nodeName is empty.
        Read-only."""
        return self._nominated.get(node, _NO_PODS)

    def nominated_slot_mask(self) -> BoolArray:
        """A mask over node slots (column rows): True where the node has
        nominated pods. ``mask[batch.idx]`` finds them in a batch."""
        mask = self._nominated_mask
        if mask is None or len(mask) != self.columns.capacity:
            mask = np.zeros(self.columns.capacity, dtype=np.bool_)
            for name in self._nominated:
                ni = self.nodes.get(name)
                if ni is not None:
                    mask[ni.index] = True
            self._nominated_mask = mask
        return mask

    def nominated_node_names(self) -> list[str]:
        """Nodes that have nominated pods (the node may be missing from the
        snapshot)."""
        return list(self._nominated)

    def object_kinds(self) -> list[tuple[str, str]]:
        """(group, resource) of every kind that has objects."""
        return list(self._objects)

    def node_order(self) -> IntArray:
        """Slots of live nodes, in the order cycles walk them: upstream's
        nodeTree.list(), round-robin across zones. Rebuilt lazily after a node
        was added or removed, never on other changes."""
        if self._order is None:
            self._order = self._tree_order()
        return self._order

    def _tree_order(self) -> IntArray:
        zones = [z for z in self._zones.values() if z]
        if not zones:
            return np.empty(0, dtype=np.int64)
        if len(zones) == 1:
            return np.asarray(zones[0], dtype=np.int64)
        slots = np.concatenate([np.asarray(z, dtype=np.int64) for z in zones])
        # Round k lists the k-th node of every zone that still has one, the
        # zones in their order: sort by (position in zone, zone rank).
        pos = np.concatenate([np.arange(len(z), dtype=np.int64) for z in zones])
        rank = np.repeat(np.arange(len(zones), dtype=np.int64), [len(z) for z in zones])
        return slots[np.lexsort((rank, pos))]

    def label_column(self, key: str) -> LabelColumn:
        """Node label ``key`` over the node slots (see framework/label_index.py):
        built from the nodes at the first request for the key, then updated
        as each node is added, relabelled or removed, never rebuilt per cycle.
        Most plugins use ``NodeBatch.labels(key)`` instead."""
        col = self._label_columns.get(key)
        if col is None:
            col = LabelColumn(key, self.columns.capacity)
            col.compact(self._slot_labels(), self.columns.capacity)
            self._label_columns[key] = col
        return col

    def _slot_labels(self) -> Iterator[tuple[int, Mapping[str, str]]]:
        for ni in self.nodes.values():
            yield ni.index, ni.node.labels

    def _relabel(self, slot: int, labels: Mapping[str, str] | None) -> None:
        capacity = self.columns.capacity
        for col in self._label_columns.values():
            col.set(slot, labels, capacity)
            if col.needs_compaction():
                col.compact(self._slot_labels(), capacity)

    def slot(self, i: int) -> NodeInfo:
        ni = self._slots[i]
        assert ni is not None
        return ni

    def all_nodes(self) -> NodeBatch:
        return NodeBatch(self, self.node_order())

    def batch(self, names: Iterable[str]) -> NodeBatch:
        """The named nodes; KeyError names the first unknown one."""
        idx = [self.nodes[n].index for n in names]
        return NodeBatch(self, np.asarray(idx, dtype=np.int64))

    # -- writing -------------------------------------------------------------

    def apply(self, delta: pb.ClusterDelta) -> None:
        """Apply a delta. Validates every entry first, so a bad delta changes
        nothing."""
        _check_upserts("upsert_nodes", delta.upsert_nodes)
        for i, name in enumerate(delta.delete_nodes):
            if not name:
                raise SnapshotError(f"delta.delete_nodes[{i}]", "must not be empty")
        _check_upserts("upsert_pods", delta.upsert_pods)
        _check_upserts("upsert_objects", delta.upsert_objects)
        for i, ref in enumerate(delta.delete_objects):
            _check_ref(ref, f"delta.delete_objects[{i}]")
        if self._tentative:
            self._settle_against(delta)
        for name in delta.delete_nodes:
            self._delete_node(name)
        for node in delta.upsert_nodes:
            self._upsert_node(node)
        for uid in delta.delete_pods:
            self._delete_pod(uid)
        for pod in delta.upsert_pods:
            self._upsert_pod(pod)
        for ref in delta.delete_objects:
            self._delete_object(ref)
        for obj in delta.upsert_objects:
            self._upsert_object(obj)

    def apply_upserts(
        self,
        kind: str,
        entries: Sequence[pb.Node] | Sequence[pb.Pod] | Sequence[pb.ClusterObject],
    ) -> None:
        """The upserts of one ``kind`` of a delta ("upsert_nodes", "upsert_pods"
        or "upsert_objects"), applied as ``apply`` applies them but without a
        delta to copy them into: the snapshot keeps the entries given. A full
        state built in slices (server/state.py) so keeps the records of the
        message it arrived in, and a record costs its share of that message's
        memory once instead of a copy of its own. Validates every entry first
        (SnapshotError names the entry's index in ``entries``)."""
        if kind not in _UPSERT_KINDS:
            raise ValueError(f"apply_upserts: unknown kind {kind!r}")
        if self._tentative:
            # Pods a batch assumed are settled against a delta: build one.
            delta = pb.ClusterDelta()
            getattr(delta, kind).extend(entries)
            self.apply(delta)
            return
        _check_upserts(kind, entries)
        upserts: dict[str, Callable[[Any], None]] = {
            "upsert_nodes": self._upsert_node,
            "upsert_pods": self._upsert_pod,
            "upsert_objects": self._upsert_object,
        }
        upsert = upserts[kind]
        for entry in entries:
            upsert(entry)

    # -- pods a batch assumed ------------------------------------------------

    def remove_later(self, uids: Iterable[str]) -> None:
        """The pods ``uids`` (added since the caller's state, by a
        ScheduleBatch assuming them) are to be removed again, but only when
        the snapshot is next used: the next ``apply`` keeps those its delta
        brings back unchanged, as the caller's assumed pods, and removes the
        rest; ``settle`` removes them all. Either way the snapshot ends as if
        they had been removed at once and the delta applied after: a pod kept
        still moves to the end of its node's pods, where re-adding it would
        have put it (upstream's cache.updatePod removes and adds). What it
        saves is the work of removing and adding back the same pod."""
        for uid in uids:
            info = self.pods.get(uid)
            if info is None:
                continue
            if info.node_name:
                self._tentative[uid] = info
            else:
                self._delete_pod(uid)

    def settle(self, keep: Collection[str] = ()) -> None:
        """Removes every pod ``remove_later`` named but those in ``keep``:
        with none kept, the snapshot is as the caller's state has it, for a
        request that brings no delta."""
        tentative, self._tentative = self._tentative, {}
        for uid in tentative:
            if uid not in keep:
                self._delete_pod(uid)

    def _settle_against(self, delta: pb.ClusterDelta) -> None:
        """Removes the ``remove_later`` pods the delta does not upsert. Those
        it upserts stay for now: the upsert only moves one brought back as
        it was, and removes and adds one that changed, like any other."""
        self.settle(keep={pod.uid for pod in delta.upsert_pods})

    def _upsert_object(self, obj: pb.ClusterObject) -> None:
        self.object_generation += 1
        ref = obj.ref
        kind = self._objects.setdefault((ref.group, ref.resource), {})
        kind[(ref.namespace, ref.name)] = ClusterObject.from_proto(obj)

    def _delete_object(self, ref: pb.ObjectRef) -> None:
        self.object_generation += 1
        key = (ref.group, ref.resource)
        kind = self._objects.get(key)
        if kind is None:
            return
        kind.pop((ref.namespace, ref.name), None)
        if not kind:
            del self._objects[key]

    def _upsert_node(self, node: pb.Node) -> None:
        self.node_generation += 1
        ni = self.nodes.get(node.name)
        if ni is not None:
            ni.set_node(node)
            self.columns.write(ni)
            if self._label_columns:
                self._relabel(ni.index, node.labels)
            zone = zone_key(node.labels)
            if zone != self._zone_of[ni.index]:
                # nodeTree.updateNode: the node leaves its zone and joins the
                # new one last; the walk order is not rebuilt for it.
                self._tree_remove(ni.index)
                self._tree_add(ni.index, zone)
            return
        if self._free:
            index = self._free.pop()
        else:
            index = len(self._slots)
            self._slots.append(None)
            self.columns.grow(len(self._slots))
        ni = NodeInfo(node, index)
        ni.owner = self
        self._slots[index] = ni
        self.nodes[node.name] = ni
        for pod in self._orphans.pop(node.name, {}).values():
            ni.add_pod(pod)
            if self._pod_watchers:
                self._tell(ni, pod, 1)
        self.columns.write(ni)
        if self._label_columns:
            self._relabel(index, node.labels)
        self._tree_add(index, zone_key(node.labels))
        self._order = None
        self._nominated_mask = None

    def _delete_node(self, name: str) -> None:
        ni = self.nodes.pop(name, None)
        if ni is None:
            return
        self.node_generation += 1
        # Pods stay known: they may still be bound there (upstream keeps a
        # node's pods until they are deleted, see cache.RemoveNode).
        if ni.pods:
            self._orphans[name] = dict(ni.pods)
            if self._pod_watchers:
                for pod in ni.pods.values():
                    self._tell(ni, pod, -1)
        self._slots[ni.index] = None
        self._free.append(ni.index)
        self.columns.clear(ni.index)
        if self._label_columns:
            self._relabel(ni.index, None)
        self._tree_remove(ni.index)
        self._order = None
        self._nominated_mask = None

    def _tree_add(self, slot: int, zone: str) -> None:
        self._zones.setdefault(zone, []).append(slot)
        self._zone_of[slot] = zone

    def _tree_remove(self, slot: int) -> None:
        zone = self._zone_of.pop(slot)
        members = self._zones[zone]
        members.remove(slot)
        if not members:
            del self._zones[zone]

    def upsert_pod(self, info: PodInfo) -> None:
        """``apply`` of a delta that upserts only ``info``'s record, taking
        ``info`` itself as the snapshot's PodInfo (see PodInfo.placed)."""
        if not info.proto.uid:
            raise SnapshotError("pod.uid", "must not be empty")
        if self._tentative:
            self.settle(keep={info.proto.uid})
        self._upsert_pod(info.proto, info)

    def _upsert_pod(self, pod: pb.Pod, info: PodInfo | None = None) -> None:
        old = self.pods.get(pod.uid) if self.reuse_equal_pods else None
        if old is not None and old.node_name and old.proto == pod:
            ni = self.nodes.get(old.node_name)
            if ni is not None and ni.move_last(pod.uid):
                # The same record on the same node (an assumed pod bound as
                # assumed): nothing the pod holds changes, only its place.
                self.pods[pod.uid] = self.pods.pop(pod.uid)
                return
        self._delete_pod(pod.uid)
        if info is None:
            info = PodInfo(pod)
        self.pods[pod.uid] = info
        if not pod.node_name:
            if pod.nominated_node_name:
                self._nominated.setdefault(pod.nominated_node_name, {})[pod.uid] = info
                self._nominated_mask = None
            return
        ni = self.nodes.get(pod.node_name)
        if ni is None:
            self._orphans.setdefault(pod.node_name, {})[pod.uid] = info
            return
        ni.add_pod(info)
        self.columns.write(ni)
        if self._pod_watchers:
            self._tell(ni, info, 1)

    def _delete_pod(self, uid: str) -> None:
        old = self.pods.pop(uid, None)
        if old is None:
            return
        if not old.node_name:
            # A nominated pod leaves the index when it is deleted, bound
            # (upserted with a node) or nominated elsewhere (upserted again).
            nominated = old.proto.nominated_node_name
            pods = self._nominated.get(nominated) if nominated else None
            if pods is not None:
                pods.pop(uid, None)
                if not pods:
                    del self._nominated[nominated]
                    self._nominated_mask = None
            return
        ni = self.nodes.get(old.node_name)
        if ni is not None:
            if ni.remove_pod(uid) is not None and self._pod_watchers:
                self._tell(ni, old, -1)
            self.columns.write(ni)
            return
        orphans = self._orphans.get(old.node_name)
        if orphans is not None:
            orphans.pop(uid, None)
            if not orphans:
                del self._orphans[old.node_name]


def _check_ref(ref: pb.ObjectRef, field: str) -> None:
    if not ref.resource:
        raise SnapshotError(f"{field}.resource", "must not be empty")
    if not ref.name:
        raise SnapshotError(f"{field}.name", "must not be empty")


_UPSERT_KINDS = ("upsert_nodes", "upsert_pods", "upsert_objects")


def _check_upserts(
    kind: str, entries: Sequence[pb.Node] | Sequence[pb.Pod] | Sequence[pb.ClusterObject]
) -> None:
    """The checks ``Snapshot.apply`` makes of one kind of a delta's upserts;
    SnapshotError names the entry's index in ``entries``."""
    if kind == "upsert_nodes":
        for i, node in enumerate(cast("Sequence[pb.Node]", entries)):
            if not node.name:
                raise SnapshotError(f"delta.upsert_nodes[{i}].name", "must not be empty")
    elif kind == "upsert_pods":
        for i, pod in enumerate(cast("Sequence[pb.Pod]", entries)):
            if not pod.uid:
                raise SnapshotError(f"delta.upsert_pods[{i}].uid", "must not be empty")
    else:
        for i, obj in enumerate(cast("Sequence[pb.ClusterObject]", entries)):
            _check_ref(obj.ref, f"delta.upsert_objects[{i}].ref")


@dataclass(slots=True)
class NodeBatch:
    """A set of candidate nodes, addressed by slot: ``idx[k]`` is the row of
    the k-th candidate in every column."""

    snapshot: Snapshot
    idx: IntArray

    def __len__(self) -> int:
        return len(self.idx)

    def __iter__(self) -> Iterator[NodeInfo]:
        slot = self.snapshot.slot
        for i in self.idx.tolist():
            yield slot(i)

    @property
    def infos(self) -> list[NodeInfo]:
        return list(self)

    @property
    def names(self) -> list[str]:
        # C-level lookups (slot, then its node's name): a Filter may reject
        # most of a thousand-node batch, and every rejected node is named.
        infos = map(self.snapshot._slots.__getitem__, self.idx.tolist())
        return list(map(_NODE_NAME, infos))

    @property
    def columns(self) -> NodeColumns:
        return self.snapshot.columns

    def col(self, name: str) -> npt.NDArray[np.generic]:
        """Column ``name`` restricted to this batch, aligned with it."""
        arr: npt.NDArray[np.generic] = getattr(self.snapshot.columns, name)[self.idx]
        return arr

    def labels(self, key: str) -> NodeLabels:
        """Node label ``key`` over the candidates, aligned with them, for a
        batch Filter or Score that compares label values with numpy
        (``labels.present``, ``labels.equals(v)``, ``labels.isin(vs)``):
        one array lookup per call, from a column the snapshot keeps current."""
        column = self.snapshot.label_column(key)
        codes: npt.NDArray[np.int32] = column.codes[self.idx]
        return NodeLabels(column, codes)

    def take(self, positions: npt.NDArray[np.integer] | Sequence[int]) -> NodeBatch:
        """The candidates at ``positions`` (indices into this batch)."""
        return NodeBatch(self.snapshot, self.idx[np.asarray(positions, dtype=np.int64)])


@contextmanager
def detached_batch(ni: NodeInfo) -> Iterator[NodeBatch]:
    """A one-node batch over ``ni``, a NodeInfo outside any snapshot (a clone
    with pods added or removed for a what-if), for a plugin that only has the
    batch form of Filter: a scratch snapshot holds ``ni`` for the block, with
    its columns written from it. ``ni``'s owner and index are restored
    after."""
    owner, index = ni.owner, ni.index
    scratch = Snapshot()
    scratch._slots.append(ni)
    scratch.nodes[ni.name] = ni
    scratch.columns.grow(1)
    ni.owner, ni.index = scratch, 0
    try:
        scratch.columns.write(ni)
        scratch._tree_add(0, zone_key(ni.node.labels))
        yield NodeBatch(scratch, np.zeros(1, dtype=np.int64))
    finally:
        ni.owner, ni.index = owner, index
