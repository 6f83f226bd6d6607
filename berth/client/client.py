"""``SchedulingClient``: sends each request with the changes since a generation
the replica that answers it holds (protos/README.md, "Client contract").

On STALE_SNAPSHOT (FAILED_PRECONDITION: the replica is behind or new) it
resends from the generation the replica reports, or in full. Every replica
has a generation of its own, so the client keeps them apart in one of two
ways:

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

Beyond the channel's service config (berth.client.channel) the client:

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
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import grpc
from google.protobuf.message_factory import GetMessageClass

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.client.channel import DEFAULT_MAX_MESSAGE_BYTES, RPC_NAMES, open_channel
from berth.client.endpoints import (
    Endpoint,
    EndpointPool,
    EndpointStats,
    EventHook,
    Resolve,
    Target,
    check_host_port,
    parse_target,
    resolve_dns,
)
from berth.client.errors import (
    REPLICA_TRAILER,
    SNAPSHOT_PASSED,
    ErrorDetail,
    RequestRefused,
    SnapshotPassed,
    metadata_value,
    overloaded,
)
from berth.client.replicas import ReplicaTracker
from berth.client.statelog import ClusterStateLog

# The package's logger: every line of the client names berth.client.
log = logging.getLogger("berth.client")

# A unary call without a timeout of its own gets this deadline.
DEFAULT_TIMEOUT_SECONDS = 30.0
# The metadata that carries the caller's token (server/identity.py).
TOKEN_METADATA = "berth-caller-token"
# OVERLOADED answers: retries, and the backoff before each (doubling, jittered).
OVERLOAD_RETRIES = 5
OVERLOAD_BACKOFF_SECONDS = 0.1
OVERLOAD_BACKOFF_MAX_SECONDS = 2.0

R = TypeVar("R")


class EncodedRequest:
    """A request already in its wire bytes (``ClusterStateLog.encode_full``),
    which the stubs of ``encoded_stub`` send as they are."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _serialize(request: Any) -> bytes:
    if type(request) is EncodedRequest:
        return request.data
    data: bytes = request.SerializeToString()
    return data


class EncodingStub(pb_grpc.SchedulingServiceStub):
    """A SchedulingService stub whose methods that carry a cluster state also
    take an ``EncodedRequest`` (``encoded_stub`` makes one)."""


def encoded_stub(channel: grpc.aio.Channel) -> Any:
    """The SchedulingService stub, except that the methods whose request
    carries a cluster state also take an ``EncodedRequest``: a full state is
    sent without copying its records into the request first. Other callers'
    stubs (a test's, ``Client(stub=...)``) get requests as messages."""
    stub: Any = EncodingStub(channel)
    service = pb.DESCRIPTOR.services_by_name["SchedulingService"]
    for m in service.methods:
        state = m.input_type.fields_by_name.get("state")
        if state is None or state.message_type is not cpb.ClusterState.DESCRIPTOR:
            continue
        if m.client_streaming and m.server_streaming:
            make = channel.stream_stream
        elif m.client_streaming:
            make = channel.stream_unary
        elif m.server_streaming:
            make = channel.unary_stream
        else:
            make = channel.unary_unary
        setattr(
            stub,
            m.name,
            make(
                f"/{service.full_name}/{m.name}",
                request_serializer=_serialize,
                response_deserializer=GetMessageClass(m.output_type).FromString,
                _registered_method=True,
            ),
        )
    return stub


def _schedule_request(
    profile: str,
    pod: cpb.Pod,
    start_index: int,
    explain: bool,
    reserve_and_permit: bool,
    seed: int,
    cycle: int = 0,
    group_rejected: bool = False,
    preemption_candidates: bool = False,
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
            cycle=cycle,
            group_rejected=group_rejected,
            preemption_candidates=preemption_candidates,
        )

    return build


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
        self.resyncs = 0
        self.full_sends = 0
        self.full_sends_by_replica: Counter[str] = Counter()
        self._pool = EndpointPool(clock=clock, on_event=on_event)
        if channel is None and stub is None:
            return  # connect() fills the endpoints
        if stub is None:
            assert channel is not None
            stub = encoded_stub(channel)
        self._pool.endpoints.append(
            Endpoint(address or "channel", stub, channel, ReplicaTracker(clock=clock))
        )

    @property
    def target(self) -> Target | None:
        """The parsed target of ``connect`` (None for a channel as given)."""
        return self._pool.target

    @property
    def on_event(self) -> EventHook | None:
        return self._pool.on_event

    @property
    def clock(self) -> Callable[[], float]:
        return self._pool.clock

    @property
    def failovers(self) -> int:
        """Calls moved to another endpoint because theirs was unavailable."""
        return self._pool.failovers

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
        ``credentials``: TLS (berth.client.tls), the same for every replica's
        channel; ``tls_name``: the name the servers' certificates must carry
        (default: the target's host; for a dns:/// target that name, also on
        the channels to the addresses it resolves to)."""
        spec = parse_target(target)
        client = cls(None, state, timeout, on_event=on_event, clock=clock)
        if max_message_bytes:
            client.part_bytes = max_message_bytes // 2
        client._pool.target = spec
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
            client._pool.owned.append(channel)
            return encoded_stub(channel), channel

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
            client._pool.endpoints.append(
                Endpoint(spec.text, stub, channel, ReplicaTracker(clock=clock))
            )
            log.info("plugin servers: %s, one channel (replicas told apart by id)", spec.text)
            return client
        if spec.kind == "single":
            host, port = check_host_port(target, spec.text)
            spec = Target("dns", target, host=host.strip("[]"), port=port)
            client._pool.target = spec
        if credentials is not None and not name_override and spec.kind == "dns":
            # Replicas are dialled by IP: verify the name that was resolved.
            name_override.append(spec.host)
        client._pool.failover = True
        client._pool.make_endpoint = lambda address: make(address, False)
        client._pool.resolve_every = resolve_every
        if spec.kind == "dns":
            client._pool.resolve = resolve or resolve_dns
        else:
            client._pool.set_addresses(list(spec.addresses))
            client._pool.resolved_at = float("inf")  # a fixed list
        return client

    # -- as one channel: the first endpoint's stub, the lowest acknowledged generation

    @property
    def stub(self) -> Any:
        if not self._pool.endpoints:
            raise RuntimeError("no plugin server endpoint yet; call a method first")
        return self._pool.endpoints[0].stub

    @property
    def acked(self) -> int:
        """The generation a delta would start from (the lowest over endpoints)."""
        return min((e.tracker.base() for e in self._pool.endpoints), default=0)

    @acked.setter
    def acked(self, generation: int) -> None:
        for e in self._pool.endpoints:
            e.tracker.assume(generation)

    @property
    def _stream(self) -> Any:
        return self._pool.endpoints[0].stream if self._pool.endpoints else None

    @_stream.setter
    def _stream(self, value: Any) -> None:
        for e in self._pool.endpoints:
            e.stream = value

    # -- endpoints ------------------------------------------------------------------

    @property
    def endpoints(self) -> list[Endpoint]:
        return list(self._pool.endpoints)

    def stats(self) -> list[EndpointStats]:
        return self._pool.stats()

    async def _over_endpoints(
        self, fn: Callable[[Endpoint], Awaitable[R]], *, stream: bool = False
    ) -> R:
        """Runs ``fn`` on an endpoint; an UNAVAILABLE answer moves it to the
        next (endpoint-aware: every RPC is idempotent). On one channel gRPC
        retries unary calls itself (the service config) but not a stream that
        broke: ``stream`` reopens it up to twice (the balancer picks a replica
        again)."""
        await self._pool.refresh()
        tried: set[int] = set()
        busy = 0
        reopen = 2 if stream and not self._pool.failover else 0
        while True:
            e = self._pool.pick(tried)
            if e is None:
                raise RuntimeError("no plugin server endpoint")
            if self._pool.failover:
                tried.add(id(e))
            try:
                result = await fn(e)
            except (grpc.aio.AioRpcError, RequestRefused) as err:
                if overloaded(err) and busy < OVERLOAD_RETRIES:
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
                if not self._pool.failover:
                    if reopen == 0:
                        raise
                    reopen -= 1
                    log.info("ScheduleStream to %s broke (%s); reopening", e.address, err.details())
                    continue
                left = sum(1 for x in self._pool.endpoints if id(x) not in tried)
                self._pool.unavailable(e, err, left)
                await self._pool.refresh(failed=True)
                if not any(id(x) not in tried for x in self._pool.endpoints):
                    raise
                continue
            self._pool.answered(e)
            return result

    # -- calls --------------------------------------------------------------------

    def _state(self, base: int, pin: int | None) -> cpb.ClusterState:
        """What to send a replica at ``base``; a full state comes hollow
        (ClusterStateLog.full_state): ``_request`` fills it in the request,
        so the records are copied once, not into a state and then again."""
        if pin is None:
            return self.state.state_since(base, hollow=True)
        st = self.state.pinned_state(base, pin, hollow=True)
        if st is None:
            raise SnapshotPassed(
                pin,
                base,
                f"cycle pinned to generation {pin} cannot be resent (replicas hold {base}, "
                f"the caller is at {self.state.generation}): restart the cycle",
            )
        return st

    def _size(self, st: cpb.ClusterState) -> int:
        """The bytes ``st`` takes on the wire, a hollow full state filled."""
        return st.ByteSize() + (self.state.full_delta_size() if st.full else 0)

    def _request(
        self, e: Endpoint, build: Callable[[cpb.ClusterState], Any], st: cpb.ClusterState
    ) -> Any:
        """``build(st)``, with a (hollow) full state filled in the request: in
        its wire bytes (``EncodedRequest``) for an ``EncodingStub``."""
        request = build(st)
        if st.full:
            if isinstance(e.stub, EncodingStub):
                return EncodedRequest(self.state.encode_full(request))
            self.state.fill_full(request.state.delta)
        return request

    def _sent_full(self, e: Endpoint) -> None:
        """Counts a full state sent; ``full_sends_by_replica`` counts it once
        the replica that got it says who it is."""
        e.full_sends += 1
        self.full_sends += 1
        self._pool.event("full", e, e.replica)

    async def _unary(self, e: Endpoint, method: str, request: Any) -> tuple[Any, str]:
        call = getattr(e.stub, method)(request, timeout=self.timeout, metadata=self.metadata)
        resp = await call
        replica = ""
        trailing = getattr(call, "trailing_metadata", None)
        if trailing is not None:
            replica = metadata_value(await trailing(), REPLICA_TRAILER) or ""
        return resp, replica

    def _method_name(self, method: str | Callable[..., Any]) -> str:
        if isinstance(method, str):
            name = method
        else:
            # A stub's method, e.g. ``client.stub.Filter``.
            name = getattr(method, "__name__", "")
            for e in self._pool.endpoints:
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
                if st.full and self._size(st) > self.part_bytes:
                    st = await self._upload(e, st, pin)
                if st.full:
                    self._sent_full(e)
                try:
                    resp, replica = await self._unary(e, method, self._request(e, build, st))
                except grpc.aio.AioRpcError as err:
                    detail = ErrorDetail.from_rpc_error(err)
                    self._pool.note_replica(e, detail.replica)
                    if st.full and err.code() != grpc.StatusCode.UNAVAILABLE:
                        self.full_sends_by_replica[detail.replica or e.address] += 1
                    if detail.reason == SNAPSHOT_PASSED:
                        raise SnapshotPassed(st.generation, detail.replica_generation) from err
                    if not detail.stale or st.full or attempt == 2:
                        raise
                    st = self._resend(e, st, detail, attempt, pin)
                    continue
                self._pool.note_replica(e, replica)
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
        count, parts = self.state.lazy_full_parts(self.part_bytes)

        async def each() -> AsyncIterator[pb.UploadStateRequest]:
            # Each part is built when gRPC asks for it: one part's copy of the
            # records at a time, not the whole state's.
            for part in parts:
                yield pb.UploadStateRequest(state=part)

        self._sent_full(e)
        self.uploads += 1
        log.info(
            "full state of %.1f MiB too large for one message: uploading it in %d parts to %s",
            self._size(st) / 2**20,
            count,
            e.address,
        )
        call = e.stub.UploadState(each(), timeout=self.timeout, metadata=self.metadata)
        resp = await call
        replica = ""
        trailing = getattr(call, "trailing_metadata", None)
        if trailing is not None:
            replica = metadata_value(await trailing(), REPLICA_TRAILER) or ""
        self._pool.note_replica(e, replica)
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
        self._pool.event("resend", e, detail.replica)
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
            self._pool.note_replica(e, replica)
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
        cycle: int = 0,
        group_rejected: bool = False,
        preemption_candidates: bool = False,
    ) -> pb.ScheduleResponse:
        """One scheduling cycle (Schedule). ``cycle``: the caller's cycle
        number, for opportunistic batching (ScheduleRequest.cycle).
        ``group_rejected``: the rejected nodes as Diagnosis.rejected_groups
        (read either form with ``rejected_nodes``). ``preemption_candidates``:
        a preemption answers every candidate, none selected, for the
        caller's extenders (ScheduleRequest.preemption_candidates)."""
        build = _schedule_request(
            profile,
            pod,
            start_index,
            explain,
            reserve_and_permit,
            seed,
            cycle,
            group_rejected,
            preemption_candidates,
        )
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
        cycle: int = 0,
        group_rejected: bool = False,
        preemption_candidates: bool = False,
    ) -> pb.ScheduleBatchResponse:
        """Several cycles in one round trip (ScheduleBatch). The caller adds the
        placed pods to its state afterwards, like after single cycles.
        ``cycle``: the first pod's cycle number (ScheduleBatchRequest.cycle);
        ``group_rejected`` and ``preemption_candidates`` as for ``schedule``."""

        def build(st: cpb.ClusterState) -> pb.ScheduleBatchRequest:
            return pb.ScheduleBatchRequest(
                profile=profile,
                state=st,
                pods=pods,
                start_index=start_index,
                reserve_and_permit=reserve_and_permit,
                seed=seed,
                cycle=cycle,
                group_rejected=group_rejected,
                preemption_candidates=preemption_candidates,
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
        cycle: int = 0,
        group_rejected: bool = False,
        preemption_candidates: bool = False,
    ) -> pb.ScheduleResponse:
        """``schedule`` over the ScheduleStream RPC: one stream per endpoint,
        opened on first use and kept. A refused request raises
        RequestRefused; a broken stream is reopened, on the next endpoint when
        the replica is unavailable."""
        build = _schedule_request(
            profile,
            pod,
            start_index,
            explain,
            reserve_and_permit,
            seed,
            cycle,
            group_rejected,
            preemption_candidates,
        )
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
                if st.full and self._size(st) > self.part_bytes:
                    st = await self._upload(e, st, None)
                    e.stream_acked = st.generation
                if st.full:
                    self._sent_full(e)

                def timed(st: cpb.ClusterState) -> pb.ScheduleRequest:
                    request: pb.ScheduleRequest = build(st)
                    # The stream has no deadline per message: the server takes this one.
                    request.timeout_millis = int(self.timeout * 1000)
                    return request

                resp = await self._exchange(e, self._request(e, timed, st))
                if resp.WhichOneof("result") == "response":
                    break
                detail = ErrorDetail.from_request_error(resp.error)
                if detail.replica:
                    e.stream_replica = detail.replica
                    self._pool.note_replica(e, detail.replica)
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
        self, e: Endpoint, request: pb.ScheduleRequest | EncodedRequest
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
                    e.stream_replica = metadata_value(await initial(), REPLICA_TRAILER) or ""
                self._pool.note_replica(e, e.stream_replica)
        return resp

    async def close(self) -> None:
        for e in self._pool.endpoints:
            if e.stream is not None:
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    await e.stream.done_writing()
                e.stream = None
        await self._pool.close_channels()

    async def sync(self) -> pb.SyncResponse:
        resp: pb.SyncResponse = await self.call("Sync", lambda st: pb.SyncRequest(state=st))
        return resp
