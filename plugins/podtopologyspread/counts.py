"""Matching-pod counts per node, kept up to date across cycles.

Upstream counts a constraint's matching pods by walking every pod of every
node each cycle (common.go, countPodsMatchSelector, called from
calPreFilterState and PreScore). In Python that walk is the cost of the
plugin: O(pods) per constraint per cycle. Here a count table per
(namespace, selector) holds, per node name, the pods that countPodsMatchSelector
would count on it (bound, in the namespace, not terminating, labels matching);
a table is built once, the first cycle that asks for it, and then follows the
snapshot's pod changes: each cycle finds the pod records added or dropped
since the last one (by identity: the snapshot replaces a pod's record on every
update; set differences of ids, in C) and adjusts every table by them, so a cycle costs O(changed pods x
tables), not O(pods).

The index lives beside its snapshot (a weak mapping, like TaintIndex) and
keeps at most ``MAX_TABLES`` tables, dropping the least recently used.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Final

from plugins.framework.model import PodInfo
from plugins.framework.snapshot import Snapshot
from plugins.podtopologyspread.selector import Selector

__all__ = ["MAX_TABLES", "PodCountIndex", "pod_count_index"]

MAX_TABLES: Final = 256

_EMPTY: dict[str, int] = {}


def _counts(p: PodInfo, namespace: str, selector: Selector) -> bool:
    proto = p.proto
    return (
        bool(proto.node_name)
        and not proto.terminating
        and proto.namespace == namespace
        and selector.matches(proto.labels)
    )


class PodCountIndex:
    """Count tables for one snapshot (see the module docstring)."""

    __slots__ = ("__weakref__", "_by_id", "_tables", "_values", "tables_built")

    def __init__(self) -> None:
        self._by_id: dict[int, PodInfo] = {}
        self._values: list[PodInfo] = []
        self._tables: OrderedDict[tuple[str, Selector], dict[str, int]] = OrderedDict()
        # How many tables were built from scratch (for tests).
        self.tables_built = 0

    def sync(self, snapshot: Snapshot) -> None:
        """Brings every table up to the snapshot's pods."""
        values = list(snapshot.pods.values())
        if values == self._values:
            # Same records in the same order (identity compares first).
            return
        # The records added and dropped since the last sync, by identity (an
        # update replaces the record: the old one is dropped, the new one
        # added). The index holds the old records, so their ids stay unique.
        by_id = dict(zip(map(id, values), values, strict=True))
        old = self._by_id
        changes: list[tuple[PodInfo, int]] = [(old[i], -1) for i in old.keys() - by_id.keys()]
        changes += [(by_id[i], 1) for i in by_id.keys() - old.keys()]
        self._by_id = by_id
        self._values = values
        if not self._tables or not changes:
            return
        for (namespace, selector), table in self._tables.items():
            for p, delta in changes:
                if not _counts(p, namespace, selector):
                    continue
                node = p.proto.node_name
                n = table.get(node, 0) + delta
                if n:
                    table[node] = n
                else:
                    table.pop(node, None)

    def table(self, namespace: str, selector: Selector) -> dict[str, int]:
        """Node name -> matching pods, as countPodsMatchSelector counts them
        (an empty or Nothing selector counts none). Call ``sync`` first."""
        if selector.empty or selector.nothing:
            return _EMPTY
        key = (namespace, selector)
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            return table
        table = {}
        for p in self._values:
            if _counts(p, namespace, selector):
                node = p.proto.node_name
                table[node] = table.get(node, 0) + 1
        self._tables[key] = table
        self.tables_built += 1
        if len(self._tables) > MAX_TABLES:
            self._tables.popitem(last=False)
        return table


_INDEXES: weakref.WeakKeyDictionary[Snapshot, PodCountIndex] = weakref.WeakKeyDictionary()


def pod_count_index(snapshot: Snapshot) -> PodCountIndex:
    """The snapshot's count index, synced with its pods."""
    index = _INDEXES.get(snapshot)
    if index is None:
        index = _INDEXES[snapshot] = PodCountIndex()
    index.sync(snapshot)
    return index
