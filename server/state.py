"""The replica's snapshot cache and the generation protocol (protos/README.md).

The caller owns the cluster state. A replica caches one snapshot per caller
and ``cluster_id`` (and the caller's ``incarnation``) and moves it forward with
the deltas each request carries. The caller is who the transport says it is
(server/identity.py): a second caller naming the same cluster_id gets a
snapshot of its own and never sees or changes the first's. Each caller holds
at most ``max_per_caller`` snapshots and ``max_caller_bytes`` of them, so
rotating cluster ids evicts only the rotating caller's own snapshots; beyond
``max_clusters`` (or ``max_bytes``) in all, the caller holding the most
snapshots gives one up, else a snapshot nobody has used for ``idle_seconds``;
when every other snapshot is its caller's only one and in use, a new full
state is refused (``CacheFull``, answered RESOURCE_EXHAUSTED OVERLOADED, which
the caller retries after a backoff) rather than evicting someone else's. Cluster ids never appear in the log: they are the
caller's, and with them anyone could once address its state. A replica that cannot reach the requested
generation from what it holds says so (``StaleReplica``, answered
FAILED_PRECONDITION with its generation) and the caller resends from there or
in full; a pinned request that finds the replica already later gets
``SnapshotPassed`` (ABORTED) and restarts its cycle.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.snapshot import Snapshot, SnapshotError

log = logging.getLogger(__name__)

# A full state with more entries than this is built in slices
# (SnapshotStore.replace_stepwise), so a server can answer other calls meanwhile.
STEPWISE_ENTRIES = 2000
# Entries applied per step of a stepwise build (~a few ms at 15 us each).
STEP_ENTRIES = 256


# A delta with at most this many upserts is copied out of its request before the
# snapshot keeps its records (``own_delta``).
OWN_DELTA_UPSERTS = 16


def own_delta(delta: pb.ClusterDelta) -> pb.ClusterDelta:
    """``delta``, copied into a message of its own when it upserts few records.
    The snapshot keeps the records a delta brings, and with upb a record read
    from a request keeps that whole request's memory alive (its arena: the pod
    being scheduled, the state's header, everything else the request held):
    ~4.9 KB a pod for a pod arriving alone in a delta, against ~2.5-3 KB in a
    message of its own. A large delta is mostly its records and is kept as it
    is; so is a full state."""
    upserts = len(delta.upsert_pods) + len(delta.upsert_nodes) + len(delta.upsert_objects)
    if not 0 < upserts <= OWN_DELTA_UPSERTS:
        return delta
    own = pb.ClusterDelta()
    own.CopyFrom(delta)
    return own


# A caller that sends no identity (no client certificate, no token).
ANONYMOUS = "anonymous"


class StateTooLarge(Exception):
    """A full state larger than this replica keeps for one caller, or a
    delta that would make the caller's snapshot so (``after_delta``)."""

    def __init__(self, size: int, limit: int, *, after_delta: bool = False) -> None:
        self.size = size
        self.limit = limit
        what = "this delta would make the state" if after_delta else "the full state is"
        super().__init__(
            f"state: {what} {size / 2**20:.1f} MiB, more than the "
            f"{limit / 2**20:.1f} MiB this replica keeps for one caller (berth serve "
            f"--max-caller-state-bytes); raise the limit, or ship fewer objects"
        )


class CacheFull(Exception):
    """A full state found the cache at its limits with nothing it may evict:
    every other snapshot is its caller's only one and was used within
    ``idle_seconds``. Nothing was stored; the caller retries after a backoff."""

    def __init__(self, held: int, limit: int, flag: str = "--max-clusters") -> None:
        self.held = held
        self.limit = limit
        # The cap reached: --max-clusters (snapshots) or --max-state-bytes.
        self.flag = flag
        unit = "snapshots" if flag == "--max-clusters" else "bytes"
        super().__init__(
            f"this replica holds {held} snapshots of other callers, all in use, and keeps "
            f"at most {limit} {unit}"
        )


class UploadsFull(Exception):
    """A part of an upload would take the uploads being built (held aside
    until they finish, counted like stored snapshots) past the caller's or
    the whole cache's byte cap. Nothing of the upload is kept; the caller
    retries after a backoff, when others have finished."""

    def __init__(self, held: int, size: int, limit: int, flag: str) -> None:
        self.held = held
        self.size = size
        self.limit = limit
        self.flag = flag
        super().__init__(
            f"uploads of {held} bytes under way and this part takes that to {held + size}, "
            f"more than {limit} ({flag})"
        )


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
                f"this replica has no snapshot of this cluster_id{why}; "
                f"resend the state in full (state.full=true)"
            )
        else:
            msg = (
                f"this replica has the cluster at generation {have}, older than "
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
            f"state.pinned: this replica has the cluster at generation {have}, "
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
    # About how many bytes the snapshot's objects took on the wire (what the
    # caps count): the full state's, moved by each delta.
    size: int = 0
    # When a request last used it (time.monotonic): a caller's only snapshot
    # used within SnapshotStore.idle_seconds is never evicted for another caller.
    used: float = field(default_factory=time.monotonic)


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


def delta_size(snap: Snapshot, delta: pb.ClusterDelta) -> int:
    """How many bytes ``delta`` adds to ``snap`` (negative: frees), counted
    as the objects' wire size; call before applying it."""
    change = 0
    for node in delta.upsert_nodes:
        change += node.ByteSize()
        old = snap.nodes.get(node.name)
        if old is not None:
            change -= old.node.ByteSize()
    for name in delta.delete_nodes:
        old = snap.nodes.get(name)
        if old is not None:
            change -= old.node.ByteSize()
    for pod in delta.upsert_pods:
        change += pod.ByteSize()
        held = snap.pods.get(pod.uid)
        if held is not None:
            change -= held.proto.ByteSize()
    for uid in delta.delete_pods:
        held = snap.pods.get(uid)
        if held is not None:
            change -= held.proto.ByteSize()
    for obj in delta.upsert_objects:
        change += obj.ByteSize()
        r = obj.ref
        was = snap.object(r.group, r.resource, r.namespace, r.name)
        if was is not None:
            change -= len(was.raw)
    for r in delta.delete_objects:
        was = snap.object(r.group, r.resource, r.namespace, r.name)
        if was is not None:
            change -= len(was.raw)
    return change


def full_entries(state: pb.ClusterState) -> int:
    """How many objects a full state carries (what building it costs)."""
    d = state.delta
    return len(d.upsert_nodes) + len(d.upsert_pods) + len(d.upsert_objects)


_INDEX = re.compile(r"\[(\d+)\]")


Key = tuple[str, str]

# Defaults of berth serve's caps.
DEFAULT_MAX_CLUSTERS = 16
DEFAULT_MAX_PER_CALLER = 4
DEFAULT_MAX_BYTES = 2 * 2**30
DEFAULT_MAX_CALLER_BYTES = 1 * 2**30
# A caller's only snapshot unused this long may go to make room for another
# caller's; a shim with pods to schedule uses its snapshot every cycle.
DEFAULT_IDLE_SECONDS = 300.0


class SnapshotStore:
    """Snapshots by (caller, cluster_id), least recently used evicted first:
    a caller's own beyond ``max_per_caller`` snapshots or
    ``max_caller_bytes``; beyond ``max_clusters`` or ``max_bytes`` in all,
    one of the caller with the most snapshots, else one idle for
    ``idle_seconds``, else the new full state is refused (``CacheFull``).
    Holds no truth: anything here can be rebuilt from the caller."""

    def __init__(
        self,
        max_clusters: int = DEFAULT_MAX_CLUSTERS,
        *,
        max_per_caller: int = DEFAULT_MAX_PER_CALLER,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_caller_bytes: int = DEFAULT_MAX_CALLER_BYTES,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
    ) -> None:
        self.max_clusters = max_clusters
        self.max_per_caller = max_per_caller
        self.max_bytes = max_bytes
        self.max_caller_bytes = max_caller_bytes
        self.idle_seconds = idle_seconds
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        # Bytes of the uploads being built aside (Upload), by caller: held
        # until each finishes or ends. The caller's sum is capped by
        # max_caller_bytes and everyone's by max_bytes, counted apart from
        # the stored snapshots, so parallel uploads cannot exhaust memory.
        self._uploading: dict[str, int] = {}

    def generation(self, cluster_id: str, caller: str | None = None) -> int:
        e = self.entry(cluster_id, caller)
        return -1 if e is None else e.generation

    def entry(self, cluster_id: str, caller: str | None = None) -> Entry | None:
        """``caller``'s snapshot of ``cluster_id``; with ``caller`` None, the
        most recently used one of any caller (tests, diagnostics)."""
        if caller is not None:
            return self._entries.get((caller, cluster_id))
        for (_, cid), e in reversed(self._entries.items()):
            if cid == cluster_id:
                return e
        return None

    def snapshot_of(self, cluster_id: str, caller: str | None = None) -> Snapshot:
        """``entry``'s snapshot; KeyError when there is none."""
        e = self.entry(cluster_id, caller)
        if e is None:
            raise KeyError("no snapshot of this cluster_id")
        return e.snapshot

    def clear(self) -> None:
        """Forgets every snapshot (as a restarted replica)."""
        self._entries.clear()

    def held(self, caller: str) -> tuple[int, int]:
        """How many snapshots ``caller`` holds here, and their bytes."""
        count = size = 0
        for (who, _), e in self._entries.items():
            if who == caller:
                count += 1
                size += e.size
        return count, size

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    @property
    def uploading_bytes(self) -> int:
        """Bytes of the uploads being built now, of every caller."""
        return sum(self._uploading.values())

    def _hold_upload(self, caller: str, size: int) -> None:
        """Counts ``size`` more bytes of ``caller``'s uploads under way;
        UploadsFull beyond the caller's or the whole cache's byte cap."""
        mine = self._uploading.get(caller, 0)
        if mine + size > self.max_caller_bytes:
            raise UploadsFull(mine, size, self.max_caller_bytes, "--max-caller-state-bytes")
        total = self.uploading_bytes
        if total + size > self.max_bytes:
            raise UploadsFull(total, size, self.max_bytes, "--max-state-bytes")
        self._uploading[caller] = mine + size

    def _release_upload(self, caller: str, size: int) -> None:
        left = self._uploading.get(caller, 0) - size
        if left > 0:
            self._uploading[caller] = left
        else:
            self._uploading.pop(caller, None)

    @staticmethod
    def _check(state: pb.ClusterState, field: str) -> None:
        if not state.cluster_id:
            raise InvalidState(f"{field}.cluster_id", "must not be empty")
        if state.generation <= 0:
            raise InvalidState(f"{field}.generation", f"must be > 0, got {state.generation}")
        _check_each_object_once(state.delta, field)

    def resolve(
        self, state: pb.ClusterState, field: str = "state", caller: str = ANONYMOUS
    ) -> Entry:
        """The snapshot at ``state.generation`` (or newer, unless pinned),
        after applying what the message carries, among ``caller``'s."""
        self._check(state, field)
        key = (caller, state.cluster_id)
        entry = self._entries.get(key)
        if state.full:
            # A full state always replaces what the replica holds, even at a generation
            # it already has: a caller restarted under the same cluster_id starts over at
            # low generations, and its new state must never be answered from the old one.
            size = state.delta.ByteSize()
            self._fits(size)
            snap = Snapshot()
            self._apply(snap, state.delta, field)
            return self._replaced(state, snap, caller, size)
        if state.base_generation < 0 or state.base_generation > state.generation:
            raise InvalidState(
                f"{field}.base_generation",
                f"must lie in [0, generation={state.generation}], got {state.base_generation}",
            )
        if entry is not None and entry.incarnation != state.incarnation:
            # Another run of the caller (restarted under the same cluster_id): what
            # this replica holds belongs to the old run and is no base for this one.
            log.info(
                "a cluster cached under incarnation %d got a request of incarnation %d: "
                "asking for the state in full",
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
        self._entries.move_to_end(key)
        entry.used = time.monotonic()
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
        grows = delta_size(entry.snapshot, state.delta)
        if grows > 0 and entry.size + grows > self.max_caller_bytes:
            # One snapshot never outgrows the caller's cap, by deltas as by a
            # full state (else deltas of 64 MiB each grow it without bound);
            # refused before anything is applied, so it stays as it was.
            raise StateTooLarge(entry.size + grows, self.max_caller_bytes, after_delta=True)
        self._apply(entry.snapshot, own_delta(state.delta), field)
        entry.generation = state.generation
        entry.size = max(0, entry.size + grows)
        if grows > 0:
            # A delta is the caller's own state moving: it evicts what may be
            # evicted and is never refused for another caller's snapshots.
            self._trim(key, refuse=False)
        return entry

    def replace_stepwise(
        self,
        state: pb.ClusterState,
        field: str = "state",
        step: int = STEP_ENTRIES,
        caller: str = ANONYMOUS,
    ) -> Generator[None, None, Entry]:
        """``resolve`` of a full state, built ``step`` entries at a time: the
        generator yields between steps (the caller may serve other work
        there) and returns the stored entry. The new snapshot is stored only
        when complete, so nothing ever reads a half-built one; a bad entry
        leaves the cache as it was."""
        if not state.full:
            raise ValueError("replace_stepwise takes a full state")
        self._check(state, field)
        size = state.delta.ByteSize()
        self._fits(size)
        snap = Snapshot()
        d = state.delta
        for name, entries in (
            ("upsert_nodes", d.upsert_nodes),
            ("upsert_pods", d.upsert_pods),
            ("upsert_objects", d.upsert_objects),
        ):
            for start in range(0, len(entries), step):
                self._apply_upserts(snap, name, entries[start : start + step], field, start)
                yield
        return self._replaced(state, snap, caller, size)

    def begin_upload(self, state: pb.ClusterState, field: str, caller: str) -> Upload:
        """A full state that arrives in parts (UploadState), built aside:
        nothing is stored until ``Upload.finish``."""
        if not state.full:
            raise InvalidState(f"{field}.full", "must be true: an upload is a full state")
        self._check(state, field)
        return Upload(self, state, caller)

    def _fits(self, size: int) -> None:
        if size > self.max_caller_bytes:
            raise StateTooLarge(size, self.max_caller_bytes)

    def _replaced(self, state: pb.ClusterState, snap: Snapshot, caller: str, size: int) -> Entry:
        entry = Entry(state.generation, snap, state.incarnation, size)
        self._store((caller, state.cluster_id), entry)
        log.info(
            "full state at generation %d, incarnation %d (%d nodes, %d pods, %d objects, %.1f MiB)",
            state.generation,
            state.incarnation,
            len(snap.nodes),
            len(snap.pods),
            snap.object_count,
            size / 2**20,
        )
        return entry

    @staticmethod
    def _apply(snap: Snapshot, delta: pb.ClusterDelta, field: str) -> None:
        try:
            snap.apply(delta)
        except SnapshotError as exc:
            raise InvalidState(f"{field}.{exc.field}", exc.reason) from exc

    @staticmethod
    def _apply_upserts(
        snap: Snapshot, kind: str, entries: Sequence[Any], field: str, offset: int
    ) -> None:
        """A step of a stepwise build: ``entries`` (a slice of the full state's
        ``kind``, from index ``offset``) go into ``snap`` as they are, not copied
        into a delta of their own, so the snapshot shares the full state's memory."""
        try:
            snap.apply_upserts(kind, entries)
        except SnapshotError as exc:
            # Name the entry's index in the whole delta.
            where = _INDEX.sub(lambda m: f"[{int(m.group(1)) + offset}]", exc.field, count=1)
            raise InvalidState(f"{field}.{where}", exc.reason) from exc

    def _store(self, key: Key, entry: Entry) -> None:
        """Stores a full state's snapshot; refuses it (``CacheFull``) and
        leaves the cache as it was when making room would evict a snapshot
        another caller is using."""
        before = self._entries.get(key)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        try:
            self._trim(key, refuse=True)
        except CacheFull:
            if before is None:
                del self._entries[key]
            else:
                self._entries[key] = before
            raise

    def _trim(self, keep: Key, *, refuse: bool) -> None:
        """Evicts until every cap holds, never ``keep`` (the snapshot just
        used): first the caller's own least recently used beyond its caps,
        then, beyond the caps of the whole cache, the least recently used of
        whoever holds the most snapshots (most bytes on a tie), so a caller
        that rotates cluster ids evicts its own; then a snapshot idle for
        ``idle_seconds``. A caller's only snapshot in use is never evicted for
        another: with ``refuse`` the new state is refused instead."""
        caller = keep[0]
        while True:
            count, size = self.held(caller)
            if count <= self.max_per_caller and size <= self.max_caller_bytes:
                break
            if not self._evict(caller, keep, "the caller's own limit"):
                break
        while len(self._entries) > self.max_clusters or self.total_bytes > self.max_bytes:
            victim = self._global_victim(keep)
            if victim is None:
                if refuse:
                    if len(self._entries) > self.max_clusters:
                        raise CacheFull(len(self._entries) - 1, self.max_clusters)
                    raise CacheFull(len(self._entries) - 1, self.max_bytes, "--max-state-bytes")
                break
            entry = self._entries.pop(victim)
            log.info(
                "evicted a snapshot (%.1f MiB, idle %.0f s) to keep within the cache's limit "
                "(%d snapshots, %.1f MiB)",
                entry.size / 2**20,
                time.monotonic() - entry.used,
                self.max_clusters,
                self.max_bytes / 2**20,
            )

    def _global_victim(self, keep: Key) -> Key | None:
        """What goes when the whole cache is over its limits: the least
        recently used snapshot of the caller holding the most (most bytes on a
        tie) when that caller holds more than one, else the least recently
        used snapshot idle for ``idle_seconds``; None when neither exists."""
        counts: dict[str, list[int]] = {}
        for (who, _), e in self._entries.items():
            c = counts.setdefault(who, [0, 0])
            c[0] += 1
            c[1] += e.size
        for who in sorted(counts, key=lambda w: (counts[w][0], counts[w][1]), reverse=True):
            if counts[who][0] < 2:
                break
            for key in self._entries:
                if key[0] == who and key != keep:
                    return key
        idle_since = time.monotonic() - self.idle_seconds
        for key, e in self._entries.items():
            if key != keep and e.used <= idle_since:
                return key
        return None

    def _evict(self, caller: str, keep: Key, why: str) -> bool:
        for key in self._entries:
            if key[0] == caller and key != keep:
                entry = self._entries.pop(key)
                log.info(
                    "evicted a snapshot (%.1f MiB) of a caller holding too many (%s; the cache "
                    "holds %d snapshots)",
                    entry.size / 2**20,
                    why,
                    len(self._entries),
                )
                return True
        return False


class Upload:
    """A full state arriving in parts (``SnapshotStore.begin_upload``): each
    part is checked against the first (same cluster_id, generation and
    incarnation; full; upserts only) and applied to a snapshot nobody reads
    until ``finish`` swaps it in."""

    def __init__(self, store: SnapshotStore, first: pb.ClusterState, caller: str) -> None:
        self.store = store
        self.caller = caller
        self.cluster_id = first.cluster_id
        self.header = pb.ClusterState(
            cluster_id=first.cluster_id,
            generation=first.generation,
            incarnation=first.incarnation,
            full=True,
        )
        self.snapshot = Snapshot()
        self.size = 0
        self.closed = False

    def close(self) -> None:
        """Gives back the bytes this upload held (SnapshotStore's count of
        uploads under way); its snapshot is dropped unless ``finish`` stored
        it. Call when the stream ends, however it ends, on the thread that
        calls ``add`` (the event loop); twice is harmless."""
        if not self.closed:
            self.closed = True
            self.store._release_upload(self.caller, self.size)

    def add(self, part: pb.ClusterState, field: str) -> Generator[None, None, None]:
        """Checks ``part`` at once (InvalidState, StateTooLarge); the
        generator it returns applies it a step at a time."""
        h = self.header
        for name, want, got in (
            ("cluster_id", h.cluster_id, part.cluster_id),
            ("generation", h.generation, part.generation),
            ("incarnation", h.incarnation, part.incarnation),
        ):
            if want != got:
                # Cluster ids are never quoted: error messages reach traces and
                # the caller's log, and an id once addressed its state.
                shown = "" if name == "cluster_id" else f" ({want!r}), got {got!r}"
                raise InvalidState(f"{field}.{name}", f"must equal the first part's{shown}")
        if not part.full:
            raise InvalidState(f"{field}.full", "must be true in every part of an upload")
        d = part.delta
        if d.delete_nodes or d.delete_pods or d.delete_objects:
            raise InvalidState(f"{field}.delta", "an upload's parts carry upserts only")
        _check_each_object_once(d, field)
        if self.closed:
            raise ValueError("Upload.add after finish or close")
        size = d.ByteSize()
        self.store._fits(self.size + size)
        self.store._hold_upload(self.caller, size)
        self.size += size
        return self._steps(part, field)

    def _steps(self, part: pb.ClusterState, field: str) -> Generator[None, None, None]:
        d = part.delta
        for name, entries in (
            ("upsert_nodes", d.upsert_nodes),
            ("upsert_pods", d.upsert_pods),
            ("upsert_objects", d.upsert_objects),
        ):
            for start in range(0, len(entries), STEP_ENTRIES):
                SnapshotStore._apply_upserts(
                    self.snapshot, name, entries[start : start + STEP_ENTRIES], field, start
                )
                yield

    def finish(self) -> Entry:
        """Stores the built snapshot, replacing what the caller had under
        the cluster_id (CacheFull: nothing stored). The caller then calls
        ``close`` (on the thread that calls ``add``)."""
        return self.store._replaced(self.header, self.snapshot, self.caller, self.size)
