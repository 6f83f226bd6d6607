"""Per-snapshot indexes PodTopologySpread counts with, kept current in
O(change).

Upstream counts a constraint's matching pods by walking every pod of every
node each cycle (common.go, countPodsMatchSelector, called from
calPreFilterState and PreScore's processAllNode), and reads each node's
topology value from its labels. In Python both walks cost milliseconds per
cycle at a few thousand nodes, so Berth keeps, per snapshot:

* ``PodCountIndex``: per (namespace, selector) a count table, a numpy array
  with one row per node slot (the snapshot's column rows) holding the pods
  countPodsMatchSelector would count on that node (in the namespace, not
  terminating, labels matching). It follows the snapshot through
  ``Snapshot.watch_pods``: each pod that joins or leaves a node adjusts the
  tables of its namespace, O(tables of the namespace) per change. A new
  table is built from the pods grouped by (namespace, labels), so building
  one costs O(distinct label sets), not O(pods). At most ``MAX_TABLES``
  tables are kept, the least recently used dropped.
* ``TopologyIndex``: per topology key, the node's value as an integer code
  per slot (-1: no such label, or no node in the slot), refreshed when the
  snapshot's ``node_generation`` moves by comparing each slot's node record
  by identity (only replaced records are read again).

With both, a cycle sums counts by domain with numpy over the node slots
(pod_topology_spread.py) instead of visiting nodes and pods in Python.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.labels import Selector
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import Snapshot

__all__ = [
    "MAX_TABLES",
    "PodCountIndex",
    "TopologyColumn",
    "TopologyIndex",
    "pod_count_index",
    "topology_index",
]

IntArray = npt.NDArray[np.int64]

MAX_TABLES: Final = 256

# A pod as countPodsMatchSelector reads it: namespace and labels.
Signature = tuple[str, frozenset[tuple[str, str]]]


def _grown(arr: IntArray, capacity: int, fill: int) -> IntArray:
    if len(arr) >= capacity:
        return arr
    out = np.full(max(capacity, 2 * len(arr)), fill, dtype=np.int64)
    out[: len(arr)] = arr
    return out


class _Table:
    __slots__ = ("counts", "selector")

    def __init__(self, selector: Selector, capacity: int) -> None:
        self.selector = selector
        self.counts: IntArray = np.zeros(capacity, dtype=np.int64)


class PodCountIndex:
    """Count tables for one snapshot (see the module docstring). Holds no
    reference to the snapshot."""

    __slots__ = ("__weakref__", "_by_ns", "_groups", "_tables", "capacity", "tables_built")

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        # (namespace, labels) -> (labels as a dict, node slot -> pods); only
        # pods countPodsMatchSelector may count (not terminating).
        self._groups: dict[Signature, tuple[dict[str, str], dict[int, int]]] = {}
        self._tables: OrderedDict[tuple[str, Selector], _Table] = OrderedDict()
        # namespace -> its tables (the ones a pod change may touch).
        self._by_ns: dict[str, list[_Table]] = {}
        # How many tables were built from scratch (for tests).
        self.tables_built = 0

    def pod_changed(self, ni: NodeInfo, pod: PodInfo, change: int) -> None:
        """``Snapshot.watch_pods``'s callback: ``pod`` joined (+1) or left
        (-1) the node ``ni``."""
        proto = pod.proto
        if proto.terminating:
            return
        slot = ni.index
        ns = proto.namespace
        items = frozenset(proto.labels.items())
        sig = (ns, items)
        group = self._groups.get(sig)
        if group is None:
            if change <= 0:
                return
            group = self._groups[sig] = (dict(items), {})
        labels, slots = group
        left = slots.get(slot, 0) + change
        if left > 0:
            slots[slot] = left
        else:
            slots.pop(slot, None)
            if not slots:
                del self._groups[sig]
        tables = self._by_ns.get(ns)
        if not tables:
            return
        for table in tables:
            if table.selector.matches(labels):
                counts = table.counts
                if slot >= len(counts):
                    counts = table.counts = _grown(counts, slot + 1, 0)
                counts[slot] += change

    def add_all(self, snapshot: Snapshot) -> None:
        for ni in snapshot.nodes.values():
            for pod in ni.pods.values():
                self.pod_changed(ni, pod, 1)

    def table(self, namespace: str, selector: Selector) -> IntArray:
        """Node slot -> matching pods, as countPodsMatchSelector counts them
        on the node in that slot (an empty or Nothing selector counts none).
        At least ``capacity`` rows; read-only."""
        if selector.empty or selector.nothing:
            return np.zeros(self.capacity, dtype=np.int64)
        key = (namespace, selector)
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            if len(table.counts) < self.capacity:
                table.counts = _grown(table.counts, self.capacity, 0)
            return table.counts
        table = _Table(selector, self.capacity)
        counts = table.counts
        for (ns, _), (labels, slots) in self._groups.items():
            if ns != namespace or not selector.matches(labels):
                continue
            if slots:
                top = max(slots)
                if top >= len(counts):
                    counts = table.counts = _grown(counts, top + 1, 0)
                idx = np.fromiter(slots.keys(), dtype=np.int64, count=len(slots))
                counts[idx] += np.fromiter(slots.values(), dtype=np.int64, count=len(slots))
        self._tables[key] = table
        self._by_ns.setdefault(namespace, []).append(table)
        self.tables_built += 1
        if len(self._tables) > MAX_TABLES:
            (old_ns, _), old = self._tables.popitem(last=False)
            siblings = self._by_ns[old_ns]
            siblings.remove(old)
            if not siblings:
                del self._by_ns[old_ns]
        return table.counts

    def table_by_node(
        self, snapshot: Snapshot, namespace: str, selector: Selector
    ) -> dict[str, int]:
        """``table`` keyed by node name, nodes with no matching pod left out
        (for tests and logs)."""
        counts = self.table(namespace, selector)
        out: dict[str, int] = {}
        for name, ni in snapshot.nodes.items():
            n = int(counts[ni.index]) if ni.index < len(counts) else 0
            if n:
                out[name] = n
        return out


_INDEXES: Final[weakref.WeakKeyDictionary[Snapshot, PodCountIndex]] = weakref.WeakKeyDictionary()


def pod_count_index(snapshot: Snapshot) -> PodCountIndex:
    """The snapshot's count index: built by one walk over its pods at the
    first call, kept current by the snapshot from then on (watch_pods),
    dropped with the snapshot."""
    index = _INDEXES.get(snapshot)
    if index is None:
        index = PodCountIndex(snapshot.columns.capacity)
        index.add_all(snapshot)
        snapshot.watch_pods(index.pod_changed)
        _INDEXES[snapshot] = index
    index.capacity = snapshot.columns.capacity
    return index


class TopologyColumn:
    """One topology key's values over the node slots: ``codes[slot]`` is
    the index in ``values`` of the node's value, -1 when the node lacks the
    label or the slot holds no node. ``values`` only grows (a value no node
    has any more keeps its code)."""

    __slots__ = ("code_of", "codes", "key", "values")

    def __init__(self, key: str, capacity: int) -> None:
        self.key = key
        self.codes: IntArray = np.full(capacity, -1, dtype=np.int64)
        self.values: list[str] = []
        self.code_of: dict[str, int] = {}

    def set(self, slot: int, labels: Mapping[str, str]) -> None:
        value = labels.get(self.key)
        if value is None:
            self.codes[slot] = -1
            return
        code = self.code_of.get(value)
        if code is None:
            code = self.code_of[value] = len(self.values)
            self.values.append(value)
        self.codes[slot] = code

    def code(self, value: str) -> int:
        """The code of ``value``, adding it when new (for "" standing for a
        missing label)."""
        code = self.code_of.get(value)
        if code is None:
            code = self.code_of[value] = len(self.values)
            self.values.append(value)
        return code


class TopologyIndex:
    """The topology columns of one snapshot (see the module docstring)."""

    __slots__ = ("__weakref__", "_columns", "_generation", "_records")

    def __init__(self) -> None:
        self._columns: dict[str, TopologyColumn] = {}
        # The node record each slot's codes were read from.
        self._records: list[pb.Node | None] = []
        self._generation = -1

    def _refresh(self, snapshot: Snapshot) -> None:
        capacity = snapshot.columns.capacity
        if snapshot.node_generation == self._generation and len(self._records) == capacity:
            return
        self._generation = snapshot.node_generation
        if len(self._records) < capacity:
            self._records.extend([None] * (capacity - len(self._records)))
        for col in self._columns.values():
            col.codes = _grown(col.codes, capacity, -1)
        records = self._records
        live = [False] * len(records)
        columns = list(self._columns.values())
        for ni in snapshot.nodes.values():
            i = ni.index
            live[i] = True
            node = ni.node
            if records[i] is not node:
                records[i] = node
                labels = node.labels
                for col in columns:
                    col.set(i, labels)
        for i, rec in enumerate(records):
            if rec is not None and not live[i]:
                records[i] = None
                for col in columns:
                    col.codes[i] = -1

    def column(self, snapshot: Snapshot, key: str) -> TopologyColumn:
        """The column of ``key``, current with ``snapshot``'s nodes (codes
        have at least ``snapshot.columns.capacity`` rows)."""
        self._refresh(snapshot)
        col = self._columns.get(key)
        if col is None:
            col = self._columns[key] = TopologyColumn(key, len(self._records))
            for ni in snapshot.nodes.values():
                col.set(ni.index, ni.node.labels)
        return col


_TOPOLOGY: Final[weakref.WeakKeyDictionary[Snapshot, TopologyIndex]] = weakref.WeakKeyDictionary()


def topology_index(snapshot: Snapshot) -> TopologyIndex:
    """The snapshot's topology index (dropped with the snapshot)."""
    index = _TOPOLOGY.get(snapshot)
    if index is None:
        index = _TOPOLOGY[snapshot] = TopologyIndex()
    return index
