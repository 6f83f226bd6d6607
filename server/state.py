"""The replica's snapshot cache and the generation protocol (protos/README.md).

The caller owns the cluster state. A replica caches one snapshot per
``cluster_id`` and moves it forward with the deltas each request carries. A
replica that cannot reach the requested generation from what it holds says
so (``StaleReplica``, answered FAILED_PRECONDITION with its generation in the
trailing metadata) and the caller resends from there or in full.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.snapshot import Snapshot, SnapshotError

log = logging.getLogger(__name__)

# Trailing metadata key carrying the replica's generation (-1: none).
GENERATION_TRAILER = "berth-replica-generation"


class StaleReplica(Exception):
    """The replica's snapshot is older than the request's base generation."""

    def __init__(self, cluster_id: str, have: int, base: int) -> None:
        self.cluster_id = cluster_id
        self.have = have
        self.base = base
        if have < 0:
            msg = (
                f"this replica has no snapshot of cluster {cluster_id!r}; "
                f"resend the state in full (state.full=true)"
            )
        else:
            msg = (
                f"this replica has cluster {cluster_id!r} at generation {have}, older than "
                f"state.base_generation {base}; resend the changes after generation {have} "
                f"or the state in full"
            )
        super().__init__(msg)


class InvalidState(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field


@dataclass(slots=True)
class Entry:
    generation: int
    snapshot: Snapshot


def _check_each_object_once(delta: pb.ClusterDelta, field: str) -> None:
    """A delta names each node and each pod at most once (protos/README.md): an object
    both upserted and deleted, or upserted twice, has no defined result, so the delta is
    refused whole, naming the entries."""
    for kind, upserts, deletes in (
        ("node", [n.name for n in delta.upsert_nodes], list(delta.delete_nodes)),
        ("pod", [p.uid for p in delta.upsert_pods], list(delta.delete_pods)),
    ):
        if len(set(upserts)) + len(set(deletes)) == len(upserts) + len(deletes) and not (
            set(upserts) & set(deletes)
        ):
            continue
        where: dict[str, list[str]] = {}
        up_field = "upsert_nodes" if kind == "node" else "upsert_pods"
        del_field = "delete_nodes" if kind == "node" else "delete_pods"
        for i, key in enumerate(upserts):
            where.setdefault(key, []).append(f"{up_field}[{i}]")
        for i, key in enumerate(deletes):
            where.setdefault(key, []).append(f"{del_field}[{i}]")
        repeated = {k: v for k, v in where.items() if len(v) > 1}
        first = sorted(repeated)[0]
        raise InvalidState(
            f"{field}.delta",
            f"{kind} {first!r} appears {len(repeated[first])} times "
            f"({', '.join(repeated[first])})"
            + (f" and {len(repeated) - 1} more {kind}(s) repeat" if len(repeated) > 1 else "")
            + "; a delta holds each object at most once, in its last state",
        )


class SnapshotStore:
    """Snapshots by cluster_id, least recently used evicted beyond
    ``max_clusters``. Holds no truth: anything here can be rebuilt from the
    caller."""

    def __init__(self, max_clusters: int = 16) -> None:
        self.max_clusters = max_clusters
        self._entries: OrderedDict[str, Entry] = OrderedDict()

    def generation(self, cluster_id: str) -> int:
        e = self._entries.get(cluster_id)
        return -1 if e is None else e.generation

    def resolve(self, state: pb.ClusterState, field: str = "state") -> Entry:
        """The snapshot at ``state.generation`` (or newer), after applying
        what the message carries."""
        if not state.cluster_id:
            raise InvalidState(f"{field}.cluster_id", "must not be empty")
        if state.generation <= 0:
            raise InvalidState(f"{field}.generation", f"must be > 0, got {state.generation}")
        _check_each_object_once(state.delta, field)
        entry = self._entries.get(state.cluster_id)
        if state.full:
            # A full state always replaces what the replica holds, even at a generation
            # it already has: a caller restarted under the same cluster_id starts over at
            # low generations, and its new state must never be answered from the old one.
            snap = Snapshot()
            self._apply(snap, state, field)
            entry = Entry(state.generation, snap)
            self._store(state.cluster_id, entry)
            log.info(
                "cluster %s: full state at generation %d (%d nodes, %d pods)",
                state.cluster_id,
                state.generation,
                len(snap.nodes),
                len(snap.pods),
            )
            return entry
        if state.base_generation < 0 or state.base_generation > state.generation:
            raise InvalidState(
                f"{field}.base_generation",
                f"must lie in [0, generation={state.generation}], got {state.base_generation}",
            )
        if entry is None:
            raise StaleReplica(state.cluster_id, -1, state.base_generation)
        self._entries.move_to_end(state.cluster_id)
        if entry.generation >= state.generation:
            # Already there, or newer: a replica never goes back, and newer
            # state from the same caller is at least as true.
            return entry
        if entry.generation < state.base_generation:
            raise StaleReplica(state.cluster_id, entry.generation, state.base_generation)
        # Deltas carry whole objects, so applying (base, gen] on top of any
        # generation in [base, gen] lands exactly on gen.
        self._apply(entry.snapshot, state, field)
        entry.generation = state.generation
        return entry

    @staticmethod
    def _apply(snap: Snapshot, state: pb.ClusterState, field: str) -> None:
        try:
            snap.apply(state.delta)
        except SnapshotError as exc:
            raise InvalidState(f"{field}.{exc.field}", exc.reason) from exc

    def _store(self, cluster_id: str, entry: Entry) -> None:
        self._entries[cluster_id] = entry
        self._entries.move_to_end(cluster_id)
        while len(self._entries) > self.max_clusters:
            evicted, _ = self._entries.popitem(last=False)
            log.info("evicted snapshot of cluster %s (cache holds %d)", evicted, self.max_clusters)
