"""The caller's truth: the nodes, pods and other objects plugins read,
numbered by generation under a cluster_id and an incarnation, with the recent
deltas kept so that a replica a few generations behind is brought forward
cheaply (protos/README.md, "Cluster state at the cost of what changed")."""

from __future__ import annotations

import io
import os
import secrets
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from berth.api.v1 import cluster_pb2 as cpb

# The environment variable that gives the caller's token (the
# berth-caller-token metadata); without it each ClusterStateLog makes one.
TOKEN_ENV = "BERTH_CALLER_TOKEN"


def _varint_size(n: int) -> int:
    """The bytes of ``n`` as a protobuf varint (a length prefix)."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# The varints of 0..127, each one byte: most records' lengths.
_SHORT_VARINTS = tuple(bytes((n,)) for n in range(128))


def _length(size: int) -> bytes:
    """``size`` as a varint, the one-byte ones from a table."""
    return _SHORT_VARINTS[size] if size < 128 else _varint(size)


def _key_and_length(number: int, size: int) -> bytes:
    """The key (wire type 2, length-delimited) and length of a message field."""
    return _varint(number << 3 | 2) + _varint(size)


_DELTA = cpb.ClusterState.DESCRIPTOR.fields_by_name["delta"].number
_UPSERTS = tuple(
    cpb.ClusterDelta.DESCRIPTOR.fields_by_name[name].number
    for name in ("upsert_nodes", "upsert_pods", "upsert_objects")
)

# (group, resource, namespace, name) of a ClusterObject.
ObjectKey = tuple[str, str, str, str]


def object_key(ref: cpb.ObjectRef) -> ObjectKey:
    return (ref.group, ref.resource, ref.namespace, ref.name)


def object_ref(key: ObjectKey) -> cpb.ObjectRef:
    group, resource, namespace, name = key
    return cpb.ObjectRef(group=group, resource=resource, namespace=namespace, name=name)


class ClusterStateLog:
    """Nodes, pods and the other objects plugins read (``objects``) by
    generation, with a bounded log of deltas."""

    def __init__(
        self,
        cluster_id: str | None = None,
        keep: int = 512,
        *,
        incarnation: int | None = None,
        token: str | None = None,
    ) -> None:
        self.cluster_id = cluster_id or uuid.uuid4().hex
        # Who owns this state on the replicas (berth-caller-token): given,
        # else $BERTH_CALLER_TOKEN, else a random secret of this run.
        self.token = token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)
        # Which run of the caller this is (its start in microseconds): a
        # caller that keeps its cluster_id across restarts is never answered
        # from what a replica holds of its previous run.
        self.incarnation = time.time_ns() // 1000 if incarnation is None else incarnation
        self.generation = 0
        self.nodes: dict[str, cpb.Node] = {}
        self.pods: dict[str, cpb.Pod] = {}
        self._log: deque[tuple[int, _Changes]] = deque(maxlen=keep)
        # Pending changes, one entry per object (None: deleted), so an object
        # changed several times before a commit lands in the delta once, in
        # its last state: an upsert then a delete is a delete.
        self._pending_nodes: dict[str, cpb.Node | None] = {}
        self._pending_pods: dict[str, cpb.Pod | None] = {}
        # Objects beyond nodes and pods (Profile.reads), by (group, resource,
        # namespace, name).
        self.objects: dict[ObjectKey, cpb.ClusterObject] = {}
        self._pending_objects: dict[ObjectKey, cpb.ClusterObject | None] = {}
        self._merged: tuple[int, int, cpb.ClusterDelta] | None = None

    # -- changes --------------------------------------------------------------

    def upsert_node(self, node: cpb.Node) -> None:
        # One key string for both maps: each read of a record's field is a new one.
        name = node.name
        self.nodes[name] = node
        self._pending_nodes[name] = node

    def delete_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self._pending_nodes[name] = None

    def upsert_pod(self, pod: cpb.Pod) -> None:
        uid = pod.uid
        self.pods[uid] = pod
        self._pending_pods[uid] = pod

    def delete_pod(self, uid: str) -> None:
        if self.pods.pop(uid, None) is not None:
            self._pending_pods[uid] = None

    def upsert_object(self, obj: cpb.ClusterObject) -> None:
        key = object_key(obj.ref)
        self.objects[key] = obj
        self._pending_objects[key] = obj

    def delete_object(self, ref: cpb.ObjectRef) -> None:
        key = object_key(ref)
        if self.objects.pop(key, None) is not None:
            self._pending_objects[key] = None

    @property
    def has_pending(self) -> bool:
        return bool(self._pending_nodes or self._pending_pods or self._pending_objects)

    def commit(self) -> int:
        """Closes the pending changes into a new generation (if any). The log
        keeps the changed records themselves, not a message holding copies of
        them: records are never changed in place once upserted, and a delta
        is built only when a replica asks for it (``state_since``)."""
        if self._pending_nodes or self._pending_pods or self._pending_objects:
            self.generation += 1
            self._log.append(
                (
                    self.generation,
                    _Changes(self._pending_nodes, self._pending_pods, self._pending_objects),
                )
            )
            self._pending_nodes = {}
            self._pending_pods = {}
            self._pending_objects = {}
        elif self.generation == 0:
            # An empty cluster is still a state a replica can hold.
            self.generation = 1
            self._log.append((1, _Changes({}, {}, {})))
        return self.generation

    # -- what to send ---------------------------------------------------------

    def full_state(self, *, hollow: bool = False) -> cpb.ClusterState:
        """The whole state at the current generation. ``hollow``: the header
        alone (its delta left empty), for a caller that puts the request's
        own state in with ``fill_full`` instead of copying a built state into
        it: a full state is a copy of every record, and building it apart
        from the request holds two while the request is sent."""
        if self.generation == 0:
            self.commit()
        st = cpb.ClusterState(
            cluster_id=self.cluster_id,
            generation=self.generation,
            full=True,
            incarnation=self.incarnation,
        )
        if not hollow:
            self.fill_full(st.delta)
        return st

    def fill_full(self, delta: cpb.ClusterDelta) -> None:
        """Puts every node, pod and object into ``delta`` (a hollow full
        state's, in the request it goes out in)."""
        delta.upsert_nodes.extend(self.nodes.values())
        delta.upsert_pods.extend(self.pods.values())
        delta.upsert_objects.extend(self.objects.values())

    def encode_full(self, request: Message, state_field: str = "state") -> bytes:
        """``request``, whose ``state_field`` is a hollow full state, in wire
        bytes with every node, pod and object in that state's delta: what
        ``fill_full`` into the request and its serialization give, the same
        message to the receiver. Each record is serialized on its own and
        follows the request inside an occurrence of the state field of its
        own (state { delta { upsert { record } } }), which a protobuf parser
        merges into the first (a message field that occurs again is merged,
        its repeated fields appended), so the records are never copied into
        the request: with upb such a copy costs ~1.5 KB a pod beside the
        ~0.35 KB of its encoding. The bytes are written into one growing
        buffer whose value is taken without a copy (``BytesIO.getvalue``), so
        the send's transient memory is about one encoding of the state, not a
        list of every record's encoding and then their join."""
        number = request.DESCRIPTOR.fields_by_name[state_field].number
        state_key, delta_key = _varint(number << 3 | 2), _varint(_DELTA << 3 | 2)
        out = io.BytesIO()
        out.write(request.SerializeToString())
        # The delta present even with nothing in it, as ``fill_full`` leaves it.
        out.write(_key_and_length(number, 2) + _key_and_length(_DELTA, 0))
        for upsert, items in zip(
            _UPSERTS,
            (self.nodes.values(), self.pods.values(), self.objects.values()),
            strict=True,
        ):
            upsert_key = _varint(upsert << 3 | 2)
            for item in items:
                data = item.SerializeToString()
                entry = upsert_key + _length(len(data))
                inner = len(entry) + len(data)
                delta = delta_key + _length(inner)
                out.write(b"".join((state_key, _length(len(delta) + inner), delta, entry, data)))
        return out.getvalue()

    def full_delta_size(self) -> int:
        """The bytes ``fill_full`` adds to a message: the delta field (set
        even when empty, as ``full_state`` sets it), its entries, each with
        its tag and length."""
        size = 0
        for items in (self.nodes.values(), self.pods.values(), self.objects.values()):
            for item in items:
                n = item.ByteSize()
                size += 1 + _varint_size(n) + n
        return 1 + _varint_size(size) + size

    def full_parts(self, part_bytes: int) -> list[cpb.ClusterState]:
        """The full state as UploadState parts of about ``part_bytes`` each
        (an object larger than that alone in its part)."""
        return list(self.lazy_full_parts(part_bytes)[1])

    def lazy_full_parts(self, part_bytes: int) -> tuple[int, Iterator[cpb.ClusterState]]:
        """``full_parts`` as (how many, the parts built one at a time). What
        goes in which part is settled here, from the records held now (never
        changed once upserted), so parts built later, while the state moves
        on, still make up the state at this generation; and only the parts
        not yet sent are copies in memory, not the whole state at once."""
        if self.generation == 0:
            self.commit()
        header = cpb.ClusterState(
            cluster_id=self.cluster_id,
            generation=self.generation,
            full=True,
            incarnation=self.incarnation,
        )
        # Per part, its entries: (field, records) runs in order.
        plan: list[list[tuple[str, list[Any]]]] = []
        size = 0
        groups: list[tuple[str, Iterable[Any]]] = [
            ("upsert_nodes", self.nodes.values()),
            ("upsert_pods", self.pods.values()),
            ("upsert_objects", self.objects.values()),
        ]
        for name, items in groups:
            for item in items:
                n = item.ByteSize()
                if not plan or (size and size + n > part_bytes):
                    plan.append([])
                    size = 0
                runs = plan[-1]
                if not runs or runs[-1][0] != name:
                    runs.append((name, []))
                runs[-1][1].append(item)
                size += n

        def build() -> Iterator[cpb.ClusterState]:
            if not plan:
                part = cpb.ClusterState()
                part.CopyFrom(header)
                part.delta.SetInParent()
                yield part
                return
            while plan:
                part = cpb.ClusterState()
                part.CopyFrom(header)
                for name, records in plan.pop(0):
                    getattr(part.delta, name).extend(records)
                yield part

        return max(1, len(plan)), build()

    def state_since(self, base: int, *, hollow: bool = False) -> cpb.ClusterState:
        """The message that takes a replica at ``base`` to the current
        generation: a merged delta, or the full state when ``base`` is
        unknown (<= 0) or older than the log reaches (``hollow``: see
        ``full_state``)."""
        if self.generation == 0:
            self.commit()
        if base == self.generation:
            return cpb.ClusterState(
                cluster_id=self.cluster_id,
                generation=self.generation,
                base_generation=base,
                incarnation=self.incarnation,
            )
        oldest = self._log[0][0] if self._log else self.generation + 1
        if base <= 0 or base + 1 < oldest or base > self.generation:
            return self.full_state(hollow=hollow)
        if self._merged is not None and self._merged[:2] == (base, self.generation):
            delta = self._merged[2]
        else:
            delta = self._merge(base)
            self._merged = (base, self.generation, delta)
        st = cpb.ClusterState(
            cluster_id=self.cluster_id,
            generation=self.generation,
            base_generation=base,
            incarnation=self.incarnation,
        )
        st.delta.CopyFrom(delta)
        return st

    def pinned_state(
        self, base: int, generation: int, *, hollow: bool = False
    ) -> cpb.ClusterState | None:
        """A pinned message (``ClusterState.pinned``) that takes a replica at
        ``base`` to exactly ``generation``, an earlier one included: the later
        calls of a cycle that started there. None when it cannot be built (the
        base is past ``generation``, or only a full state would do and the
        caller no longer has that generation whole): restart the cycle."""
        if generation <= 0 or generation > self.generation:
            raise ValueError(
                f"pinned generation {generation} is not one this log has had "
                f"(current {self.generation})"
            )
        if generation == self.generation:
            st = self.state_since(base, hollow=hollow)
        else:
            oldest = self._log[0][0] if self._log else self.generation + 1
            if base <= 0 or base + 1 < oldest or base > generation:
                return None
            st = cpb.ClusterState(
                cluster_id=self.cluster_id,
                generation=generation,
                base_generation=base,
                incarnation=self.incarnation,
            )
            if base < generation:
                st.delta.CopyFrom(self._merge(base, generation))
        st.pinned = True
        return st

    def _merge(self, base: int, upto: int | None = None) -> cpb.ClusterDelta:
        """The changes after ``base`` up to ``upto`` (default: the current
        generation) as one delta, each object once in its last state."""
        newer: list[_Changes] = []
        for gen, changes in reversed(self._log):
            if gen <= base:
                break
            if upto is None or gen <= upto:
                newer.append(changes)
        if len(newer) == 1:
            merged = newer[0]
        else:
            merged = _Changes({}, {}, {})
            for changes in reversed(newer):
                merged.nodes.update(changes.nodes)
                merged.pods.update(changes.pods)
                merged.objects.update(changes.objects)
        out = cpb.ClusterDelta()
        for name, node in merged.nodes.items():
            if node is None:
                out.delete_nodes.append(name)
            else:
                out.upsert_nodes.append(node)
        for uid, pod in merged.pods.items():
            if pod is None:
                out.delete_pods.append(uid)
            else:
                out.upsert_pods.append(pod)
        for key, obj in merged.objects.items():
            if obj is None:
                out.delete_objects.append(object_ref(key))
            else:
                out.upsert_objects.append(obj)
        return out


@dataclass(frozen=True, slots=True)
class _Changes:
    """One generation's changes in ``ClusterStateLog``'s log: each object once,
    in its last state (None: deleted)."""

    nodes: dict[str, cpb.Node | None]
    pods: dict[str, cpb.Pod | None]
    objects: dict[ObjectKey, cpb.ClusterObject | None]
