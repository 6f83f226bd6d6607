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
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from prometheus_client import Counter

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import (
    BATCH_TOO_LARGE,
    ClusterStateLog,
    ErrorDetail,
    Mode,
    RequestRefused,
    SchedulingClient,
    SnapshotPassed,
)
from berth.framework.events import ClusterEvent
from berth.framework.interfaces import PreEnqueuePlugin, QueuedPodInfo, QueueSortPlugin
from berth.framework.model import PodInfo
from berth.framework.status import SUCCESS, Status
from berth.framework.writes import PluginWrites
from berth.plugins.queuesort.priority_sort import PrioritySort
from berth.plugins.schedulinggates.scheduling_gates import SchedulingGates

log = logging.getLogger(__name__)


class _SuccessGate(PreEnqueuePlugin):
    """A PreEnqueue plugin whose answer, for every pod the shim asks it about,
    is Success."""

    def pre_enqueue(self, pod: PodInfo) -> Status:
        return SUCCESS


class PreemptionGate(_SuccessGate):
    """DefaultPreemption's PreEnqueue turns a pod away while its asynchronous
    preemption runs (executor.go IsPodRunningPreemption). The preemption runs
    in the shim, so only the shim knows: ``PreemptionExecutor.gate``
    (shim/preemption.py) holds that gate, and the plugin service's answer
    could only be Success."""

    name = "DefaultPreemption"


class DynamicResourcesGate(_SuccessGate):
    """DynamicResources' PreEnqueue for a pod that names no claim: Success
    before any lookup (dynamicresources.go PreEnqueue; plugins/dynamicresources
    ``pre_enqueue``). Pods with claims are sent to the plugin service
    (LOCAL_PRE_ENQUEUE_UNLESS), so the shim never loads the plugin's code."""

    name = "DynamicResources"


class GangSchedulingGate(_SuccessGate):
    """GangScheduling's PreEnqueue for a pod without spec.schedulingGroup:
    Success (gangscheduling.go PreEnqueue; plugins/gangscheduling
    ``pre_enqueue``). Pods of a gang are sent to the plugin service."""

    name = "GangScheduling"


# Plugins whose answer depends on the pod alone (no args, no cluster state, no
# objects): when they are all a profile runs at PreEnqueue or QueueSort, the
# shim runs the same plugin code (plugins/<name>) itself rather than ask the
# plugin service for an answer that could not differ. Any other plugin at that
# point and the shim asks, as before.
LOCAL_PRE_ENQUEUE: dict[str, type[PreEnqueuePlugin]] = {
    "SchedulingGates": SchedulingGates,
    "DefaultPreemption": PreemptionGate,
    # Its PreEnqueue reads the pod's claims: for a pod without claims the
    # answer is Success whatever the cluster holds (LOCAL_PRE_ENQUEUE_UNLESS).
    "DynamicResources": DynamicResourcesGate,
    # Its PreEnqueue counts a gang's pods: Success for a pod without
    # spec.schedulingGroup whatever the cluster holds.
    "GangScheduling": GangSchedulingGate,
}
# Local PreEnqueue plugins whose answer depends on objects for some pods: for
# those pods the shim asks the plugin service, with the cluster state
# (PreEnqueueRequest.state). DynamicResources' PreEnqueue
# (foreachPodResourceClaim) looks up each claim the pod names.
LOCAL_PRE_ENQUEUE_UNLESS: dict[str, Callable[[cpb.Pod], bool]] = {
    "DynamicResources": lambda pod: bool(pod.resource_claims),
    # GangScheduling's PreEnqueue finds the pod's PodGroup and counts its pods.
    "GangScheduling": lambda pod: bool(pod.scheduling_group),
}
LOCAL_QUEUE_SORT: dict[str, type[QueueSortPlugin]] = {"PrioritySort": PrioritySort}
# A Bind plugin that only answers "the caller binds" (plugins/defaultbinder:
# Success and caller_binds for every pod, upstream's DefaultBinder POST done
# by the caller).
CALLER_BINDS = "DefaultBinder"

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
    calls: ``abort`` raises the AioRpcError a remote caller would see, and
    ``time_remaining`` gives the call's timeout to the service, which stops a
    cycle at it as it does for a remote caller's deadline."""

    def __init__(self, timeout: float | None = None) -> None:
        self._deadline = None if timeout is None else time.monotonic() + timeout

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def set_trailing_metadata(self, _metadata: Sequence[tuple[str, str]]) -> None:
        """Nothing to send in-process."""

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

        async def call(request: Any, **options: Any) -> Any:
            # The timeout option becomes the call's deadline (gRPC's call
            # option, the same name); metadata means nothing in-process (the
            # caller is the process itself).
            timeout: float | None = options.get("timeout")
            return await impl(request, self._ctx if timeout is None else _LocalContext(timeout))

        call.__name__ = name
        return call


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    """What the shim needs to know of a profile (DescribeProfiles)."""

    name: str
    points: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Objects beyond nodes and pods its plugins read (Profile.reads).
    reads: tuple[pb.ObjectKind, ...] = ()
    # The events its rejecting plugins registered (Profile.events).
    events: tuple[pb.RegisteredEvent, ...] = ()

    def has(self, point: str) -> bool:
        return bool(self.points.get(point))

    @property
    def local_pre_enqueue(self) -> tuple[PreEnqueuePlugin, ...] | None:
        """The PreEnqueue plugins, in order, when the shim can run every one
        of them itself (LOCAL_PRE_ENQUEUE); None when any must be asked."""
        names = self.points.get("preEnqueue", ())
        if not all(n in LOCAL_PRE_ENQUEUE for n in names):
            return None
        return tuple(LOCAL_PRE_ENQUEUE[n]() for n in names)

    @property
    def local_queue_sort(self) -> QueueSortPlugin | None:
        """The QueueSort plugin when the shim can run it itself, else None."""
        names = self.points.get("queueSort", ())
        if len(names) != 1 or names[0] not in LOCAL_QUEUE_SORT or self.queue_sort_reads:
            return None
        return LOCAL_QUEUE_SORT[names[0]]()

    @property
    def shim_binds(self) -> bool:
        """Is the Bind step only the pods/binding POST? True when the only Bind
        plugin is DefaultBinder, which answers Success with caller_binds for
        every pod whatever the cycle state: the shim POSTs the binding without
        asking Bind. PreBind and PostBind, when the profile has them, are
        still called around it (PreBind only when the scheduling cycle's
        PreBindPreFlight said some plugin has work: ScheduleResponse.
        pre_bind_skip), so a profile whose PreBind plugins all skip a pod
        (the default profile's VolumeBinding for a pod without volumes)
        binds it with no RPC beyond the scheduling cycle."""
        return self.points.get("bind", ()) == (CALLER_BINDS,)

    @property
    def pre_enqueue_reads(self) -> bool:
        """Does a PreEnqueue plugin read objects (so PreEnqueue needs the state)?"""
        gates = set(self.points.get("preEnqueue", ()))
        return any(gates & set(kind.plugins) for kind in self.reads)

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
        # Per profile, what the shim runs itself (ProfileInfo.local_pre_enqueue,
        # local_queue_sort), set by describe().
        self._pre_enqueue: dict[str, tuple[PreEnqueuePlugin, ...]] = {}
        self._queue_sort: dict[str, QueueSortPlugin] = {}
        # Single cycles over ScheduleStream; off when tracing, since a stream
        # carries one trace context for all its messages and each unary
        # Schedule carries its own.
        self.stream = remote
        # Per profile, the kinds each plugin declares it writes (Plugin.writes),
        # from the configuration this process loaded, never from the server's
        # answers: the only writes beyond the pod in hand the shim performs
        # (shim/guard.py). Empty: writes to the pod in hand only.
        self.declared_writes: Mapping[str, PluginWrites] = {}

    @property
    def state(self) -> ClusterStateLog:
        return self.client.state

    @classmethod
    def in_process(cls, service: Any, state: ClusterStateLog) -> PluginService:
        client = SchedulingClient(None, state, stub=InProcessStub(service))
        svc = cls(client, remote=False)
        # The service's Frameworks worked the declarations out from its configuration.
        svc.declared_writes = {name: fw.writes for name, fw in service.frameworks.items()}
        return svc

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
            # gRPC's own "message larger than max" carries no reason; OVERLOADED
            # (the client's retries ran out) and STATE_TOO_LARGE are not about
            # the batch's size: the pods back off like after any failure.
            if what == "ScheduleBatch" and (
                detail.reason == BATCH_TOO_LARGE
                or (exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and not detail.reason)
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
            out[prof.scheduler_name] = ProfileInfo(
                prof.scheduler_name, points, tuple(prof.reads), tuple(prof.events)
            )
        pre_enqueue: dict[str, tuple[PreEnqueuePlugin, ...]] = {}
        queue_sort: dict[str, QueueSortPlugin] = {}
        for name, info in out.items():
            pre = info.local_pre_enqueue
            if pre is not None:
                pre_enqueue[name] = pre
            sort = info.local_queue_sort
            if sort is not None:
                queue_sort[name] = sort
        if out != self.profiles:
            log.info(
                "profiles: %s",
                "; ".join(
                    f"{name}: PreEnqueue {_pre_enqueue_where(name in pre_enqueue, info)}, "
                    f"QueueSort {'in the shim' if name in queue_sort else 'asked'}, "
                    f"binding {'POSTed directly' if info.shim_binds else 'through Bind'}"
                    + (", PreBind asked unless its pre-flight skips" if info.has("preBind") else "")
                    for name, info in sorted(out.items())
                ),
            )
        self.profiles, self._pre_enqueue, self._queue_sort = out, pre_enqueue, queue_sort
        return out

    async def queueing_hints(
        self,
        event: ClusterEvent,
        old: Any,
        new: Any,
        pods: Sequence[tuple[str, Any, Sequence[str]]],
    ) -> list[tuple[str, ...]]:
        """QueueingHints: for each (profile, pod, plugins), the plugins whose
        hints answer Queue to ``event`` (old and new: cpb.Node, cpb.Pod or
        cpb.ClusterObject records, or None). One call for all the pods, in
        parts of MAX_HINT_PODS when there are more."""
        out: list[tuple[str, ...]] = []
        base = pb.QueueingHintsRequest(resource=event.resource, action_type=int(event.action_type))
        if old is not None:
            base.old_object.CopyFrom(event_object(old))
        if new is not None:
            base.new_object.CopyFrom(event_object(new))
        for i in range(0, len(pods), MAX_HINT_PODS):
            req = pb.QueueingHintsRequest()
            req.CopyFrom(base)
            for profile, pod, plugins in pods[i : i + MAX_HINT_PODS]:
                req.pods.add(profile=profile, pod=pod, plugins=plugins)
            resp: pb.QueueingHintsResponse = await self._guard(
                "QueueingHints", functools.partial(self.client.unary, "QueueingHints", req)
            )
            if len(resp.pods) != len(req.pods):
                raise ServiceUnavailable(
                    f"QueueingHints: plugin service {self.address} answered "
                    f"{len(resp.pods)} pods for {len(req.pods)}"
                )
            out.extend(tuple(p.queueing_plugins) for p in resp.pods)
        return out

    async def sync(self) -> pb.SyncResponse:
        self.state.commit()
        resp: pb.SyncResponse = await self._guard("Sync", self.client.sync)
        return resp

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        local = self._pre_enqueue.get(profile)
        if local is not None and not any(
            unless(pod)
            for pl in local
            if (unless := LOCAL_PRE_ENQUEUE_UNLESS.get(pl.name)) is not None
        ):
            # framework.go RunPreEnqueuePlugins, as the server's Framework runs
            # it: the first non-success wins, naming its plugin.
            info = PodInfo(pod)
            for pl in local:
                st = pl.pre_enqueue(info)
                if not st.is_success:
                    return pb.Status(code=int(st.code), reasons=st.reasons, plugin=pl.name)  # type: ignore[arg-type]
            return pb.Status()
        described = self.profiles.get(profile)
        resp: pb.PreEnqueueResponse
        if described is not None and described.pre_enqueue_reads:
            # A PreEnqueue plugin reads objects (DynamicResources' claims):
            # send the cluster state too.
            self.state.commit()

            def build(st: cpb.ClusterState) -> pb.PreEnqueueRequest:
                return pb.PreEnqueueRequest(profile=profile, pod=pod, state=st)

            resp = await self._guard("PreEnqueue", lambda: self.client.call("PreEnqueue", build))
        else:
            resp = await self._guard(
                "PreEnqueue",
                lambda: self.client.unary(
                    "PreEnqueue", pb.PreEnqueueRequest(profile=profile, pod=pod)
                ),
            )
        return resp.status

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        local = self._queue_sort.get(profile)
        if local is not None:
            return [
                local.sort_key(QueuedPodInfo(PodInfo(qp.pod), qp.enqueued_unix_micros, qp.attempts))
                for qp in pods
            ]
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

    async def schedule(
        self,
        profile: str,
        pod: cpb.Pod,
        start_index: int,
        cycle: int = 0,
        *,
        explain: bool = False,
        seed: int = 0,
        preemption_candidates: bool = False,
    ) -> pb.ScheduleResponse:
        """One scheduling cycle, Reserve and Permit included. ``cycle``: the
        scheduler's cycle number (opportunistic batching). ``explain``: over
        every node, answering every node's verdict and every score (for pods
        that asked for explanations, shim/explain.py). ``seed``: selectHost's
        tie-break seed (0: unseeded). ``preemption_candidates``: a preemption
        answers every candidate, for the extenders that process the pod's
        preemption (ScheduleRequest.preemption_candidates)."""
        self.state.commit()
        if self.stream:
            resp: pb.ScheduleResponse = await self._guard(
                "ScheduleStream",
                lambda: self.client.schedule_streamed(
                    profile,
                    pod,
                    start_index=start_index,
                    reserve_and_permit=True,
                    explain=explain,
                    cycle=cycle,
                    seed=seed,
                    group_rejected=True,
                    preemption_candidates=preemption_candidates,
                ),
            )
        else:
            resp = await self._guard(
                "Schedule",
                lambda: self.client.schedule(
                    profile,
                    pod,
                    start_index=start_index,
                    reserve_and_permit=True,
                    explain=explain,
                    cycle=cycle,
                    seed=seed,
                    group_rejected=True,
                    preemption_candidates=preemption_candidates,
                ),
            )
        return resp

    async def explain(self, profile: str, pod: cpb.Pod) -> pb.ScheduleResponse:
        """A dry run of the pod's cycle over every node, for an explanation:
        unary Schedule with ``explain``, no Reserve or Permit, so nothing is
        reserved and the answer's signals and writes are not acted on."""
        self.state.commit()
        resp: pb.ScheduleResponse = await self._guard(
            "Schedule",
            lambda: self.client.schedule(profile, pod, explain=True, group_rejected=True),
        )
        return resp

    async def schedule_batch(
        self,
        profile: str,
        pods: list[cpb.Pod],
        start_index: int,
        cycle: int = 0,
        *,
        seed: int = 0,
    ) -> pb.ScheduleBatchResponse:
        """Several pods' cycles; pod i's tie-break is seeded with seed + i."""
        self.state.commit()
        resp: pb.ScheduleBatchResponse = await self._guard(
            "ScheduleBatch",
            lambda: self.client.schedule_batch(
                profile,
                pods,
                start_index=start_index,
                reserve_and_permit=True,
                cycle=cycle,
                seed=seed,
                group_rejected=True,
            ),
        )
        return resp

    async def schedule_stopped(
        self, profile: str, pod: cpb.Pod, start_index: int, preemption_candidates: bool = False
    ) -> pb.ScheduleResponse:
        """The first half of a cycle with extenders: PreFilter and Filter,
        stopped before Score when nodes pass (ScheduleRequest
        .stop_after_filter); PostFilter when none does, answering every
        preemption candidate with ``preemption_candidates``."""
        return await self._split_cycle(
            profile,
            pod,
            start_index,
            stop_after_filter=True,
            preemption_candidates=preemption_candidates,
        )

    async def schedule_resumed(
        self,
        profile: str,
        pod: cpb.Pod,
        start_index: int,
        resume: pb.ScheduleResume,
    ) -> pb.ScheduleResponse:
        """The second half: Score over the nodes the extenders kept, their
        scores added, host selection, Reserve and Permit."""
        return await self._split_cycle(profile, pod, start_index, resume=resume)

    async def _split_cycle(
        self, profile: str, pod: cpb.Pod, start_index: int, **half: Any
    ) -> pb.ScheduleResponse:
        """A Schedule call for one half of a cycle split around the
        extenders (``half``: stop_after_filter or resume)."""
        self.state.commit()

        def build(st: cpb.ClusterState) -> pb.ScheduleRequest:
            return pb.ScheduleRequest(
                profile=profile,
                state=st,
                pod=pod,
                start_index=start_index,
                reserve_and_permit=True,
                group_rejected=True,
                **half,
            )

        resp: pb.ScheduleResponse = await self._guard(
            "Schedule", lambda: self.client.call("Schedule", build)
        )
        return resp

    async def post_filter(
        self,
        profile: str,
        pod: cpb.Pod,
        cycle: pb.CycleState,
        rejected: Sequence[pb.NodeStatus],
        preemption_candidates: bool = False,
    ) -> pb.PostFilterResponse:
        """PostFilter for a cycle whose nodes the extenders all rejected;
        ``preemption_candidates`` as for ``schedule``."""
        self.state.commit()

        def build(st: cpb.ClusterState) -> pb.PostFilterRequest:
            return pb.PostFilterRequest(
                profile=profile,
                state=st,
                pod=pod,
                cycle=cycle,
                rejected=rejected,
                preemption_candidates=preemption_candidates,
            )

        resp: pb.PostFilterResponse = await self._guard(
            "PostFilter", lambda: self.client.call("PostFilter", build)
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


def _pre_enqueue_where(local: bool, info: ProfileInfo) -> str:
    """Where a profile's PreEnqueue runs, for the log."""
    if not local:
        return "asked" + (" with the cluster state" if info.pre_enqueue_reads else "")
    if info.pre_enqueue_reads:
        return "in the shim (asked with the cluster state for pods with resource claims)"
    return "in the shim"


# Most pods per QueueingHints call (the server's MAX_HINT_PODS).
MAX_HINT_PODS = 16384


def event_object(record: Any) -> pb.EventObject:
    """A cluster event's record as QueueingHints carries it."""
    if isinstance(record, cpb.Node):
        return pb.EventObject(node=record)
    if isinstance(record, cpb.Pod):
        return pb.EventObject(pod=record)
    if isinstance(record, cpb.ClusterObject):
        return pb.EventObject(cluster_object=record)
    raise TypeError(f"no EventObject for {type(record).__name__}")


__all__ = [
    "MAX_HINT_PODS",
    "BatchTooLarge",
    "InProcessStub",
    "PluginService",
    "ProfileInfo",
    "ServiceUnavailable",
    "SortKey",
    "event_object",
]
