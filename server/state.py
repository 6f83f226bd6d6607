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

from berth.v1 import cluster_pb2 as pb
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
        entry = self._entries.get(state.cluster_id)
        if state.full:
            if entry is not None and entry.generation == state.generation:
                self._entries.move_to_end(state.cluster_id)
                return entry
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
