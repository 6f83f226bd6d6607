"""The caller's side of the SchedulingService protocol (protos/README.md,
"Client contract").

``ClusterStateLog`` owns the truth: the nodes and pods the plugins should see,
numbered by generation under a cluster_id and an incarnation, with the recent
deltas kept so that a replica that is a few generations behind is brought
forward cheaply.

``SchedulingClient`` sends each request with the changes since a generation
the replica that answers it holds, and on STALE_SNAPSHOT (FAILED_PRECONDITION:
the replica is behind or new) resends from the generation the replica reports,
or in full. Every replica has a generation of its own, so the client keeps
them apart in one of two ways:

- endpoint-aware (``SchedulingClient.connect`` with ``dns:///name:port`` or a
  list ``host:port,host:port``): the client resolves the replicas' addresses
  itself, keeps a channel and a confirmed generation per address, spreads
  calls round robin over the healthy ones and retries an UNAVAILABLE call on
  the next (every RPC is idempotent: the server keeps nothing between calls).
  A restarted replica costs one full resend, to that replica;
- opaque (one channel, e.g. gRPC's round_robin over ``ipv4:a,b,c`` or an L7
  proxy): the client learns which replica answered from the ``berth-replica``
  trailer (or the ErrorInfo metadata) and sends deltas from a generation every
  replica it knows has confirmed (``ReplicaTracker``).

Channels load the client contract, ``protos/service_config.json`` (per-method
deadlines, retries of UNAVAILABLE, message sizes). Beyond it the client:

- sets a deadline on every call (``timeout``, else ``DEFAULT_TIMEOUT_SECONDS``;
  on ScheduleStream as the message's ``timeout_millis``), so a server
  honours it inside a cycle;
- retries a call refused OVERLOADED (RESOURCE_EXHAUSTED: the replica is at its
  in-flight caps) after a jittered backoff, up to ``OVERLOAD_RETRIES`` times,
  and then raises for the caller to back the pod off (never to drop it);
- sends its cluster's token (``ClusterStateLog.token``) in the
  ``berth-caller-token`` metadata of every call: replicas keep its state
  under that caller, out of reach of anyone who only learns its cluster_id;
- sends a full state larger than ``part_bytes`` in parts over UploadState,
  then the request itself as a delta from the uploaded generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
import logging
import os
import random
import secrets
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.rpc.error_details_pb2 import ErrorInfo
from google.rpc.status_pb2 import Status as RpcStatus

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

# Trailing metadata: the replica's generation on STALE_SNAPSHOT (-1: none; the
# protocol's first signal, kept beside the ErrorInfo), and the id a server
# process picks at random when it starts, on every answer.
GENERATION_TRAILER = "berth-replica-generation"
REPLICA_TRAILER = "berth-replica"
# google.rpc.Status, serialised, in the trailers of a failed call.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "berth.dev"
SERVICE_NAME = "berth.v1.SchedulingService"
RPC_NAMES = tuple(m.name for m in pb.DESCRIPTOR.services_by_name["SchedulingService"].methods)

# berth serve --max-message-bytes's default: the contract's largest request
# and response (a full state of 5000 nodes and 50k pods is ~11 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20

# A unary call without a timeout of its own gets this deadline.
DEFAULT_TIMEOUT_SECONDS = 30.0
# The metadata that carries the caller's token (server/identity.py), and the
# environment variable that gives it (else each ClusterStateLog makes one).
TOKEN_METADATA = "berth-caller-token"
TOKEN_ENV = "BERTH_CALLER_TOKEN"
# OVERLOADED answers: retries, and the backoff before each (doubling, jittered).
OVERLOAD_RETRIES = 5
OVERLOAD_BACKOFF_SECONDS = 0.1
OVERLOAD_BACKOFF_MAX_SECONDS = 2.0

# protos/service_config.json, copied into the berth.api package by
# hack/gen-protos.sh (checked there), so an installed package carries it.
SERVICE_CONFIG_RESOURCE = "service_config.json"


def load_service_config(max_message_bytes: int | None = None) -> dict[str, Any]:
    """The client contract: protos/service_config.json as the berth.api
    package carries it, with the message size limits replaced when
    ``max_message_bytes`` is given (a server run with another
    --max-message-bytes)."""
    resource = importlib.resources.files("berth.api") / SERVICE_CONFIG_RESOURCE
    try:
        config: dict[str, Any] = json.loads(resource.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"berth/api/{SERVICE_CONFIG_RESOURCE}: not a readable JSON service config: {exc}"
        ) from exc
    if max_message_bytes is not None:
        for method in config.get("methodConfig", ()):
            for key in ("maxRequestMessageBytes", "maxResponseMessageBytes"):
                if key in method:
                    method[key] = max_message_bytes
    return config


def channel_options(
    *, retries: bool = True, max_message_bytes: int | None = None
) -> list[tuple[str, Any]]:
    """Channel arguments that load the client contract. ``retries`` turns on
    gRPC's own retries of UNAVAILABLE (the service config's retryPolicy): on
    for a channel that load balances, off for a channel to one replica whose
    calls the client moves to another replica itself."""
    limit = max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES
    return [
        ("grpc.service_config", json.dumps(load_service_config(max_message_bytes))),
        # The contract above, not whatever a DNS TXT record says.
        ("grpc.service_config_disable_resolution", 1),
        ("grpc.enable_retries", 1 if retries else 0),
        # gRPC applies the smaller of these and the service config's limits.
        ("grpc.max_send_message_length", limit),
        ("grpc.max_receive_message_length", limit),
        # A replica restarted on its address is reached again within seconds,
        # not after gRPC's default reconnect backoff of up to 2 minutes.
        ("grpc.initial_reconnect_backoff_ms", 250),
        ("grpc.min_reconnect_backoff_ms", 250),
        ("grpc.max_reconnect_backoff_ms", 5000),
    ]


# Kept for callers that build their own channel.
CHANNEL_OPTIONS = tuple(channel_options())


def open_channel(
    address: str,
    *,
    retries: bool = True,
    max_message_bytes: int | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    **kwargs: Any,
) -> grpc.aio.Channel:
    """A channel to a plugin server (or a load-balanced set of them) that
    follows the client contract and can carry a full state."""
    options = channel_options(retries=retries, max_message_bytes=max_message_bytes)
    options += list(kwargs.pop("options", ()))
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=options, **kwargs)
    return grpc.aio.insecure_channel(address, options=options, **kwargs)


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
        self.nodes[node.name] = node
        self._pending_nodes[node.name] = node

    def delete_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self._pending_nodes[name] = None

    def upsert_pod(self, pod: cpb.Pod) -> None:
        self.pods[pod.uid] = pod
        self._pending_pods[pod.uid] = pod

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

    def full_state(self) -> cpb.ClusterState:
        if self.generation == 0:
            self.commit()
        st = cpb.ClusterState(
            cluster_id=self.cluster_id,
            generation=self.generation,
            full=True,
            incarnation=self.incarnation,
        )
        st.delta.upsert_nodes.extend(self.nodes.values())
        st.delta.upsert_pods.extend(self.pods.values())
        st.delta.upsert_objects.extend(self.objects.values())
        return st

    def full_parts(self, part_bytes: int) -> list[cpb.ClusterState]:
        """The full state as UploadState parts of about ``part_bytes`` each
        (an object larger than that alone in its part)."""
        if self.generation == 0:
            self.commit()
        parts: list[cpb.ClusterState] = []
        part: cpb.ClusterState | None = None
        size = 0
        groups: list[tuple[str, Iterable[Any]]] = [
            ("upsert_nodes", self.nodes.values()),
            ("upsert_pods", self.pods.values()),
            ("upsert_objects", self.objects.values()),
        ]
        for name, items in groups:
            for item in items:
                n = item.ByteSize()
                if part is None or (size and size + n > part_bytes):
                    part = cpb.ClusterState(
                        cluster_id=self.cluster_id,
                        generation=self.generation,
                        full=True,
                        incarnation=self.incarnation,
                    )
                    parts.append(part)
                    size = 0
                getattr(part.delta, name).append(item)
                size += n
        if not parts:
            parts.append(self.full_state())
        return parts

    def state_since(self, base: int) -> cpb.ClusterState:
        """The message that takes a replica at ``base`` to the current
        generation: a merged delta, or the full state when ``base`` is
        unknown (<= 0) or older than the log reaches."""
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
            return self.full_state()
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

    def pinned_state(self, base: int, generation: int) -> cpb.ClusterState | None:
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
            st = self.state_since(base)
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


R = TypeVar("R")


def _schedule_request(
    profile: str,
    pod: cpb.Pod,
    start_index: int,
    explain: bool,
    reserve_and_permit: bool,
    seed: int,
) -> Callable[[cpb.ClusterState], pb.ScheduleRequest]:
    def build(st: cpb.ClusterState) -> pb.ScheduleRequest:
        return pb.ScheduleRequest(
            profile=profile,
            state=st,
            pod=pod,
            start_index=start_index,
            explain=explain,
            reserve_and_permit=reserve_and_permit,
            seed=seed,
        )

    return build


_CODES = {c.value[0]: c for c in grpc.StatusCode}

# ErrorReason names as sent (protos/berth/v1/scheduling.proto, ErrorReason).
STALE_SNAPSHOT = "STALE_SNAPSHOT"
SNAPSHOT_PASSED = "SNAPSHOT_PASSED"
BATCH_TOO_LARGE = "BATCH_TOO_LARGE"


def _metadata_value(metadata: Iterable[tuple[str, str | bytes]] | None, key: str) -> str | None:
    for k, v in metadata or ():
        if k == key:
            return v.decode(errors="replace") if isinstance(v, bytes) else v
    return None


def _int_or(value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """Why a replica refused a request: the google.rpc.ErrorInfo of the gRPC
    status (domain berth.dev), or on a stream the RequestError; the older
    ``berth-replica-generation`` trailer when a server sends no ErrorInfo."""

    code: grpc.StatusCode
    message: str
    # An ErrorReason name without its prefix ("STALE_SNAPSHOT"); "" for none.
    reason: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    # The replica's generation of the cluster (-1: none or not said).
    replica_generation: int = -1
    # The id of the server process that answered ("": not said).
    replica: str = ""

    @property
    def stale(self) -> bool:
        return self.reason == STALE_SNAPSHOT

    @classmethod
    def from_rpc_error(cls, err: grpc.aio.AioRpcError) -> ErrorDetail:
        trailers = err.trailing_metadata() or ()
        reason, metadata = "", {}
        raw = None
        for k, v in trailers:
            if k == STATUS_DETAILS_KEY:
                raw = v
        if isinstance(raw, bytes):
            status = RpcStatus()
            with contextlib.suppress(DecodeError):
                status.ParseFromString(raw)
            for detail in status.details:
                info = ErrorInfo()
                # Unpack is False for a detail of another type.
                if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                    reason, metadata = info.reason, dict(info.metadata)
                    break
        old_generation = _metadata_value(trailers, GENERATION_TRAILER)
        if (
            not reason
            and old_generation is not None
            and err.code() == grpc.StatusCode.FAILED_PRECONDITION
        ):
            # A server from before ErrorInfo: FAILED_PRECONDITION with this
            # trailer was always a stale snapshot.
            reason = STALE_SNAPSHOT
        generation = _int_or(metadata.get("replica_generation"), _int_or(old_generation, -1))
        replica = metadata.get("replica") or _metadata_value(trailers, REPLICA_TRAILER) or ""
        return cls(
            err.code(),
            err.details() or "",
            reason,
            metadata,
            generation,
            replica,
        )

    @classmethod
    def from_request_error(cls, err: pb.RequestError) -> ErrorDetail:
        code = _CODES.get(err.grpc_code, grpc.StatusCode.UNKNOWN)
        reason = err.reason
        if not reason and code == grpc.StatusCode.FAILED_PRECONDITION:
            reason = STALE_SNAPSHOT
        generation = err.replica_generation
        if reason not in (STALE_SNAPSHOT, SNAPSHOT_PASSED):
            generation = -1
        elif "replica_generation" in err.metadata:
            generation = _int_or(err.metadata["replica_generation"], generation)
        return cls(
            code,
            err.message,
            reason,
            dict(err.metadata),
            generation,
            err.metadata.get("replica", ""),
        )


OVERLOADED = "OVERLOADED"


def _overloaded(err: grpc.aio.AioRpcError | RequestRefused) -> bool:
    """Was the call refused because the replica was at its in-flight caps
    (RESOURCE_EXHAUSTED, reason OVERLOADED)? Nothing of it was done."""
    if isinstance(err, RequestRefused):
        return err.detail.reason == OVERLOADED
    if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return False
    return ErrorDetail.from_rpc_error(err).reason == OVERLOADED


def replica_generation(err: grpc.aio.AioRpcError) -> int:
    """The generation a replica reported in a STALE_SNAPSHOT answer (-1: none)."""
    return ErrorDetail.from_rpc_error(err).replica_generation


class RequestRefused(Exception):
    """The server refused a streamed request (what the unary RPC would have
    raised as a gRPC error)."""

    def __init__(
        self, code: grpc.StatusCode, message: str, detail: ErrorDetail | None = None
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.detail = detail or ErrorDetail(code, message)


class SnapshotPassed(Exception):
    """A pinned request cannot be served at its generation: the replica
    already holds a later one (ABORTED, SNAPSHOT_PASSED), or the caller can no
    longer build that generation. Restart the cycle at the current one."""

    def __init__(self, generation: int, replica_generation: int, message: str = "") -> None:
        super().__init__(
            message
            or f"cycle pinned to generation {generation}, but the replica holds "
            f"{replica_generation}: restart the cycle"
        )
        self.generation = generation
        self.replica_generation = replica_generation


# -- what each replica confirmed --------------------------------------------------


@dataclass(slots=True)
class _Replica:
    # The generation it confirmed holding; -1 when it needs a full state.
    generation: int
    last_seen: float
    # ReplicaTracker._answers when it last answered.
    last_answer: int


class ReplicaTracker:
    """The generations the replicas behind one channel confirmed, by replica
    id (the ``berth-replica`` trailer; "" for a server that sends none).

    ``base()`` is the generation to send a delta from: the lowest any known
    replica confirmed, so whichever replica the channel picks can apply it;
    0 (a full state) while a known replica needs one, until it confirms.
    A replica that has not answered for a while (``forget_answers`` answers by
    others, or ``forget_seconds``) is forgotten, so a replica gone for good
    does not hold the base back; one that returns is at worst resent to from
    its own generation.

    ``exclusive``: the channel reaches one replica at a time (one address):
    a new id there replaces the previous one (the process was restarted).
    """

    def __init__(
        self,
        *,
        exclusive: bool = False,
        forget_answers: int = 64,
        forget_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exclusive = exclusive
        self.forget_answers = forget_answers
        self.forget_seconds = forget_seconds
        self.clock = clock
        self.replicas: dict[str, _Replica] = {}
        self._answers = 0
        self._latest = 0.0
        # The base while no replica is known: 0, a full state.
        self._assumed = 0

    def base(self, *, optimistic: bool = False) -> int:
        """``optimistic``: leave out replicas that need a full state, for a
        request whose resend goes to the same replica (a stream): if it lands
        on one of them, that one answers STALE_SNAPSHOT and gets its full
        state, and nobody else does."""
        self._forget()
        known = [r.generation for r in self.replicas.values()]
        if optimistic:
            known = [g for g in known if g > 0]
        if not known:
            return self._assumed
        return max(0, min(known))

    def assume(self, generation: int) -> None:
        """Treat every known replica (and the next unknown one) as holding
        ``generation``; a wrong guess costs one STALE_SNAPSHOT answer."""
        self._assumed = generation
        for r in self.replicas.values():
            r.generation = generation

    def confirmed(self, replica: str, generation: int) -> bool:
        """``replica`` answered a request at ``generation``. True when the
        replica is new to this tracker."""
        r, new = self._seen(replica)
        r.generation = max(r.generation, generation)
        return new

    def stale(self, replica: str, have: int) -> bool:
        """``replica`` answered STALE_SNAPSHOT holding ``have`` (-1: nothing).
        True when the replica is new to this tracker."""
        r, new = self._seen(replica)
        r.generation = have if have > 0 else -1
        return new

    def needs_full(self) -> list[str]:
        return [k for k, r in self.replicas.items() if r.generation <= 0]

    def _seen(self, replica: str) -> tuple[_Replica, bool]:
        self._answers += 1
        now = self.clock()
        self._latest = max(self._latest, now)
        r = self.replicas.get(replica)
        new = r is None
        if r is None:
            if self.exclusive:
                self.replicas.clear()
            r = self.replicas[replica] = _Replica(-1, now, self._answers)
        r.last_seen = now
        r.last_answer = self._answers
        return r, new

    def _forget(self) -> None:
        if len(self.replicas) < 2:
            return
        # A replica needing a full state is waited for less long: with round
        # robin it answers again within one round.
        patience = max(self.forget_answers, 4 * len(self.replicas))
        patience_full = max(4, 2 * len(self.replicas))
        for key, r in list(self.replicas.items()):
            quiet = self._answers - r.last_answer
            if (
                quiet > (patience_full if r.generation <= 0 else patience)
                or self._latest - r.last_seen > self.forget_seconds
            ):
                log.info(
                    "replica %s not heard from in %d answers / %.0fs: forgotten",
                    key or "(unnamed)",
                    quiet,
                    self._latest - r.last_seen,
                )
                del self.replicas[key]


# -- where the replicas are -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed ``--plugin-server`` value."""

    # "dns": resolve host:port to every replica's address (a headless Service);
    # "list": these addresses; "single": one gRPC target, balanced by gRPC or a proxy.
    kind: Literal["dns", "list", "single"]
    text: str
    addresses: tuple[str, ...] = ()
    host: str = ""
    port: int = 0


def _check_host_port(text: str, entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"plugin server target {text!r}: {entry!r} is not host:port (e.g. 10.0.0.5:50051)"
        )
    return host, int(port)


def parse_target(text: str) -> Target:
    """``dns:///name:port`` (or ``dns://authority/name:port``), a list
    ``host:port,host:port``, or any other gRPC target (``host:port``,
    ``ipv4:a:p,b:p``, ``unix:...``) used as one channel."""
    text = text.strip()
    if not text:
        raise ValueError("plugin server target: must not be empty")
    if text.startswith("dns:"):
        rest = text[len("dns:") :]
        if rest.startswith("//"):
            # dns://[authority]/name:port: the authority (a DNS server) is
            # gRPC's; the system resolver is used here.
            rest = rest[2:].partition("/")[2]
        host, port = _check_host_port(text, rest)
        return Target("dns", text, host=host.strip("[]"), port=port)
    if "," in text and ":" in text.split(",", 1)[0] and "://" not in text:
        first = text.split(",", 1)[0]
        if first.partition(":")[0] in ("ipv4", "ipv6", "unix", "unix-abstract", "vsock"):
            return Target("single", text, addresses=(text,))
        entries = tuple(e.strip() for e in text.split(",") if e.strip())
        for e in entries:
            _check_host_port(text, e)
        return Target("list", text, addresses=entries)
    return Target("single", text, addresses=(text,))


Resolve = Callable[[str, int], Awaitable[list[str]]]


async def resolve_dns(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, as ``ip:port`` (``[ip]:port`` for IPv6)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[str] = []
    for family, _, _, _, sockaddr in infos:
        ip = str(sockaddr[0])
        addr = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        if addr not in out:
            out.append(addr)
    return sorted(out)


async def _stream_failure(call: Any, exc: BaseException, written: bool) -> grpc.aio.AioRpcError:
    """The error a broken ScheduleStream ends with. A write to a stream the
    server has already ended fails locally (InvalidStateError, or gRPC core's
    INTERNAL "execute_batch" error) before the request left: that is the
    replica gone (UNAVAILABLE), and another may take the request. Otherwise
    the stream's own status says why it ended."""
    code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else grpc.StatusCode.UNKNOWN
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        assert isinstance(exc, grpc.aio.AioRpcError)
        return exc
    if not written:
        return grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(),
            f"ScheduleStream ended before the request was sent ({code.name}: {exc})",
        )
    try:
        async with asyncio.timeout(1.0):
            final = await call.code()
            details = await call.details()
    except (TimeoutError, grpc.aio.AioRpcError):
        final, details = grpc.StatusCode.UNAVAILABLE, "stream broken"
    if final in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.OK):
        final = grpc.StatusCode.UNAVAILABLE
    elif isinstance(exc, grpc.aio.AioRpcError) and code != grpc.StatusCode.INTERNAL:
        return exc
    return grpc.aio.AioRpcError(
        final,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        details or f"stream closed by the server ({exc})",
    )


class Endpoint:
    """One channel: to one replica's address (endpoint-aware), or to whatever
    the channel balances over (opaque)."""

    def __init__(
        self, address: str, stub: Any, channel: grpc.aio.Channel | None, tracker: ReplicaTracker
    ) -> None:
        self.address = address
        self.stub = stub
        self.channel = channel
        self.tracker = tracker
        # ScheduleStream: one stream per endpoint, one exchange at a time.
        self.stream: Any = None
        self.stream_acked = 0
        self.stream_replica = ""
        self.stream_lock = asyncio.Lock()
        # Held while a full state is in flight on this endpoint.
        self.full_lock = asyncio.Lock()
        # The replica id last seen here, and every id seen here.
        self.replica = ""
        self.seen: set[str] = set()
        self.down_until = 0.0
        self.backoff = 0.0
        self.calls = 0
        self.full_sends = 0
        self.resends = 0
        self.failures = 0


@dataclass(frozen=True, slots=True)
class EndpointStats:
    address: str
    replica: str
    healthy: bool
    calls: int
    full_sends: int
    resends: int
    failures: int


# What the client reports to ``on_event``: (kind, endpoint address, replica id).
# Kinds: "full" (a full state sent), "resend" (a STALE_SNAPSHOT answered),
# "failover" (an endpoint unavailable, the call moved on), "replica" (a replica
# id seen for the first time at an endpoint).
EventHook = Callable[[str, str, str], None]

Mode = Literal["auto", "endpoints", "opaque"]


class SchedulingClient:
    """Async client: the cluster state log, and the channels to the replicas.

    ``SchedulingClient(channel, state)`` uses one channel as given (opaque:
    whatever it balances over, replicas told apart by their id);
    ``SchedulingClient.connect(target, state)`` opens the channels itself,
    endpoint-aware for ``dns:///name:port`` and ``host:port,host:port``.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel | None,
        state: ClusterStateLog,
        timeout: float | None = 30.0,
        stub: Any = None,
        *,
        address: str = "",
        on_event: EventHook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``stub`` replaces the gRPC stub over ``channel`` (the transport
        seam: the shim passes an in-process stub that calls the service
        object directly)."""
        self.state = state
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT_SECONDS
        self.metadata: tuple[tuple[str, str], ...] = ((TOKEN_METADATA, state.token),)
        # A full state larger than this goes over UploadState in parts.
        self.part_bytes = DEFAULT_MAX_MESSAGE_BYTES // 2
        self.overloads = 0
        self.uploads = 0
        self.on_event = on_event
        self.clock = clock
        self.target: Target | None = None
        self.resyncs = 0
        self.full_sends = 0
        self.failovers = 0
        self.full_sends_by_replica: Counter[str] = Counter()
        self._endpoints: list[Endpoint] = []
        self._next = 0
        self._failover = False
        self._owned: list[grpc.aio.Channel] = []
        self._closing: set[asyncio.Task[None]] = set()
        # Endpoint-aware: how channels are made and addresses found.
        self._make_endpoint: Callable[[str], tuple[Any, grpc.aio.Channel | None]] | None = None
        self._resolve: Resolve | None = None
        self._resolve_every = 30.0
        self._resolved_at = -1e9
        if channel is None and stub is None:
            return  # connect() fills the endpoints
        if stub is None:
            assert channel is not None
            stub = pb_grpc.SchedulingServiceStub(channel)
        self._endpoints.append(
            Endpoint(address or "channel", stub, channel, ReplicaTracker(clock=clock))
        )

    @classmethod
    def connect(
        cls,
        target: str,
        state: ClusterStateLog,
        *,
        timeout: float | None = 30.0,
        mode: Mode = "auto",
        interceptors: Sequence[Any] = (),
        credentials: grpc.ChannelCredentials | None = None,
        tls_name: str | None = None,
        max_message_bytes: int | None = None,
        resolve_every: float = 30.0,
        resolve: Resolve | None = None,
        on_event: EventHook | None = None,
        clock: Callable[[], float] = time.monotonic,
        make_stub: Callable[[str], Any] | None = None,
    ) -> SchedulingClient:
        """A client for ``target`` (see ``parse_target``). ``mode``: "auto"
        is endpoint-aware for a dns:/// target or a list and opaque for
        anything else; "endpoints" resolves a plain host:port too; "opaque"
        uses one channel whatever the target. ``make_stub``: a stub per
        address instead of gRPC channels (a transport of one's own, tests).
        ``credentials``: TLS (berth.tls.client), the same for every replica's
        channel; ``tls_name``: the name the servers' certificates must carry
        (default: the target's host; for a dns:/// target that name, also on
        the channels to the addresses it resolves to)."""
        spec = parse_target(target)
        client = cls(None, state, timeout, on_event=on_event, clock=clock)
        if max_message_bytes:
            client.part_bytes = max_message_bytes // 2
        client.target = spec
        name_override: list[str] = []

        def make(address: str, retries: bool) -> tuple[Any, grpc.aio.Channel | None]:
            if make_stub is not None:
                return make_stub(address), None
            channel = open_channel(
                address,
                retries=retries,
                max_message_bytes=max_message_bytes,
                credentials=credentials,
                interceptors=list(interceptors) or None,
                options=[("grpc.ssl_target_name_override", n) for n in name_override],
            )
            client._owned.append(channel)
            return pb_grpc.SchedulingServiceStub(channel), channel

        if credentials is not None and tls_name:
            name_override.append(tls_name)
        if mode == "opaque" or (mode == "auto" and spec.kind == "single"):
            if spec.kind == "list":
                raise ValueError(
                    f"plugin server target {target!r}: one channel takes one gRPC target; "
                    f"for gRPC's own balancing over several addresses write "
                    f"ipv4:{spec.addresses[0]},..."
                )
            stub, channel = make(spec.text, True)
            client._endpoints.append(
                Endpoint(spec.text, stub, channel, ReplicaTracker(clock=clock))
            )
            log.info("plugin servers: %s, one channel (replicas told apart by id)", spec.text)
            return client
        if spec.kind == "single":
            host, port = _check_host_port(target, spec.text)
            spec = Target("dns", target, host=host.strip("[]"), port=port)
            client.target = spec
        if credentials is not None and not name_override and spec.kind == "dns":
            # Replicas are dialled by IP: verify the name that was resolved.
            name_override.append(spec.host)
        client._failover = True
        client._make_endpoint = lambda address: make(address, False)
        client._resolve_every = resolve_every
        if spec.kind == "dns":
            client._resolve = resolve or resolve_dns
        else:
            client._set_endpoints(list(spec.addresses))
            client._resolved_at = float("inf")  # a fixed list
        return client

    # -- compatibility with the one-channel client ------------------------------

    @property
    def stub(self) -> Any:
        if not self._endpoints:
            raise RuntimeError("no plugin server endpoint yet; call a method first")
        return self._endpoints[0].stub

    @property
    def acked(self) -> int:
        """The generation a delta would start from (the lowest over endpoints)."""
        return min((e.tracker.base() for e in self._endpoints), default=0)

    @acked.setter
    def acked(self, generation: int) -> None:
        for e in self._endpoints:
            e.tracker.assume(generation)

    @property
    def _stream(self) -> Any:
        return self._endpoints[0].stream if self._endpoints else None

    @_stream.setter
    def _stream(self, value: Any) -> None:
        for e in self._endpoints:
            e.stream = value

    # -- endpoints ------------------------------------------------------------------

    @property
    def endpoints(self) -> list[Endpoint]:
        return list(self._endpoints)

    def stats(self) -> list[EndpointStats]:
        now = self.clock()
        return [
            EndpointStats(
                e.address,
                e.replica,
                e.down_until <= now,
                e.calls,
                e.full_sends,
                e.resends,
                e.failures,
            )
            for e in self._endpoints
        ]

    def _set_endpoints(self, addresses: list[str]) -> None:
        assert self._make_endpoint is not None
        have = {e.address: e for e in self._endpoints}
        added = [a for a in addresses if a not in have]
        removed = [e for e in self._endpoints if e.address not in addresses]
        if not added and not removed:
            return
        kept = [e for e in self._endpoints if e.address in addresses]
        for a in added:
            stub, ch = self._make_endpoint(a)
            kept.append(Endpoint(a, stub, ch, ReplicaTracker(exclusive=True, clock=self.clock)))
        self._endpoints = sorted(kept, key=lambda e: e.address)
        for e in removed:
            self._retire(e)
        assert self.target is not None
        log.info(
            "plugin servers for %s: %s%s%s",
            self.target.text,
            ", ".join(e.address for e in self._endpoints) or "none",
            f"; added {', '.join(added)}" if added and len(added) < len(addresses) else "",
            f"; gone {', '.join(e.address for e in removed)}" if removed else "",
        )

    def _retire(self, e: Endpoint) -> None:
        if e.channel is None:
            return
        if e.channel in self._owned:
            self._owned.remove(e.channel)
        # In-flight calls get a few seconds to finish.
        task = asyncio.get_running_loop().create_task(e.channel.close(grace=5.0))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _refresh(self, *, failed: bool = False) -> None:
        """Resolves the target again when due (every ``resolve_every``
        seconds, and at most once a second after a failure)."""
        if self._resolve is None or self.target is None:
            return
        now = self.clock()
        due = now - self._resolved_at >= (1.0 if failed else self._resolve_every)
        if not due and self._endpoints:
            return
        self._resolved_at = now
        try:
            addresses = await self._resolve(self.target.host, self.target.port)
        except OSError as exc:
            addresses = []
            log.warning("cannot resolve %s: %s", self.target.text, exc)
        if addresses:
            self._set_endpoints(addresses)
        elif not self._endpoints:
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                f"plugin server target {self.target.text}: {self.target.host} resolves to "
                "no address",
            )

    def _pick(self, tried: set[int]) -> Endpoint | None:
        """The next healthy endpoint, round robin; an unhealthy one when
        nothing else is left."""
        n = len(self._endpoints)
        now = self.clock()
        fallback: Endpoint | None = None
        for i in range(n):
            e = self._endpoints[(self._next + i) % n]
            if id(e) in tried:
                continue
            if e.down_until <= now:
                self._next = (self._next + i + 1) % n
                return e
            if fallback is None or e.down_until < fallback.down_until:
                fallback = e
        return fallback

    def _failed(self, e: Endpoint, err: grpc.aio.AioRpcError, others: int) -> None:
        e.failures += 1
        e.backoff = min(max(0.5, e.backoff * 2), 10.0)
        e.down_until = self.clock() + e.backoff
        e.stream = None
        self.failovers += 1
        self._event("failover", e, e.replica)
        log.warning(
            "plugin server %s unavailable (%s); %s",
            e.address,
            err.details() or err.code().name,
            f"trying another of {others}" if others else "no other replica left to try",
        )

    def _answered(self, e: Endpoint) -> None:
        if e.backoff:
            log.info("plugin server %s answers again", e.address)
        e.backoff = 0.0
        e.down_until = 0.0

    def _event(self, kind: str, e: Endpoint, replica: str) -> None:
        if self.on_event is not None:
            self.on_event(kind, e.address, replica)

    def _note_replica(self, e: Endpoint, replica: str) -> None:
        if not replica:
            return
        if replica not in e.seen:
            if len(e.seen) > 1024:
                e.seen.clear()
            e.seen.add(replica)
            if e.tracker.exclusive:
                log.info(
                    "plugin server %s is replica %s%s",
                    e.address,
                    replica,
                    f" (was {e.replica}: restarted)" if e.replica else "",
                )
            else:
                log.info(
                    "plugin servers at %s: replica %s answers (%d seen)",
                    e.address,
                    replica,
                    len(e.seen),
                )
            self._event("replica", e, replica)
        e.replica = replica

    async def _over_endpoints(
        self, fn: Callable[[Endpoint], Awaitable[R]], *, stream: bool = False
    ) -> R:
        """Runs ``fn`` on an endpoint; an UNAVAILABLE answer moves it to the
        next (endpoint-aware: every RPC is idempotent). On one channel gRPC
        retries unary calls itself (the service config) but not a stream that
        broke: ``stream`` reopens it up to twice (the balancer picks a replica
        again)."""
        await self._refresh()
        tried: set[int] = set()
        busy = 0
        reopen = 2 if stream and not self._failover else 0
        while True:
            e = self._pick(tried)
            if e is None:
                raise RuntimeError("no plugin server endpoint")
            if self._failover:
                tried.add(id(e))
            try:
                result = await fn(e)
            except (grpc.aio.AioRpcError, RequestRefused) as err:
                if _overloaded(err) and busy < OVERLOAD_RETRIES:
                    # The replica took nothing of the call: wait, then again
                    # (on the next endpoint, when there are several).
                    delay = min(OVERLOAD_BACKOFF_MAX_SECONDS, OVERLOAD_BACKOFF_SECONDS * 2**busy)
                    busy += 1
                    self.overloads += 1
                    log.info(
                        "plugin server %s overloaded; retrying in %.2fs (%d of %d)",
                        e.address,
                        delay,
                        busy,
                        OVERLOAD_RETRIES,
                    )
                    tried.discard(id(e))
                    await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                    continue
                if isinstance(err, RequestRefused) or err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                if not self._failover:
                    if reopen == 0:
                        raise
                    reopen -= 1
                    log.info("ScheduleStream to %s broke (%s); reopening", e.address, err.details())
                    continue
                left = sum(1 for x in self._endpoints if id(x) not in tried)
                self._failed(e, err, left)
                await self._refresh(failed=True)
                if not any(id(x) not in tried for x in self._endpoints):
                    raise
                continue
            self._answered(e)
            return result

    # -- calls --------------------------------------------------------------------

    def _state(self, base: int, pin: int | None) -> cpb.ClusterState:
        if pin is None:
            return self.state.state_since(base)
        st = self.state.pinned_state(base, pin)
        if st is None:
            raise SnapshotPassed(
                pin,
                base,
                f"cycle pinned to generation {pin} cannot be resent (replicas hold {base}, "
                f"the caller is at {self.state.generation}): restart the cycle",
            )
        return st

    def _sent_full(self, e: Endpoint) -> None:
        """Counts a full state sent; ``full_sends_by_replica`` counts it once
        the replica that got it says who it is."""
        e.full_sends += 1
        self.full_sends += 1
        self._event("full", e, e.replica)

    async def _unary(self, e: Endpoint, method: str, request: Any) -> tuple[Any, str]:
        call = getattr(e.stub, method)(request, timeout=self.timeout, metadata=self.metadata)
        resp = await call
        replica = ""
        trailing = getattr(call, "trailing_metadata", None)
        if trailing is not None:
            replica = _metadata_value(await trailing(), REPLICA_TRAILER) or ""
        return resp, replica

    def _method_name(self, method: str | Callable[..., Any]) -> str:
        if isinstance(method, str):
            name = method
        else:
            # A stub's method (the one-channel client's older calling form).
            name = getattr(method, "__name__", "")
            for e in self._endpoints:
                for rpc in RPC_NAMES:
                    if getattr(e.stub, rpc, None) is method:
                        name = rpc
            path = getattr(method, "_method", None)
            if isinstance(path, bytes):
                name = path.decode().rsplit("/", 1)[-1]
        if name not in RPC_NAMES:
            raise ValueError(f"{method!r} is not a SchedulingService RPC ({', '.join(RPC_NAMES)})")
        return name

    async def call(
        self,
        method: str | Callable[..., Any],
        build: Callable[[cpb.ClusterState], Any],
        *,
        pin: int | None = None,
    ) -> R:
        """Sends ``build(state)`` by RPC ``method`` (its name, e.g.
        "Schedule"; a stub's method is taken too) with the changes since the
        generation the replicas hold; on STALE_SNAPSHOT resends from the
        replica's generation, then in full. ``pin``: serve exactly at this
        generation (SnapshotPassed: restart the cycle)."""
        name = self._method_name(method)
        result: R = await self._over_endpoints(lambda e: self._call_on(e, name, build, pin))
        return result

    async def _call_on(
        self,
        e: Endpoint,
        method: str,
        build: Callable[[cpb.ClusterState], Any],
        pin: int | None,
    ) -> Any:
        e.calls += 1
        async with contextlib.AsyncExitStack() as stack:
            st = self._state(e.tracker.base(), pin)
            if st.full:
                # One full state in flight per endpoint: calls made meanwhile (the
                # shim's binding cycles run concurrently) wait for it and then send
                # what is left, usually a delta.
                await stack.enter_async_context(e.full_lock)
                st = self._state(e.tracker.base(), pin)
            for attempt in range(3):
                if st.full and st.ByteSize() > self.part_bytes:
                    st = await self._upload(e, st, pin)
                if st.full:
                    self._sent_full(e)
                try:
                    resp, replica = await self._unary(e, method, build(st))
                except grpc.aio.AioRpcError as err:
                    detail = ErrorDetail.from_rpc_error(err)
                    self._note_replica(e, detail.replica)
                    if st.full and err.code() != grpc.StatusCode.UNAVAILABLE:
                        self.full_sends_by_replica[detail.replica or e.address] += 1
                    if detail.reason == SNAPSHOT_PASSED:
                        raise SnapshotPassed(st.generation, detail.replica_generation) from err
                    if not detail.stale or st.full or attempt == 2:
                        raise
                    st = self._resend(e, st, detail, attempt, pin)
                    continue
                self._note_replica(e, replica)
                if st.full:
                    self.full_sends_by_replica[replica or e.address] += 1
                e.tracker.confirmed(
                    replica or (e.replica if e.tracker.exclusive else ""), st.generation
                )
                return resp
        raise AssertionError("unreachable")

    async def _upload(self, e: Endpoint, st: cpb.ClusterState, pin: int | None) -> cpb.ClusterState:
        """Sends the full state ``st`` (too large for one message) over
        UploadState in parts; returns what to send with the request then: a
        state at the uploaded generation."""
        parts = self.state.full_parts(self.part_bytes)

        async def each() -> AsyncIterator[pb.UploadStateRequest]:
            for part in parts:
                yield pb.UploadStateRequest(state=part)

        self._sent_full(e)
        self.uploads += 1
        log.info(
            "full state of %.1f MiB too large for one message: uploading it in %d parts to %s",
            st.ByteSize() / 2**20,
            len(parts),
            e.address,
        )
        call = e.stub.UploadState(each(), timeout=self.timeout, metadata=self.metadata)
        resp = await call
        replica = ""
        trailing = getattr(call, "trailing_metadata", None)
        if trailing is not None:
            replica = _metadata_value(await trailing(), REPLICA_TRAILER) or ""
        self._note_replica(e, replica)
        self.full_sends_by_replica[replica or e.address] += 1
        e.tracker.confirmed(replica or (e.replica if e.tracker.exclusive else ""), resp.generation)
        return self._state(resp.generation, pin)

    def _resend(
        self, e: Endpoint, st: cpb.ClusterState, detail: ErrorDetail, attempt: int, pin: int | None
    ) -> cpb.ClusterState:
        have = detail.replica_generation
        e.tracker.stale(detail.replica or (e.replica if e.tracker.exclusive else ""), have)
        self.resyncs += 1
        e.resends += 1
        self._event("resend", e, detail.replica)
        log.info(
            "replica %s at %s behind (at generation %d, want %d): resending %s",
            detail.replica or "?",
            e.address,
            have,
            st.generation,
            "in full" if have <= 0 or attempt > 0 else f"the changes after {have}",
        )
        # A second stale answer (another replica behind an opaque channel):
        # the full state, which any replica takes.
        return self._state(have if attempt == 0 else 0, pin)

    async def unary(self, method: str, request: Any) -> Any:
        """An RPC that carries no cluster state (DescribeProfiles,
        PreEnqueue, QueueSort), with the same failover."""

        async def run(e: Endpoint) -> Any:
            e.calls += 1
            resp, replica = await self._unary(e, method, request)
            self._note_replica(e, replica)
            return resp

        return await self._over_endpoints(run)

    async def schedule(
        self,
        profile: str,
        pod: cpb.Pod,
        *,
        start_index: int = 0,
        explain: bool = False,
        reserve_and_permit: bool = False,
        seed: int = 0,
    ) -> pb.ScheduleResponse:
        build = _schedule_request(profile, pod, start_index, explain, reserve_and_permit, seed)
        resp: pb.ScheduleResponse = await self.call("Schedule", build)
        return resp

    async def schedule_batch(
        self,
        profile: str,
        pods: list[cpb.Pod],
        *,
        start_index: int = 0,
        reserve_and_permit: bool = False,
        seed: int = 0,
    ) -> pb.ScheduleBatchResponse:
        """Several cycles in one round trip (ScheduleBatch). The caller adds the
        placed pods to its state afterwards, like after single cycles."""

        def build(st: cpb.ClusterState) -> pb.ScheduleBatchRequest:
            return pb.ScheduleBatchRequest(
                profile=profile,
                state=st,
                pods=pods,
                start_index=start_index,
                reserve_and_permit=reserve_and_permit,
                seed=seed,
            )

        resp: pb.ScheduleBatchResponse = await self.call("ScheduleBatch", build)
        return resp

    async def schedule_streamed(
        self,
        profile: str,
        pod: cpb.Pod,
        *,
        start_index: int = 0,
        explain: bool = False,
        reserve_and_permit: bool = False,
        seed: int = 0,
    ) -> pb.ScheduleResponse:
        """``schedule`` over the ScheduleStream RPC: one stream per endpoint,
        opened on first use and kept. A refused request raises
        RequestRefused; a broken stream is reopened, on the next endpoint when
        the replica is unavailable."""
        build = _schedule_request(profile, pod, start_index, explain, reserve_and_permit, seed)
        resp: pb.ScheduleResponse = await self._over_endpoints(
            lambda e: self._streamed_on(e, build), stream=True
        )
        return resp

    async def _streamed_on(
        self, e: Endpoint, build: Callable[[cpb.ClusterState], pb.ScheduleRequest]
    ) -> pb.ScheduleResponse:

        def base() -> int:
            # A stream stays on one replica: behind an opaque channel its own
            # confirmations are exact, and a resend reaches the same replica.
            if e.tracker.exclusive:
                return e.tracker.base()
            if e.stream is not None and e.stream_acked > 0:
                return e.stream_acked
            return e.tracker.base(optimistic=True)

        async with e.stream_lock, contextlib.AsyncExitStack() as stack:
            e.calls += 1
            st = self._state(base(), None)
            if st.full:
                await stack.enter_async_context(e.full_lock)
                st = self._state(base(), None)
            for attempt in range(3):
                if st.full and st.ByteSize() > self.part_bytes:
                    st = await self._upload(e, st, None)
                    e.stream_acked = st.generation
                if st.full:
                    self._sent_full(e)
                request = build(st)
                # The stream has no deadline per message: the server takes this one.
                request.timeout_millis = int(self.timeout * 1000)
                resp = await self._exchange(e, request)
                if resp.WhichOneof("result") == "response":
                    break
                detail = ErrorDetail.from_request_error(resp.error)
                if detail.replica:
                    e.stream_replica = detail.replica
                    self._note_replica(e, detail.replica)
                if st.full:
                    self.full_sends_by_replica[e.stream_replica or e.address] += 1
                if detail.reason == SNAPSHOT_PASSED:
                    raise SnapshotPassed(st.generation, detail.replica_generation)
                if not detail.stale or st.full or attempt == 2:
                    raise RequestRefused(detail.code, detail.message, detail)
                st = self._resend(e, st, detail, attempt, None)
            e.stream_acked = st.generation
            if st.full:
                self.full_sends_by_replica[e.stream_replica or e.address] += 1
            replica = e.stream_replica or (e.replica if e.tracker.exclusive else "")
            if replica or e.tracker.exclusive:
                e.tracker.confirmed(replica, st.generation)
            return resp.response

    async def _exchange(
        self, e: Endpoint, request: pb.ScheduleRequest
    ) -> pb.ScheduleStreamResponse:
        while True:
            if e.stream is not None and e.stream.done():
                e.stream = None  # ended while idle (the replica went away or restarted)
            opened = e.stream is None
            if opened:
                e.stream = e.stub.ScheduleStream(metadata=self.metadata)
                e.stream_acked = 0
                e.stream_replica = ""
            call = e.stream
            first = e.stream_acked == 0
            written = False
            try:
                async with asyncio.timeout(self.timeout):
                    await call.write(request)
                    written = True
                    resp = await call.read()
            except TimeoutError:
                e.stream = None
                call.cancel()
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.aio.Metadata(),
                    grpc.aio.Metadata(),
                    f"ScheduleStream: no answer from {e.address} within {self.timeout:g}s",
                ) from None
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
                e.stream = None
                if not written and not opened:
                    # A kept stream that had ended unnoticed: say it again on a new one.
                    continue
                raise await _stream_failure(call, exc, written) from None
            break
        if resp is grpc.aio.EOF:
            e.stream = None
            code = await call.code()
            details = await call.details() or "stream closed by the server"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK):
                # The replica went away between messages: another may answer.
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details
                )
            raise RequestRefused(code, details)
        assert isinstance(resp, pb.ScheduleStreamResponse)
        if first and not e.stream_replica:
            initial = getattr(call, "initial_metadata", None)
            if initial is not None:
                with contextlib.suppress(Exception):
                    e.stream_replica = _metadata_value(await initial(), REPLICA_TRAILER) or ""
                self._note_replica(e, e.stream_replica)
        return resp

    async def close(self) -> None:
        for e in self._endpoints:
            if e.stream is not None:
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    await e.stream.done_writing()
                e.stream = None
        for ch in self._owned:
            await ch.close()
        self._owned = []
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def sync(self) -> pb.SyncResponse:
        resp: pb.SyncResponse = await self.call("Sync", lambda st: pb.SyncRequest(state=st))
        return resp
