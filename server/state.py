"""The replica's snapshot cache and the generation protocol (protos/README.md).

The caller owns the cluster state. A replica caches one snapshot per
``cluster_id`` (and the caller's ``incarnation``) and moves it forward with the
deltas each request carries. A replica that cannot reach the requested
generation from what it holds says so (``StaleReplica``, answered
FAILED_PRECONDITION with its generation) and the caller resends from there or
in full; a pinned request that finds the replica already later gets
``SnapshotPassed`` (ABORTED) and restarts its cycle.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass

import orjson

from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.snapshot import Snapshot, SnapshotError

log = logging.getLogger(__name__)

# A full state with more entries than this is built in slices
# (SnapshotStore.replace_stepwise), so a server can answer other calls meanwhile.
STEPWISE_ENTRIES = 2000
# Entries applied per step of a stepwise build (~a few ms at 15 us each).
STEP_ENTRIES = 256


class StaleReplica(Exception):
    """The replica cannot reach the request's generation from what it holds:
    no snapshot (``have`` -1), one under another incarnation (-1 too), or one
    older than the request's base generation."""

    def __init__(self, cluster_id: str, have: int, base: int, why: str = "") -> None:
        self.cluster_id = cluster_id
        self.have = have
        self.base = base
        if have < 0:
            msg = (
                f"this replica has no snapshot of cluster {cluster_id!r}{why}; "
                f"resend the state in full (state.full=true)"
            )
        else:
            msg = (
                f"this replica has cluster {cluster_id!r} at generation {have}, older than "
                f"state.base_generation {base}; resend the changes after generation {have} "
                f"or the state in full"
            )
        super().__init__(msg)


class SnapshotPassed(Exception):
    """A pinned request (state.pinned) found the replica already later than
    the generation it must be served at."""

    def __init__(self, cluster_id: str, have: int, want: int) -> None:
        self.cluster_id = cluster_id
        self.have = have
        self.want = want
        super().__init__(
            f"state.pinned: this replica has cluster {cluster_id!r} at generation {have}, "
            f"past the pinned generation {want}; restart the cycle at the caller's current "
            f"generation"
        )


class InvalidState(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(slots=True)
class Entry:
    generation: int
    snapshot: Snapshot
    # The caller's ClusterState.incarnation this snapshot was built under.
    incarnation: int = 0


def _object_name(group: str, resource: str, namespace: str, name: str) -> str:
    kind = f"{resource}.{group}" if group else resource
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _check_each_object_once(delta: pb.ClusterDelta, field: str) -> None:
    """A delta names each node, pod and object at most once (protos/README.md): an
    object both upserted and deleted, or upserted twice, has no defined result, so the
    delta is refused whole, naming the entries. Objects are keyed by group, resource,
    namespace and name. Each upserted object must name its resource and itself and
    carry valid JSON (the object as the API server serves it).

    Every request with cluster state passes here, most with a handful of pods or
    nothing: a kind with fewer than two entries cannot repeat, and one set over a
    kind's upserts and deletions says whether any key repeats."""
    if delta.upsert_objects or delta.delete_objects:
        for i, obj in enumerate(delta.upsert_objects):
            entry = f"{field}.delta.upsert_objects[{i}]"
            if not obj.ref.resource:
                raise InvalidState(f"{entry}.ref.resource", "must not be empty")
            if not obj.ref.name:
                raise InvalidState(f"{entry}.ref.name", "must not be empty")
            try:
                doc = orjson.loads(obj.json)
            except orjson.JSONDecodeError as exc:
                raise InvalidState(f"{entry}.json", f"not valid JSON: {exc}") from exc
            if not isinstance(doc, dict):
                raise InvalidState(
                    f"{entry}.json", f"must be a JSON object, got {type(doc).__name__}"
                )
        for i, ref in enumerate(delta.delete_objects):
            entry = f"{field}.delta.delete_objects[{i}]"
            if not ref.resource:
                raise InvalidState(f"{entry}.resource", "must not be empty")
            if not ref.name:
                raise InvalidState(f"{entry}.name", "must not be empty")
    if len(delta.upsert_nodes) + len(delta.delete_nodes) > 1:
        _check_keys(
            field,
            "node",
            "upsert_nodes",
            "delete_nodes",
            [n.name for n in delta.upsert_nodes],
            list(delta.delete_nodes),
        )
    if len(delta.upsert_pods) + len(delta.delete_pods) > 1:
        _check_keys(
            field,
            "pod",
            "upsert_pods",
            "delete_pods",
            [p.uid for p in delta.upsert_pods],
            list(delta.delete_pods),
        )
    if len(delta.upsert_objects) + len(delta.delete_objects) > 1:
        _check_keys(
            field,
            "object",
            "upsert_objects",
            "delete_objects",
            [
                _object_name(o.ref.group, o.ref.resource, o.ref.namespace, o.ref.name)
                for o in delta.upsert_objects
            ],
            [_object_name(r.group, r.resource, r.namespace, r.name) for r in delta.delete_objects],
        )


def _check_keys(
    field: str, kind: str, up_field: str, del_field: str, upserts: list[str], deletes: list[str]
) -> None:
    """Refuse the delta when a key repeats among one kind's upserts and deletions."""
    if len(set(upserts).union(deletes)) == len(upserts) + len(deletes):
        return
    where: dict[str, list[str]] = {}
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


def full_entries(state: pb.ClusterState) -> int:
    """How many objects a full state carries (what building it costs)."""
    d = state.delta
    return len(d.upsert_nodes) + len(d.upsert_pods) + len(d.upsert_objects)


_INDEX = re.compile(r"\[(\d+)\]")


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

    def entry(self, cluster_id: str) -> Entry | None:
        return self._entries.get(cluster_id)

    @staticmethod
    def _check(state: pb.ClusterState, field: str) -> None:
        if not state.cluster_id:
            raise InvalidState(f"{field}.cluster_id", "must not be empty")
        if state.generation <= 0:
            raise InvalidState(f"{field}.generation", f"must be > 0, got {state.generation}")
        _check_each_object_once(state.delta, field)

    def resolve(self, state: pb.ClusterState, field: str = "state") -> Entry:
        """The snapshot at ``state.generation`` (or newer, unless pinned),
        after applying what the message carries."""
        self._check(state, field)
        entry = self._entries.get(state.cluster_id)
        if state.full:
            # A full state always replaces what the replica holds, even at a generation
            # it already has: a caller restarted under the same cluster_id starts over at
            # low generations, and its new state must never be answered from the old one.
            snap = Snapshot()
            self._apply(snap, state.delta, field)
            return self._replaced(state, snap)
        if state.base_generation < 0 or state.base_generation > state.generation:
            raise InvalidState(
                f"{field}.base_generation",
                f"must lie in [0, generation={state.generation}], got {state.base_generation}",
            )
        if entry is not None and entry.incarnation != state.incarnation:
            # Another run of the caller (restarted under the same cluster_id): what
            # this replica holds belongs to the old run and is no base for this one.
            log.info(
                "cluster %s: cached under incarnation %d, the request is of incarnation %d: "
                "asking for the state in full",
                state.cluster_id,
                entry.incarnation,
                state.incarnation,
            )
            raise StaleReplica(
                state.cluster_id,
                -1,
                state.base_generation,
                f" under incarnation {state.incarnation} (it holds incarnation "
                f"{entry.incarnation})",
            )
        if entry is None:
            raise StaleReplica(state.cluster_id, -1, state.base_generation)
        self._entries.move_to_end(state.cluster_id)
        if entry.generation >= state.generation:
            # Already there, or newer: a replica never goes back, and newer
            # state from the same caller is at least as true; unless the
            # request is pinned to its generation.
            if state.pinned and entry.generation > state.generation:
                raise SnapshotPassed(state.cluster_id, entry.generation, state.generation)
            # No delta to match a batch's assumed pods against: they go.
            entry.snapshot.settle()
            return entry
        if entry.generation < state.base_generation:
            raise StaleReplica(state.cluster_id, entry.generation, state.base_generation)
        # Deltas carry whole objects, so applying (base, gen] on top of any
        # generation in [base, gen] lands exactly on gen.
        self._apply(entry.snapshot, state.delta, field)
        entry.generation = state.generation
        return entry

    def replace_stepwise(
        self, state: pb.ClusterState, field: str = "state", step: int = STEP_ENTRIES
    ) -> Generator[None, None, Entry]:
        """``resolve`` of a full state, built ``step`` entries at a time: the
        generator yields between steps (the caller may serve other work
        there) and returns the stored entry. The new snapshot is stored only
        when complete, so nothing ever reads a half-built one; a bad entry
        leaves the cache as it was."""
        if not state.full:
            raise ValueError("replace_stepwise takes a full state")
        self._check(state, field)
        snap = Snapshot()
        d = state.delta
        for name, entries in (
            ("upsert_nodes", d.upsert_nodes),
            ("upsert_pods", d.upsert_pods),
            ("upsert_objects", d.upsert_objects),
        ):
            for start in range(0, len(entries), step):
                part = pb.ClusterDelta()
                getattr(part, name).extend(entries[start : start + step])
                self._apply(snap, part, field, offset=start)
                yield
        return self._replaced(state, snap)

    def _replaced(self, state: pb.ClusterState, snap: Snapshot) -> Entry:
        entry = Entry(state.generation, snap, state.incarnation)
        self._store(state.cluster_id, entry)
        log.info(
            "cluster %s: full state at generation %d, incarnation %d (%d nodes, %d pods, "
            "%d objects)",
            state.cluster_id,
            state.generation,
            state.incarnation,
            len(snap.nodes),
            len(snap.pods),
            snap.object_count,
        )
        return entry

    @staticmethod
    def _apply(snap: Snapshot, delta: pb.ClusterDelta, field: str, offset: int = 0) -> None:
        try:
            snap.apply(delta)
        except SnapshotError as exc:
            where = exc.field
            if offset:
                # A step of a stepwise build: name the entry's index in the whole delta.
                where = _INDEX.sub(lambda m: f"[{int(m.group(1)) + offset}]", where, count=1)
            raise InvalidState(f"{field}.{where}", exc.reason) from exc

    def _store(self, cluster_id: str, entry: Entry) -> None:
        self._entries[cluster_id] = entry
        self._entries.move_to_end(cluster_id)
        while len(self._entries) > self.max_clusters:
            evicted, _ = self._entries.popitem(last=False)
            log.info("evicted snapshot of cluster %s (cache holds %d)", evicted, self.max_clusters)
