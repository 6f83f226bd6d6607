"""The caller's side of the SchedulingService protocol (protos/README.md).

``ClusterStateLog`` owns the truth: the nodes and pods the plugins should see,
numbered by generation, with the recent deltas kept so that a replica that is
a few generations behind is brought forward cheaply. ``SchedulingClient``
sends each request with the changes since the generation the server last
confirmed, and on FAILED_PRECONDITION (the replica is behind or new) resends
from the generation the replica reports, or in full.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc

from berth_api.v1 import cluster_pb2 as cpb
from berth_api.v1 import scheduling_pb2 as pb
from berth_api.v1 import scheduling_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

GENERATION_TRAILER = "berth-replica-generation"


# A full cluster state can be large (5000 nodes is a few MiB); the server has
# its own limit (berth serve --max-message-bytes).
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", 256 * 2**20),
    ("grpc.max_receive_message_length", 256 * 2**20),
)


def open_channel(address: str, **kwargs: Any) -> grpc.aio.Channel:
    """An insecure channel to a plugin server that can carry a full state."""
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS, **kwargs)


class ClusterStateLog:
    """Nodes and pods by generation, with a bounded log of deltas."""

    def __init__(self, cluster_id: str | None = None, keep: int = 512) -> None:
        self.cluster_id = cluster_id or uuid.uuid4().hex
        self.generation = 0
        self.nodes: dict[str, cpb.Node] = {}
        self.pods: dict[str, cpb.Pod] = {}
        self._log: deque[tuple[int, cpb.ClusterDelta]] = deque(maxlen=keep)
        # Pending changes, one entry per object (None: deleted), so an object
        # changed several times before a commit lands in the delta once, in
        # its last state: an upsert then a delete is a delete.
        self._pending_nodes: dict[str, cpb.Node | None] = {}
        self._pending_pods: dict[str, cpb.Pod | None] = {}
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

    @property
    def has_pending(self) -> bool:
        return bool(self._pending_nodes or self._pending_pods)

    def commit(self) -> int:
        """Closes the pending changes into a new generation (if any)."""
        if self._pending_nodes or self._pending_pods:
            d = cpb.ClusterDelta()
            for name, node in self._pending_nodes.items():
                if node is None:
                    d.delete_nodes.append(name)
                else:
                    d.upsert_nodes.append(node)
            for uid, pod in self._pending_pods.items():
                if pod is None:
                    d.delete_pods.append(uid)
                else:
                    d.upsert_pods.append(pod)
            self._pending_nodes = {}
            self._pending_pods = {}
            self.generation += 1
            self._log.append((self.generation, d))
        elif self.generation == 0:
            # An empty cluster is still a state a replica can hold.
            self.generation = 1
            self._log.append((1, cpb.ClusterDelta()))
        return self.generation

    # -- what to send ---------------------------------------------------------

    def full_state(self) -> cpb.ClusterState:
        st = cpb.ClusterState(cluster_id=self.cluster_id, generation=self.generation, full=True)
        st.delta.upsert_nodes.extend(self.nodes.values())
        st.delta.upsert_pods.extend(self.pods.values())
        return st

    def state_since(self, base: int) -> cpb.ClusterState:
        """The message that takes a replica at ``base`` to the current
        generation: a merged delta, or the full state when ``base`` is
        unknown (<= 0) or older than the log reaches."""
        if self.generation == 0:
            self.commit()
        if base == self.generation:
            return cpb.ClusterState(
                cluster_id=self.cluster_id, generation=self.generation, base_generation=base
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
            cluster_id=self.cluster_id, generation=self.generation, base_generation=base
        )
        st.delta.CopyFrom(delta)
        return st

    def _merge(self, base: int) -> cpb.ClusterDelta:
        nodes: dict[str, cpb.Node | None] = {}
        pods: dict[str, cpb.Pod | None] = {}
        newer: list[cpb.ClusterDelta] = []
        for gen, d in reversed(self._log):
            if gen <= base:
                break
            newer.append(d)
        for d in reversed(newer):
            for name in d.delete_nodes:
                nodes[name] = None
            for n in d.upsert_nodes:
                nodes[n.name] = n
            for uid in d.delete_pods:
                pods[uid] = None
            for p in d.upsert_pods:
                pods[p.uid] = p
        out = cpb.ClusterDelta()
        for name, node in nodes.items():
            if node is None:
                out.delete_nodes.append(name)
            else:
                out.upsert_nodes.append(node)
        for uid, pod in pods.items():
            if pod is None:
                out.delete_pods.append(uid)
            else:
                out.upsert_pods.append(pod)
        return out


class _HasState(Protocol):
    state: cpb.ClusterState


R = TypeVar("R")


def replica_generation(err: grpc.aio.AioRpcError) -> int:
    """The generation a replica reported in a FAILED_PRECONDITION answer."""
    for key, value in err.trailing_metadata() or ():
        if key == GENERATION_TRAILER:
            try:
                return int(value)
            except ValueError:
                return -1
    return -1


class RequestRefused(Exception):
    """The server refused a streamed request (what the unary RPC would have
    raised as a gRPC error)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


_CODES = {c.value[0]: c for c in grpc.StatusCode}


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


class SchedulingClient:
    """Async client: one channel, one cluster state log."""

    def __init__(
        self,
        channel: grpc.aio.Channel | None,
        state: ClusterStateLog,
        timeout: float | None = 30.0,
        stub: Any = None,
    ) -> None:
        """``stub`` replaces the gRPC stub over ``channel`` (the transport
        seam: the shim passes an in-process stub that calls the service
        object directly)."""
        self.channel = channel
        if stub is None:
            if channel is None:
                raise ValueError("SchedulingClient needs a channel or a stub")
            stub = pb_grpc.SchedulingServiceStub(channel)
        self.stub = stub
        self.state = state
        self.timeout = timeout
        # The generation the server last confirmed holding.
        self.acked = 0
        self.resyncs = 0
        self._stream: Any = None

    async def call(
        self,
        method: Callable[..., Awaitable[R]],
        build: Callable[[cpb.ClusterState], Any],
    ) -> R:
        """Sends ``build(state)``; on FAILED_PRECONDITION resends once from the
        replica's generation (or in full)."""
        st = self.state.state_since(self.acked)
        try:
            resp = await method(build(st), timeout=self.timeout)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            have = replica_generation(err)
            self.resyncs += 1
            log.info("replica behind (at generation %d, want %d): resending", have, st.generation)
            st = self.state.state_since(have) if have > 0 else self.state.full_state()
            resp = await method(build(st), timeout=self.timeout)
        self.acked = max(self.acked, st.generation)
        return resp

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
        return await self.call(self.stub.Schedule, build)

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

        return await self.call(self.stub.ScheduleBatch, build)

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
        """``schedule`` over the ScheduleStream RPC: one stream is opened on
        first use and kept. A refused request raises RequestRefused; a broken
        stream raises grpc.aio.AioRpcError and the next call opens a new one."""
        build = _schedule_request(profile, pod, start_index, explain, reserve_and_permit, seed)
        st = self.state.state_since(self.acked)
        resp = await self._exchange(build(st))
        if (
            resp.WhichOneof("result") == "error"
            and resp.error.grpc_code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        ):
            have = resp.error.replica_generation
            self.resyncs += 1
            log.info("replica behind (at generation %d, want %d): resending", have, st.generation)
            st = self.state.state_since(have) if have > 0 else self.state.full_state()
            resp = await self._exchange(build(st))
        if resp.WhichOneof("result") != "response":
            raise RequestRefused(
                _CODES.get(resp.error.grpc_code, grpc.StatusCode.UNKNOWN), resp.error.message
            )
        self.acked = max(self.acked, st.generation)
        return resp.response

    async def _exchange(self, request: pb.ScheduleRequest) -> pb.ScheduleStreamResponse:
        if self._stream is None:
            self._stream = self.stub.ScheduleStream()
        call = self._stream
        try:
            await call.write(request)
            resp = await call.read()
        except grpc.aio.AioRpcError:
            self._stream = None
            raise
        if resp is grpc.aio.EOF:
            self._stream = None
            code = await call.code()
            raise RequestRefused(code, await call.details() or "stream closed by the server")
        assert isinstance(resp, pb.ScheduleStreamResponse)
        return resp

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.done_writing()
            self._stream = None

    async def sync(self) -> pb.SyncResponse:
        return await self.call(self.stub.Sync, lambda st: pb.SyncRequest(state=st))
