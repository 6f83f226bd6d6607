"""The shim's side of the SchedulingService: one class, two transports.

``PluginService`` runs every call the shim makes (queue sort keys, PreEnqueue,
scheduling cycles, Unreserve, Permit, the binding cycle) through
``berth.client.SchedulingClient``, which owns the cluster-state protocol
(protos/README.md). Underneath, the stubs are either gRPC stubs over channels
to the plugin server replicas (``berth shim --plugin-server``: a
``dns:///name:port`` headless Service or a list of addresses, one channel per
replica, calls round robin, an unavailable replica skipped; or one channel to
any other gRPC target) or ``InProcessStub``, which calls the same
``server.service.SchedulingService`` object in this process: the code above
the stub is the same on both paths (the seam httpx calls a transport).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from prometheus_client import Counter

from berth.client import (
    BATCH_TOO_LARGE,
    ClusterStateLog,
    ErrorDetail,
    Mode,
    RequestRefused,
    SchedulingClient,
    SnapshotPassed,
)
from berth_api.v1 import cluster_pb2 as cpb
from berth_api.v1 import scheduling_pb2 as pb

log = logging.getLogger(__name__)

# What keeping the replicas' snapshots current costs, per replica address.
FULL_STATES = Counter(
    "berth_plugin_server_full_states_total",
    "Full cluster states sent to plugin servers (a new or restarted replica costs one), "
    "by endpoint.",
    ["endpoint"],
)
STALE_RESENDS = Counter(
    "berth_plugin_server_stale_resends_total",
    "Requests resent because the replica's snapshot was behind (STALE_SNAPSHOT), by endpoint.",
    ["endpoint"],
)
FAILOVERS = Counter(
    "berth_plugin_server_failovers_total",
    "Calls moved to another plugin server replica because this one was unavailable, by endpoint.",
    ["endpoint"],
)
_COUNTERS = {"full": FULL_STATES, "resend": STALE_RESENDS, "failover": FAILOVERS}


def _count(kind: str, endpoint: str, replica: str) -> None:
    counter = _COUNTERS.get(kind)
    if counter is not None:
        counter.labels(endpoint).inc()


SortKey = tuple[int | float | str, ...]


class ServiceUnavailable(Exception):
    """The plugin service could not answer (unreachable, restarting, timed
    out, or it refused the request). Pods affected go back to the queue with
    backoff; nothing is dropped."""


class BatchTooLarge(ServiceUnavailable):
    """The plugin server takes fewer pods per ScheduleBatch (berth serve
    --max-batch-pods): send smaller batches."""


class _LocalContext:
    """The part of grpc.aio.ServicerContext the service uses, for in-process
    calls: ``abort`` raises the AioRpcError a remote caller would see."""

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        raise grpc.aio.AioRpcError(
            code,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(*trailing_metadata),
            details,
        )

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()


class InProcessStub:
    """A SchedulingService stub that calls the service object directly:
    the same requests and responses, no network and no serialisation."""

    def __init__(self, service: Any) -> None:
        self._service = service
        self._ctx = _LocalContext()

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        impl = getattr(self._service, name)

        async def call(request: Any, **_options: Any) -> Any:
            # Call options (timeout, metadata) mean nothing in-process.
            return await impl(request, self._ctx)

        call.__name__ = name
        return call


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    """What the shim needs to know of a profile (DescribeProfiles)."""

    name: str
    points: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Objects beyond nodes and pods its plugins read (Profile.reads).
    reads: tuple[pb.ObjectKind, ...] = ()

    def has(self, point: str) -> bool:
        return bool(self.points.get(point))

    @property
    def queue_sort_reads(self) -> bool:
        """Does the QueueSort plugin read objects (so QueueSort needs the state)?"""
        sorters = set(self.points.get("queueSort", ()))
        return any(sorters & set(kind.plugins) for kind in self.reads)


class PluginService:
    """The calls the shim makes, over one SchedulingClient."""

    def __init__(self, client: SchedulingClient, *, remote: bool, address: str = "") -> None:
        self.client = client
        self.remote = remote
        self.address = address or ("in-process" if not remote else "")
        self.profiles: dict[str, ProfileInfo] = {}
        # Single cycles over ScheduleStream; off when tracing, since a stream
        # carries one trace context for all its messages and each unary
        # Schedule carries its own.
        self.stream = remote

    @property
    def state(self) -> ClusterStateLog:
        return self.client.state

    @classmethod
    def in_process(cls, service: Any, state: ClusterStateLog) -> PluginService:
        client = SchedulingClient(None, state, stub=InProcessStub(service))
        return cls(client, remote=False)

    @classmethod
    def over_grpc(
        cls,
        target: str,
        state: ClusterStateLog,
        timeout: float,
        *,
        mode: Mode = "auto",
        interceptors: Sequence[Any] = (),
        credentials: grpc.ChannelCredentials | None = None,
        tls_name: str | None = None,
    ) -> PluginService:
        """The plugin servers at ``target`` (berth.client.parse_target):
        endpoint-aware for ``dns:///name:port`` and ``host:port,host:port``,
        one channel otherwise."""
        client = SchedulingClient.connect(
            target,
            state,
            timeout=timeout,
            mode=mode,
            interceptors=interceptors,
            credentials=credentials,
            tls_name=tls_name,
            on_event=_count,
        )
        return cls(client, remote=True, address=target)

    async def _guard(self, what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await fn()
        except grpc.aio.AioRpcError as exc:
            detail = ErrorDetail.from_rpc_error(exc)
            if what == "ScheduleBatch" and (
                detail.reason == BATCH_TOO_LARGE or exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            ):
                raise BatchTooLarge(f"{what}: {exc.details()}") from exc
            raise ServiceUnavailable(
                f"{what}: plugin service {self.address} answered {exc.code().name}"
                + (f" ({detail.reason})" if detail.reason else "")
                + f": {exc.details()}"
            ) from exc
        except (RequestRefused, SnapshotPassed) as exc:
            raise ServiceUnavailable(f"{what}: {exc}") from exc

    def replicas(self) -> str:
        """The replicas in use and what each cost, for logs."""
        return "; ".join(
            f"{s.address}{f' ({s.replica})' if s.replica else ''}: {s.calls} calls, "
            f"{s.full_sends} full, {s.resends} resent, {s.failures} failed"
            for s in self.client.stats()
        )

    async def describe(self) -> dict[str, ProfileInfo]:
        resp: pb.DescribeProfilesResponse = await self._guard(
            "DescribeProfiles",
            lambda: self.client.unary("DescribeProfiles", pb.DescribeProfilesRequest()),
        )
        out = {}
        for prof in resp.profiles:
            points = {ep.name: tuple(p.name for p in ep.plugins) for ep in prof.extension_points}
            out[prof.scheduler_name] = ProfileInfo(prof.scheduler_name, points, tuple(prof.reads))
        self.profiles = out
        return out

    async def sync(self) -> pb.SyncResponse:
        self.state.commit()
        resp: pb.SyncResponse = await self._guard("Sync", self.client.sync)
        return resp

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        info = self.profiles.get(profile)
        if info is not None and not info.has("preEnqueue"):
            return pb.Status()
        resp: pb.PreEnqueueResponse = await self._guard(
            "PreEnqueue",
            lambda: self.client.unary("PreEnqueue", pb.PreEnqueueRequest(profile=profile, pod=pod)),
        )
        return resp.status

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        info = self.profiles.get(profile)
        if info is not None and info.queue_sort_reads:
            # The QueueSort plugin reads objects: send the cluster state too.
            self.state.commit()

            def build(st: cpb.ClusterState) -> pb.QueueSortRequest:
                return pb.QueueSortRequest(profile=profile, pods=pods, state=st)

            resp: pb.QueueSortResponse = await self._guard(
                "QueueSort", lambda: self.client.call("QueueSort", build)
            )
        else:
            resp = await self._guard(
                "QueueSort",
                lambda: self.client.unary(
                    "QueueSort", pb.QueueSortRequest(profile=profile, pods=pods)
                ),
            )
        keys: list[SortKey] = []
        for k in resp.keys:
            keys.append(tuple(getattr(part, str(part.WhichOneof("value"))) for part in k.parts))
        return keys

    async def schedule(self, profile: str, pod: cpb.Pod, start_index: int) -> pb.ScheduleResponse:
        self.state.commit()
        if self.stream:
            resp: pb.ScheduleResponse = await self._guard(
                "ScheduleStream",
                lambda: self.client.schedule_streamed(
                    profile, pod, start_index=start_index, reserve_and_permit=True
                ),
            )
        else:
            resp = await self._guard(
                "Schedule",
                lambda: self.client.schedule(
                    profile, pod, start_index=start_index, reserve_and_permit=True
                ),
            )
        return resp

    async def schedule_batch(
        self, profile: str, pods: list[cpb.Pod], start_index: int
    ) -> pb.ScheduleBatchResponse:
        self.state.commit()
        resp: pb.ScheduleBatchResponse = await self._guard(
            "ScheduleBatch",
            lambda: self.client.schedule_batch(
                profile, pods, start_index=start_index, reserve_and_permit=True
            ),
        )
        return resp

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        """Unreserve, Permit, PreBind, Bind or PostBind for one pod and node."""
        self.state.commit()

        def build(st: cpb.ClusterState) -> pb.NodeRequest:
            return pb.NodeRequest(profile=profile, state=st, pod=pod, cycle=cycle, node=node)

        return await self._guard(method, lambda: self.client.call(method, build))

    async def close(self) -> None:
        if self.remote:
            log.info("plugin servers used: %s", self.replicas() or "none")
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self.client.close()


__all__ = [
    "BatchTooLarge",
    "InProcessStub",
    "PluginService",
    "ProfileInfo",
    "ServiceUnavailable",
    "SortKey",
]
