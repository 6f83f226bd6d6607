"""SchedulingService: each RPC runs one extension point of a profile.

A request the server cannot serve ends with a gRPC status code, a message that
names the field, and a google.rpc.ErrorInfo detail (server/errors.py):
INVALID_ARGUMENT (malformed request), NOT_FOUND (unknown profile or node),
FAILED_PRECONDITION (this replica's snapshot is behind), ABORTED (a pinned
request found the replica past its generation), RESOURCE_EXHAUSTED (batch too
large), DEADLINE_EXCEEDED, INTERNAL. Plugin verdicts, including plugin errors,
travel inside the response as Status. Every response carries the replica's id
(trailer ``berth-replica``), and every response that used cluster state the
generation it used.

Plugin work never runs on the event loop: every call's cycle runs on one
worker thread (``_in_worker``), so grpc.health.v1 and gRPC's own I/O are
answered whatever a plugin computes. One worker keeps the service's
single-threaded model (a profile's Framework and the snapshot cache are used by
one call at a time). Long work (a ScheduleBatch, a large full state) runs in
slices on that worker, holding its cluster's lock between them, so other
clusters' calls get turns and no other call sees or changes that snapshot
half-way. The caller's gRPC deadline is checked before every plugin call
(``Framework.begin_request``), between a batch's pods and between slices: past
it the call ends DEADLINE_EXCEEDED and the snapshot stays as a whole call left
it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from prometheus_client import Gauge

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.api.v1 import scheduling_pb2_grpc as pb_grpc
from berth.framework.cycle_state import CycleState, StateDecodeError
from berth.framework.interfaces import QueuedPodInfo
from berth.framework.model import PodInfo
from berth.framework.profile import SchedulerConfig
from berth.framework.runtime import CycleError, DeadlineExceeded, Framework, Signal
from berth.framework.schedule_one import NominatingMode, ScheduleResult, schedule_pod
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import Code, Status
from berth.server import errors
from berth.server.errors import Replica, ServiceError
from berth.server.identity import Callers
from berth.server.state import (
    STEPWISE_ENTRIES,
    CacheFull,
    Entry,
    InvalidState,
    SnapshotPassed,
    SnapshotStore,
    StaleReplica,
    StateTooLarge,
    Upload,
    UploadsFull,
    full_entries,
)

log = logging.getLogger(__name__)

Resp = TypeVar("Resp")

# Most pods one ScheduleBatch may carry (berth serve --max-batch-pods).
DEFAULT_MAX_BATCH_PODS = 256


# Most calls (unary calls and stream messages) served at once, and most bytes
# of their requests (berth serve --max-inflight-calls, --max-inflight-bytes).
DEFAULT_MAX_INFLIGHT_CALLS = 64
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 2**20

# Longest a batch or a large full state works on the worker before another
# call gets a turn there (berth serve --slice-ms).
DEFAULT_SLICE_SECONDS = 0.002

R = TypeVar("R")
Msg = TypeVar("Msg", bound=Message)

# Requests larger than this are parsed on the worker, not on the event loop.
PARSE_INLINE_BYTES = 256 * 1024

# Longest an UploadState stream may wait for its next part (or its end),
# whatever its deadline: an upload holds its bytes until it ends.
DEFAULT_UPLOAD_IDLE_SECONDS = 60.0


# What the replica serves at once, across its Admission instances (as
# kube-apiserver's apiserver_current_inflight_requests): the figures its
# --max-inflight-calls and --max-inflight-bytes caps are measured against.
INFLIGHT_CALLS = Gauge(
    "berth_plugin_server_inflight_calls", "Calls this plugin server is serving now"
)
INFLIGHT_BYTES = Gauge(
    "berth_plugin_server_inflight_bytes",
    "Bytes of the requests of the calls this plugin server is serving now",
)


class Admission:
    """Calls in flight and the bytes of their requests, each capped: beyond,
    a call is refused at once with RESOURCE_EXHAUSTED (reason OVERLOADED)
    before anything of it is done, and the caller backs off. A request larger
    than the byte cap alone is taken when nothing else is in flight (it could
    never be served otherwise; the message size limit bounds it). Used on
    the event loop only."""

    def __init__(
        self,
        max_calls: int = DEFAULT_MAX_INFLIGHT_CALLS,
        max_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
    ) -> None:
        self.max_calls = max_calls
        self.max_bytes = max_bytes
        self.calls = 0
        self.bytes = 0
        self.refused = 0

    def enter(self, size: int) -> None:
        if self.calls >= self.max_calls:
            self.refused += 1
            raise errors.overloaded(
                "calls", self.max_calls, "--max-inflight-calls", f"{self.calls} calls"
            )
        if self.calls and self.bytes + size > self.max_bytes:
            self.refused += 1
            raise errors.overloaded(
                "bytes",
                self.max_bytes,
                "--max-inflight-bytes",
                f"{self.bytes} bytes of requests and this one has {size}",
            )
        self.calls += 1
        self.bytes += size
        INFLIGHT_CALLS.inc()
        INFLIGHT_BYTES.inc(size)

    def leave(self, size: int) -> None:
        self.calls -= 1
        self.bytes -= size
        INFLIGHT_CALLS.dec()
        INFLIGHT_BYTES.dec(size)


def _state_key(caller: str, cluster_id: str) -> str:
    """The key of a caller's cluster in ClusterLocks."""
    return f"{caller}\x00{cluster_id}"


class ClusterLocks:
    """One asyncio lock per caller's cluster (``_state_key``), held by work
    that lets other calls onto the worker part-way (a batch, a full state
    built stepwise) so that no other call reads or changes that snapshot
    meanwhile. A call that runs whole needs the lock only while someone holds
    it (it queues behind)."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    def busy(self, key: str) -> bool:
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    def busy_cluster(self, cluster_id: str) -> bool:
        """Is ``cluster_id`` held under any caller (tests, diagnostics)?"""
        tail = "\x00" + cluster_id
        return any(k.endswith(tail) and lock.locked() for k, lock in self._locks.items())

    @asynccontextmanager
    async def hold(self, cluster_id: str) -> AsyncIterator[None]:
        lock = self._locks.get(cluster_id)
        if lock is None:
            lock = self._locks[cluster_id] = asyncio.Lock()
        self._users[cluster_id] = self._users.get(cluster_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[cluster_id] -= 1
            if not self._users[cluster_id]:
                del self._users[cluster_id]
                del self._locks[cluster_id]


@dataclass(slots=True)
class _Call:
    """One call's dealings with the snapshot cache."""

    # The cluster_id whose lock the call holds.
    holding: str | None = None
    # A full state already built stepwise for this call.
    prepared: Entry | None = None
    # The generation the call was served at (set on its response).
    generation: int | None = None
    # The caller's deadline (time.perf_counter clock); None: none.
    deadline: float | None = None
    # Who calls (server/identity.py): the snapshots it may use.
    caller: str = "anonymous"


class _Defer(Exception):
    """A call that runs whole cannot go on now: its cluster's lock is held (by a
    batch), or its full state is large enough to build stepwise. The call waits
    for the lock, builds the state if needed, and runs again."""

    def __init__(self, key: str, full: cpb.ClusterState | None) -> None:
        super().__init__()
        self.key = key
        self.full = full


def _state_error(
    exc: InvalidState | StaleReplica | SnapshotPassed | StateTooLarge | CacheFull | UploadsFull,
) -> ServiceError:
    if isinstance(exc, InvalidState):
        return errors.invalid(exc.field, exc.reason)
    if isinstance(exc, UploadsFull):
        return errors.overloaded(
            "uploads",
            exc.limit,
            exc.flag,
            f"uploads of {exc.held} bytes under way (built aside until they end) and this "
            f"part has {exc.size}",
        )
    if isinstance(exc, CacheFull):
        return errors.overloaded(
            "snapshots" if exc.flag == "--max-clusters" else "state_bytes",
            exc.limit,
            exc.flag,
            f"{exc.held} snapshots of other callers, all in use",
        )
    if isinstance(exc, StateTooLarge):
        return errors.state_too_large(str(exc), exc.size, exc.limit)
    if isinstance(exc, StaleReplica):
        return errors.stale_snapshot(str(exc), exc.have)
    return errors.snapshot_passed(str(exc), exc.have)


_HAS_GENERATION: dict[type, bool] = {}


def _set_generation(resp: Any, generation: int) -> None:
    """Every response that used cluster state says which generation it used."""
    cls = type(resp)
    has = _HAS_GENERATION.get(cls)
    if has is None:
        has = _HAS_GENERATION[cls] = "generation" in cls.DESCRIPTOR.fields_by_name
    if has:
        resp.generation = generation


def _deadline(context: Any) -> float | None:
    """The call's deadline on the perf_counter clock; None without one (or for
    an in-process context, which has none)."""
    remaining = getattr(context, "time_remaining", None)
    left = remaining() if remaining is not None else None
    return None if left is None else time.perf_counter() + left


def status_to_pb(st: Status) -> pb.Status:
    return pb.Status(code=int(st.code), reasons=list(st.reasons), plugin=st.plugin)  # type: ignore[arg-type]


def status_from_pb(st: pb.Status) -> Status:
    return Status(Code(st.code), tuple(st.reasons), st.plugin)


def cycle_to_pb(state: CycleState) -> pb.CycleState:
    out = pb.CycleState(
        skip_filter_plugins=sorted(state.skip_filter_plugins),
        skip_score_plugins=sorted(state.skip_score_plugins),
    )
    for k, v in state.encode().items():
        out.data[k] = v
    return out


def cycle_from_pb(msg: pb.CycleState) -> CycleState:
    return CycleState.decode(msg.data, msg.skip_filter_plugins, msg.skip_score_plugins)


class SchedulingService(pb_grpc.SchedulingServiceServicer):
    def __init__(
        self,
        config: SchedulerConfig,
        frameworks: Mapping[str, Framework],
        store: SnapshotStore | None = None,
        max_batch_pods: int = DEFAULT_MAX_BATCH_PODS,
        replica: Replica | None = None,
        slice_seconds: float = DEFAULT_SLICE_SECONDS,
        callers: Callers | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.config = config
        self.callers = callers or Callers()
        self.admission = admission or Admission()
        self.frameworks = dict(frameworks)
        self.store = store or SnapshotStore()
        self.max_batch_pods = max_batch_pods
        # This server's id in trailers and error details.
        self.replica = replica or Replica()
        self.locks = ClusterLocks()
        # Work that can take long lets other calls run on the worker after this long.
        self.slice_seconds = slice_seconds
        # The call being served whole right now on the worker (one at a
        # time): lets _snapshot defer to the lock or a stepwise build.
        self._call: _Call | None = None
        # The one thread plugin work runs on (module docstring).
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="berth-cycle")
        # An upload whose next part does not come within this long ends.
        self.upload_idle_seconds = DEFAULT_UPLOAD_IDLE_SECONDS

    async def _in_worker(self, fn: Callable[[], R]) -> R:
        """``fn()`` on the worker thread, in the caller's context
        (contextvars: the trace the interceptor continued). A cancelled call
        (the caller went away, its deadline passed) still waits for the work
        it started: the thread cannot be stopped, and nothing else may touch
        what it touches meanwhile; the deadline stops it at the next plugin."""
        run = functools.partial(contextvars.copy_context().run, fn)
        fut = asyncio.get_running_loop().run_in_executor(self._worker, run)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            while not fut.done():
                try:
                    await asyncio.shield(fut)
                except asyncio.CancelledError:
                    continue
                except Exception:  # its error is the cancelled call's, which no one reads
                    break
            if not fut.cancelled() and isinstance(fut.exception(), DeadlineExceeded):
                log.info("a call stopped at its deadline: %s", fut.exception())
            raise

    async def parse(self, cls: type[Msg], item: Msg | bytes) -> Msg:
        """A request message from its bytes; a large one is parsed on the
        worker (parsing 64 MiB takes long enough to delay health checks)."""
        if isinstance(item, bytes) and len(item) > PARSE_INLINE_BYTES:
            return await self._in_worker(lambda: _parse(cls, item))
        return _parse(cls, item)

    def close(self) -> None:
        """Stops the worker once the work queued on it is done."""
        self._worker.shutdown(wait=False, cancel_futures=False)

    # -- helpers -------------------------------------------------------------

    def _framework(self, profile: str) -> Framework:
        if not profile:
            raise errors.invalid(
                "profile",
                "must name a profile (a schedulerName); configured: "
                + ", ".join(sorted(self.frameworks)),
            )
        fw = self.frameworks.get(profile)
        if fw is None:
            raise errors.unknown_profile(profile, self.frameworks)
        call = self._call
        fw.begin_request(None if call is None else call.deadline)
        return fw

    def _snapshot(self, has_state: bool, state: cpb.ClusterState) -> tuple[Snapshot, int]:
        if not has_state:
            raise errors.invalid("state", "required")
        call = self._call
        if call is not None:
            if call.prepared is not None:
                entry: Entry = call.prepared
                call.prepared = None
                call.generation = entry.generation
                return entry.snapshot, entry.generation
            key = _state_key(call.caller, state.cluster_id)
            if call.holding != key:
                large = state.full and full_entries(state) > STEPWISE_ENTRIES
                if large or self.locks.busy(key):
                    raise _Defer(key, state if large else None)
        try:
            entry = self.store.resolve(state, caller=call.caller if call else "anonymous")
        except (InvalidState, StaleReplica, SnapshotPassed, StateTooLarge, CacheFull) as exc:
            raise _state_error(exc) from exc
        if call is not None:
            call.generation = entry.generation
        return entry.snapshot, entry.generation

    async def _replace_stepwise(
        self, state: cpb.ClusterState, deadline: float | None, caller: str
    ) -> Entry:
        """A large full state, built on the worker in slices with other calls
        let in between; the caller holds the cluster's lock. Nothing is
        stored until the whole state is built: a deadline that passes
        part-way leaves the cache as it was."""
        try:
            steps = self.store.replace_stepwise(state, caller=caller)
        except (InvalidState, StateTooLarge, CacheFull) as exc:
            raise _state_error(exc) from exc
        slice_seconds = self.slice_seconds

        def run_slice() -> Entry | None:
            began = time.perf_counter()
            try:
                while time.perf_counter() - began < slice_seconds:
                    next(steps)
            except StopIteration as done:
                entry: Entry = done.value
                return entry
            except (InvalidState, StateTooLarge, CacheFull) as exc:
                raise _state_error(exc) from exc
            return None

        while True:
            built = await self._in_worker(run_slice)
            if built is not None:
                return built
            if deadline is not None and time.perf_counter() >= deadline:
                steps.close()
                raise errors.deadline(
                    "deadline: passed while this replica built the full state; nothing of it "
                    "was kept: send it again with a longer deadline"
                )

    @staticmethod
    def _pod(has_pod: bool, pod: cpb.Pod) -> PodInfo:
        if not has_pod:
            raise errors.invalid("pod", "required")
        if not pod.uid:
            raise errors.invalid("pod.uid", "must not be empty")
        if not pod.name:
            raise errors.invalid("pod.name", "must not be empty")
        return PodInfo(pod)

    @staticmethod
    def _nodes(
        snapshot: Snapshot, generation: int, names: Any, all_nodes: bool | None
    ) -> NodeBatch:
        """The request's candidate nodes; ``all_nodes`` None for a request
        without that field."""
        if all_nodes:
            if len(names):
                raise errors.invalid("nodes", "must be empty when all_nodes is set")
            return snapshot.all_nodes()
        if not len(names):
            raise errors.invalid(
                "nodes",
                "must name at least one node"
                + ("" if all_nodes is None else " (or set all_nodes for every node)"),
            )
        for i, name in enumerate(names):
            if name not in snapshot.nodes:
                raise errors.unknown_node(
                    f"nodes[{i}]",
                    name,
                    generation,
                    f"nodes[{i}]: node {name!r} is not in the snapshot (generation {generation})",
                )
        return snapshot.batch(names)

    @staticmethod
    def _node(snapshot: Snapshot, generation: int, name: str) -> str:
        if not name:
            raise errors.invalid("node", "must not be empty")
        if name not in snapshot.nodes:
            raise errors.unknown_node(
                "node",
                name,
                generation,
                f"node: {name!r} is not in the snapshot (generation {generation})",
            )
        return name

    def _whole(self, fn: Callable[[], Resp], call: _Call) -> Resp:
        """Runs on the worker (or, for in-process callers, on theirs)."""
        self._call = call
        try:
            return fn()
        finally:
            self._call = None

    async def _serve(
        self, fn: Callable[[], Resp], deadline: float | None = None, caller: str = "anonymous"
    ) -> Resp:
        """Runs ``fn`` whole on the worker; when its cluster is held by a
        batch, or its full state is large, first waits for the lock (and
        builds the state in slices), then runs it again under the lock."""
        call = _Call(deadline=deadline, caller=caller)
        try:
            resp = await self._in_worker(lambda: self._whole(fn, call))
        except _Defer as wait:
            async with self.locks.hold(wait.key):
                call = _Call(holding=wait.key, deadline=deadline, caller=caller)
                if wait.full is not None:
                    call.prepared = await self._replace_stepwise(wait.full, deadline, caller)
                resp = await self._in_worker(lambda: self._whole(fn, call))
        if call.generation is not None:
            _set_generation(resp, call.generation)
        return resp

    async def _answer(self, context: Any, work: Callable[[], Awaitable[Resp]]) -> Resp:
        """Awaits the work; a refusal ends the call with its typed status."""
        try:
            return await work()
        except ServiceError as exc:
            await self.replica.abort(context, exc)
        except StateDecodeError as exc:
            await self.replica.abort(context, errors.invalid("cycle.data", str(exc)))
        except DeadlineExceeded as exc:
            await self.replica.abort(context, deadline_error(exc))
        except Exception:
            log.exception("internal error serving a request")
            await self.replica.abort(context, errors.internal())

    async def _run(self, context: Any, fn: Callable[[], Resp]) -> Resp:
        async def work() -> Resp:
            caller = self.callers.identify(context)
            return await self._serve(fn, _deadline(context), caller)

        return await self._answer(context, work)

    # -- RPCs ----------------------------------------------------------------

    async def Sync(self, request: pb.SyncRequest, context: Any) -> pb.SyncResponse:
        def run() -> pb.SyncResponse:
            snap, gen = self._snapshot(request.HasField("state"), request.state)
            return pb.SyncResponse(
                generation=gen,
                node_count=len(snap.nodes),
                pod_count=len(snap.pods),
                object_count=snap.object_count,
            )

        return await self._run(context, run)

    async def DescribeProfiles(
        self, request: pb.DescribeProfilesRequest, context: Any
    ) -> pb.DescribeProfilesResponse:
        out = pb.DescribeProfilesResponse()
        points = [
            "preEnqueue",
            "queueSort",
            "preFilter",
            "filter",
            "postFilter",
            "preScore",
            "score",
            "reserve",
            "permit",
            "preBind",
            "bind",
            "postBind",
        ]
        for name, fw in self.frameworks.items():
            prof = out.profiles.add(
                scheduler_name=name, percentage_of_nodes_to_score=fw.percentage_of_nodes_to_score
            )
            for point in points:
                plugins = fw.plugins_at(point)
                if plugins:
                    ep = prof.extension_points.add(name=point)
                    for plugin, weight in plugins:
                        ep.plugins.add(name=plugin, weight=weight)
            for read in fw.reads:
                k = read.kind
                prof.reads.add(
                    group=k.group,
                    version=k.version,
                    resource=k.resource,
                    kind=k.kind,
                    namespaced=k.namespaced,
                    poll_seconds=k.poll_seconds,
                    plugins=read.plugins,
                    label_selector=k.label_selector,
                )
        return out

    async def PreEnqueue(
        self, request: pb.PreEnqueueRequest, context: Any
    ) -> pb.PreEnqueueResponse:
        def run() -> pb.PreEnqueueResponse:
            fw = self._framework(request.profile)
            pod = self._pod(request.HasField("pod"), request.pod)
            st = _guard(lambda: fw.run_pre_enqueue(pod))
            return pb.PreEnqueueResponse(status=status_to_pb(st))

        return await self._run(context, run)

    async def QueueSort(self, request: pb.QueueSortRequest, context: Any) -> pb.QueueSortResponse:
        def run() -> pb.QueueSortResponse:
            fw = self._framework(request.profile)
            pods = []
            for i, qp in enumerate(request.pods):
                if not qp.HasField("pod") or not qp.pod.uid:
                    raise errors.invalid(f"pods[{i}].pod.uid", "must not be empty")
                pods.append(QueuedPodInfo(PodInfo(qp.pod), qp.enqueued_unix_micros, qp.attempts))
            snap: Snapshot | None = None
            if request.HasField("state"):
                snap, _gen = self._snapshot(True, request.state)
            elif fw.queue_sort_reads:
                raise errors.invalid(
                    "state",
                    f"required: queueSort plugin {fw.queue_sort.name!r} of profile "
                    f"{fw.name!r} reads objects (DescribeProfiles lists them in Profile.reads)",
                )
            try:
                if snap is None:
                    keys = fw.queue_sort_keys(pods)
                else:
                    with _bound(fw, snap):
                        keys = fw.queue_sort_keys(pods)
            except CycleError as exc:
                raise errors.internal(exc.status.message) from exc
            out = pb.QueueSortResponse()
            for key in keys:
                sk = out.keys.add()
                for part in key:
                    if isinstance(part, int):
                        sk.parts.add(int=int(part))
                    elif isinstance(part, float):
                        sk.parts.add(float=part)
                    else:
                        sk.parts.add(str=str(part))
            return out

        return await self._run(context, run)

    async def PreFilter(self, request: pb.CycleRequest, context: Any) -> pb.PreFilterResponse:
        def run() -> pb.PreFilterResponse:
            fw = self._framework(request.profile)
            snap, gen = self._snapshot(request.HasField("state"), request.state)
            pod = self._pod(request.HasField("pod"), request.pod)
            state = cycle_from_pb(request.cycle)
            with _bound(fw, snap):
                res, st = _guard2(lambda: fw.run_pre_filter(state, pod, snap.all_nodes()))
            out = pb.PreFilterResponse(
                status=status_to_pb(st), cycle=cycle_to_pb(state), generation=gen
            )
            if res is not None and res.node_names is not None:
                out.restrict_nodes = True
                out.nodes.extend(sorted(res.node_names))
            return out

        return await self._run(context, run)

    async def Filter(self, request: pb.NodesRequest, context: Any) -> pb.FilterResponse:
        def run() -> pb.FilterResponse:
            fw = self._framework(request.profile)
            snap, gen = self._snapshot(request.HasField("state"), request.state)
            pod = self._pod(request.HasField("pod"), request.pod)
            nodes = self._nodes(snap, gen, request.nodes, request.all_nodes)
            state = cycle_from_pb(request.cycle)
            out = pb.FilterResponse(generation=gen)
            with _bound(fw, snap):
                try:
                    with fw.extension_point("Filter"):
                        verdicts = fw.run_filter(state, pod, nodes)
                except CycleError as exc:
                    # An Error from a plugin fails every node (the cycle).
                    for name in nodes.names:
                        out.rejected.add(node=name, status=status_to_pb(exc.status))
                    return out
            names = nodes.names
            for k, name in enumerate(names):
                st = verdicts.status_of(k)
                if st.is_success:
                    out.feasible.append(name)
                else:
                    out.rejected.add(node=name, status=status_to_pb(st))
            return out

        return await self._run(context, run)

    async def PostFilter(
        self, request: pb.PostFilterRequest, context: Any
    ) -> pb.PostFilterResponse:
        def run() -> pb.PostFilterResponse:
            fw = self._framework(request.profile)
            snap, _gen = self._snapshot(request.HasField("state"), request.state)
            pod = self._pod(request.HasField("pod"), request.pod)
            state = cycle_from_pb(request.cycle)
            rejected = {ns.node: status_from_pb(ns.status) for ns in request.rejected}
            with _bound(fw, snap):
                res, st = _guard2(lambda: fw.run_post_filter(state, pod, rejected))
            out = pb.PostFilterResponse(status=status_to_pb(st), cycle=cycle_to_pb(state))
            # A result overrides the pod's nomination (upstream's
            # NewPostFilterResultWithNominatedNode); none leaves it (ModeNoop).
            out.nominating_mode = (
                pb.NOMINATING_MODE_NOOP if res is None else pb.NOMINATING_MODE_OVERRIDE
            )
            if res is not None:
                out.nominated_node_name = res.nominated_node_name
                if st.is_success:
                    _add_preemption(out, res.plugin, res.victims, res.clear_nomination_pod_uids)
            _add_signals(out.signals, state.permit_signals)
            return out

        return await self._run(context, run)

    async def PreScore(self, request: pb.NodesRequest, context: Any) -> pb.PreScoreResponse:
        def run() -> pb.PreScoreResponse:
            fw = self._framework(request.profile)
            snap, gen = self._snapshot(request.HasField("state"), request.state)
            pod = self._pod(request.HasField("pod"), request.pod)
            nodes = self._nodes(snap, gen, request.nodes, request.all_nodes)
            state = cycle_from_pb(request.cycle)
            with _bound(fw, snap):
                st = _guard(lambda: fw.run_pre_score(state, pod, nodes))
            return pb.PreScoreResponse(status=status_to_pb(st), cycle=cycle_to_pb(state))

        return await self._run(context, run)

    async def Score(self, request: pb.NodesRequest, context: Any) -> pb.ScoreResponse:
        def run() -> pb.ScoreResponse:
            fw = self._framework(request.profile)
            snap, gen = self._snapshot(request.HasField("state"), request.state)
            pod = self._pod(request.HasField("pod"), request.pod)
            nodes = self._nodes(snap, gen, request.nodes, request.all_nodes)
            state = cycle_from_pb(request.cycle)
            out = pb.ScoreResponse(nodes=nodes.names)
            with _bound(fw, snap):
                try:
                    with fw.extension_point("Score"):
                        raw = fw.run_score_raw(state, pod, nodes)
                except CycleError as exc:
                    out.status.CopyFrom(status_to_pb(exc.status))
                    return out
            for name, scores in raw.items():
                out.plugins.add(plugin=name, weight=fw.score_weights[name], scores=scores.tolist())
            return out

        return await self._run(context, run)

    async def NormalizeScore(
        self, request: pb.NormalizeScoreRequest, context: Any
    ) -> pb.NormalizeScoreResponse:
        def run() -> pb.NormalizeScoreResponse:
            import numpy as np

            fw = self._framework(request.profile)
            snap, gen = self._snapshot(request.HasField("state"), request.state)
            pod = self._pod(request.HasField("pod"), request.pod)
            nodes = self._nodes(snap, gen, request.nodes, None)
            state = cycle_from_pb(request.cycle)
            raw = {}
            for i, ps in enumerate(request.plugins):
                if ps.plugin not in fw.score_weights:
                    raise errors.invalid(
                        f"plugins[{i}].plugin",
                        f"{ps.plugin!r} is not a score plugin of profile {fw.name!r}",
                    )
                if len(ps.scores) != len(nodes):
                    raise errors.invalid(
                        f"plugins[{i}].scores",
                        f"has {len(ps.scores)} scores for {len(nodes)} nodes",
                    )
                raw[ps.plugin] = np.asarray(ps.scores, dtype=np.int64)
            out = pb.NormalizeScoreResponse()
            with _bound(fw, snap):
                try:
                    weighted = fw.normalize_and_weigh(state, pod, nodes, raw)
                except CycleError as exc:
                    out.status.CopyFrom(status_to_pb(exc.status))
                    return out
            totals = np.zeros(len(nodes), dtype=np.int64)
            for name, scores in weighted.items():
                totals += scores
                out.plugins.add(plugin=name, weight=fw.score_weights[name], scores=scores.tolist())
            out.totals.extend(totals.tolist())
            return out

        return await self._run(context, run)

    def _node_call(
        self, request: pb.NodeRequest
    ) -> tuple[Framework, Snapshot, PodInfo, CycleState, str]:
        fw = self._framework(request.profile)
        snap, gen = self._snapshot(request.HasField("state"), request.state)
        pod = self._pod(request.HasField("pod"), request.pod)
        node = self._node(snap, gen, request.node)
        return fw, snap, pod, cycle_from_pb(request.cycle), node

    async def Reserve(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        def run() -> pb.StatusResponse:
            fw, snap, pod, state, node = self._node_call(request)
            with _bound(fw, snap):
                st = _guard(lambda: fw.run_reserve(state, pod, node))
            out = pb.StatusResponse(status=status_to_pb(st), cycle=cycle_to_pb(state))
            if st.is_success:
                out.assume_annotations.update(state.assume_annotations)
            return out

        return await self._run(context, run)

    async def Unreserve(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        def run() -> pb.StatusResponse:
            fw, snap, pod, state, node = self._node_call(request)
            with _bound(fw, snap):
                fw.run_unreserve(state, pod, node)
            # A failed cycle activates nothing (its pods to activate are dropped).
            state.take_activations()
            out = pb.StatusResponse(status=pb.Status(), cycle=cycle_to_pb(state))
            _add_signals(out.signals, state.permit_signals)
            return out

        return await self._run(context, run)

    async def Permit(self, request: pb.NodeRequest, context: Any) -> pb.PermitResponse:
        def run() -> pb.PermitResponse:
            fw, snap, pod, state, node = self._node_call(request)
            with _bound(fw, snap):
                try:
                    st, waits = fw.run_permit(state, pod, node)
                except CycleError as exc:
                    st, waits = exc.status, {}
            # The end of the scheduling cycle: what its plugins asked to
            # activate (carried in the cycle state since PreFilter) goes to
            # the caller when the pod goes on, and is dropped otherwise.
            activate = state.take_activations()
            if not (st.is_success or st.is_wait):
                activate = []
            return _permit_pb(st, waits, state, state.permit_signals, activate)

        return await self._run(context, run)

    async def PreBind(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        def run() -> pb.StatusResponse:
            fw, snap, pod, state, node = self._node_call(request)
            with _bound(fw, snap):
                st = _guard(lambda: fw.run_pre_bind(state, pod, node))
            activate = state.take_activations()
            out = pb.StatusResponse(status=status_to_pb(st), cycle=cycle_to_pb(state))
            if st.is_success:
                _add_writes(out, state)
                out.activate_pod_uids.extend(activate)
            return out

        return await self._run(context, run)

    async def Bind(self, request: pb.NodeRequest, context: Any) -> pb.BindResponse:
        def run() -> pb.BindResponse:
            fw, snap, pod, state, node = self._node_call(request)
            with _bound(fw, snap):
                try:
                    st, plugin = fw.run_bind(state, pod, node)
                except CycleError as exc:
                    st, plugin = exc.status, None
            out = pb.BindResponse(status=status_to_pb(st), node=node)
            if plugin is not None:
                out.bound_by = plugin.name
                out.caller_binds = plugin.caller_binds
            return out

        return await self._run(context, run)

    async def PostBind(self, request: pb.NodeRequest, context: Any) -> pb.StatusResponse:
        def run() -> pb.StatusResponse:
            fw, snap, pod, state, node = self._node_call(request)
            with _bound(fw, snap):
                fw.run_post_bind(state, pod, node)
            activate = state.take_activations()
            out = pb.StatusResponse(status=pb.Status(), cycle=cycle_to_pb(state))
            _add_writes(out, state)
            out.activate_pod_uids.extend(activate)
            return out

        return await self._run(context, run)

    def _schedule(self, request: pb.ScheduleRequest) -> pb.ScheduleResponse:
        fw = self._framework(request.profile)
        snap, gen = self._snapshot(request.HasField("state"), request.state)
        pod = self._pod(request.HasField("pod"), request.pod)
        if request.start_index < 0:
            raise errors.invalid("start_index", f"must be >= 0, got {request.start_index}")
        state = CycleState()
        rng = random.Random(request.seed) if request.seed else None
        result = schedule_pod(
            fw,
            snap,
            state,
            pod,
            start_index=request.start_index,
            reserve_and_permit=request.reserve_and_permit,
            rng=rng,
            explain=request.explain,
        )
        return schedule_response(result, state, gen, request.explain)

    async def _schedule_batch(
        self, request: pb.ScheduleBatchRequest, context: Any
    ) -> pb.ScheduleBatchResponse:
        if len(request.pods) > self.max_batch_pods:
            raise errors.batch_too_large(len(request.pods), self.max_batch_pods)
        if not request.HasField("state"):
            raise errors.invalid("state", "required")
        deadline = _deadline(context)
        caller = self.callers.identify(context)
        key = _state_key(caller, request.state.cluster_id)
        # The batch works in slices: it holds its cluster for its whole run,
        # so no other call sees the pods it assumes.
        async with self.locks.hold(key):
            call = _Call(holding=key, deadline=deadline, caller=caller)
            if request.state.full and full_entries(request.state) > STEPWISE_ENTRIES:
                call.prepared = await self._replace_stepwise(request.state, deadline, caller)

            def begin() -> _Batch:
                fw = self._framework(request.profile)
                snap, gen = self._snapshot(True, request.state)
                b = _Batch(fw, snap, gen, _batch_pods(request), deadline)
                b.start = request.start_index
                return b

            batch = await self._in_worker(lambda: self._whole(begin, call))
            try:
                while not await self._in_worker(lambda: self._batch_slice(batch, request)):
                    pass
                batch.answered = True
            finally:
                # Also when the deadline or a cancellation stopped the batch.
                await self._in_worker(lambda: _undo_batch(batch))
            batch.out.next_start_index = batch.start
            return batch.out

    def _batch_slice(self, b: _Batch, request: pb.ScheduleBatchRequest) -> bool:
        """Schedules the batch's next pods on the worker for up to a slice;
        True when every pod is done."""
        fw, snap, gen, pods = b.fw, b.snap, b.gen, b.pods
        fw.begin_request(b.deadline)
        began = time.perf_counter()
        while b.i < len(pods):
            i, pod = b.i, pods[b.i]
            now = time.perf_counter()
            if b.deadline is not None and b.deadline - now <= (len(pods) - i) * b.fastest:
                log.info(
                    "a ScheduleBatch stopped by its deadline after %d of %d pods", i, len(pods)
                )
                raise errors.deadline(
                    f"deadline: {max(b.deadline - now, 0.0) * 1000:.0f} ms left, too little "
                    f"for the {len(pods) - i} pods still to schedule ({i} of {len(pods)} "
                    "done); the batch stopped and the replica's snapshot is as the batch "
                    "found it: send a smaller batch or a longer deadline"
                )
            if i > b.first and now - began >= self.slice_seconds:
                b.first = i
                return False  # other calls get a turn
            state = CycleState()
            rng = random.Random(request.seed + i) if request.seed else None
            result = schedule_pod(
                fw,
                snap,
                state,
                pod,
                start_index=b.start,
                reserve_and_permit=request.reserve_and_permit,
                rng=rng,
            )
            took = time.perf_counter() - now
            b.fastest = took if not i else min(b.fastest, took)
            b.start = result.next_start_index
            b.out.results.append(schedule_response(result, state, gen, False))
            b.i += 1
            if result.node and _holds_node(result):
                held = snap.pods.get(pod.uid)
                b.placed.append((pod.uid, None if held is None else held.proto))
                # One copy of the pod, made in the delta itself.
                delta = cpb.ClusterDelta()
                assumed = delta.upsert_pods.add()
                assumed.CopyFrom(pod.proto)
                assumed.node_name = result.node
                # What Reserve annotated travels with the assumed pod.
                assumed.annotations.update(b.out.results[-1].assume_annotations)
                snap.apply(delta)
            elif _renominates(result, pod, snap):
                # handleSchedulingFailure: the nominator takes the
                # PostFilter's nomination (or drops the pod's, after any
                # other failure) at once, so the later pods of the batch
                # see it.
                held = snap.pods.get(pod.uid)
                b.placed.append((pod.uid, None if held is None else held.proto))
                delta = cpb.ClusterDelta()
                nominated = delta.upsert_pods.add()
                nominated.CopyFrom(pod.proto)
                nominated.node_name = ""
                nominated.nominated_node_name = result.nominated_node
                snap.apply(delta)
        return True

    async def ScheduleBatch(
        self, request: pb.ScheduleBatchRequest, context: Any
    ) -> pb.ScheduleBatchResponse:
        return await self._answer(context, lambda: self._schedule_batch(request, context))

    async def Schedule(self, request: pb.ScheduleRequest, context: Any) -> pb.ScheduleResponse:
        return await self._run(context, lambda: self._schedule(request))

    async def ScheduleStream(
        self, requests: AsyncIterator[pb.ScheduleRequest | bytes], context: Any
    ) -> AsyncIterator[pb.ScheduleStreamResponse]:
        caller = await self._stream_start(context)
        async for item in requests:
            yield await self._stream_answer(item, caller, context)

    async def schedule_stream_direct(
        self, requests: AsyncIterator[pb.ScheduleRequest | bytes], context: Any
    ) -> None:
        """ScheduleStream through context.read/write instead of an async
        generator: fewer event-loop hops per message (~15% off a streamed round
        trip here). Used when no interceptor wraps the handler (the tracing
        interceptor expects a generator)."""
        caller = await self._stream_start(context)
        while True:
            item = await context.read()
            if item is grpc.aio.EOF:
                return
            await context.write(await self._stream_answer(item, caller, context))

    async def _stream_start(self, context: Any) -> str:
        """A stream names its replica up front (initial metadata) and at its
        end; its caller is known from its start (an unknown one ends it)."""
        context.set_trailing_metadata(self.replica.trailers)
        try:
            caller = self.callers.identify(context)
        except ServiceError as exc:
            await self.replica.abort(context, exc)
        await context.send_initial_metadata(self.replica.trailers)
        return caller

    async def _stream_answer(
        self, item: pb.ScheduleRequest | bytes, caller: str, context: Any
    ) -> pb.ScheduleStreamResponse:
        """One stream message: a response, or the refusal as ``error``. Its
        deadline: ``timeout_millis`` from now, or the stream's, the earlier."""
        read = time.perf_counter()
        size = len(item) if isinstance(item, bytes) else item.ByteSize()
        try:
            self.admission.enter(size)
        except ServiceError as exc:
            return self._refusal(exc)
        try:
            request = await self.parse(pb.ScheduleRequest, item)
            deadline = _deadline(context)
            if request.timeout_millis > 0:
                own = read + request.timeout_millis / 1000
                deadline = own if deadline is None else min(deadline, own)
            return pb.ScheduleStreamResponse(
                response=await self._serve(lambda: self._schedule(request), deadline, caller)
            )
        except Exception as exc:
            return self._refusal(exc)
        finally:
            self.admission.leave(size)

    async def UploadState(
        self, requests: AsyncIterator[pb.UploadStateRequest | bytes], context: Any
    ) -> pb.UploadStateResponse:
        """A full state in parts, built aside and swapped in when the stream
        ends (protos/README.md, "Large clusters")."""
        context.set_trailing_metadata(self.replica.trailers)

        async def work() -> pb.UploadStateResponse:
            caller = self.callers.identify(context)
            deadline = _deadline(context)
            upload: Upload | None = None
            parts = 0
            items = aiter(requests)
            try:
                while True:
                    try:
                        item = await asyncio.wait_for(anext(items), self.upload_idle_seconds)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        after = f"parts[{parts - 1}]" if parts else "the stream began"
                        raise errors.deadline(
                            f"deadline: no part for {self.upload_idle_seconds:g} s after "
                            f"{after}; nothing of the upload was kept: send its parts "
                            "without pausing, and end the stream after the last"
                        ) from None
                    size = len(item) if isinstance(item, bytes) else item.ByteSize()
                    self.admission.enter(size)
                    try:
                        msg = await self.parse(pb.UploadStateRequest, item)
                        field_name = f"parts[{parts}].state"
                        if not msg.HasField("state"):
                            raise errors.invalid(field_name, "required")
                        try:
                            if upload is None:
                                upload = self.store.begin_upload(msg.state, field_name, caller)
                            steps = upload.add(msg.state, field_name)
                        except (InvalidState, StateTooLarge, CacheFull, UploadsFull) as exc:
                            raise _state_error(exc) from exc
                        await self._steps(steps, deadline)
                    finally:
                        self.admission.leave(size)
                    parts += 1
                if upload is None:
                    raise errors.invalid("parts", "the stream carried no part; send at least one")
                done = upload
                async with self.locks.hold(_state_key(caller, done.cluster_id)):
                    try:
                        entry = await self._in_worker(done.finish)
                    except CacheFull as exc:
                        raise _state_error(exc) from exc
            finally:
                if upload is not None:
                    upload.close()
            snap = entry.snapshot
            return pb.UploadStateResponse(
                generation=entry.generation,
                node_count=len(snap.nodes),
                pod_count=len(snap.pods),
                object_count=snap.object_count,
                parts=parts,
            )

        return await self._answer(context, work)

    async def _steps(self, steps: Iterator[None], deadline: float | None) -> None:
        """Runs a stepwise build on the worker, a slice at a time."""
        slice_seconds = self.slice_seconds

        def run_slice() -> bool:
            began = time.perf_counter()
            try:
                while time.perf_counter() - began < slice_seconds:
                    next(steps)
            except StopIteration:
                return True
            except (InvalidState, StateTooLarge, CacheFull) as exc:
                raise _state_error(exc) from exc
            return False

        while not await self._in_worker(run_slice):
            if deadline is not None and time.perf_counter() >= deadline:
                raise errors.deadline(
                    "deadline: passed while this replica built the uploaded state; nothing "
                    "of it was kept: upload it again with a longer deadline"
                )

    def schedule_or_error(self, item: pb.ScheduleRequest | bytes) -> pb.ScheduleStreamResponse:
        """One stream message run whole, for in-process callers (berth bench,
        tests) that run no batch concurrently."""
        try:
            return pb.ScheduleStreamResponse(response=self._schedule(_stream_request(item)))
        except Exception as exc:
            return self._refusal(exc)

    def _refusal(self, exc: Exception) -> pb.ScheduleStreamResponse:
        """A stream message's refusal as the unary call would give it (call
        from the except block: an unexpected error logs its stack)."""
        if isinstance(exc, ServiceError):
            err = exc
        elif isinstance(exc, StateDecodeError):
            err = errors.invalid("cycle.data", str(exc))
        elif isinstance(exc, DeadlineExceeded):
            err = deadline_error(exc)
        else:
            log.exception("internal error serving a stream request")
            err = errors.internal()
        return pb.ScheduleStreamResponse(error=self.replica.request_error(err))


@dataclass(slots=True)
class _Batch:
    """A ScheduleBatch in progress (its slices run on the worker)."""

    fw: Framework
    snap: Snapshot
    gen: int
    pods: list[PodInfo]
    deadline: float | None
    out: pb.ScheduleBatchResponse = field(default_factory=pb.ScheduleBatchResponse)
    start: int = 0
    # The next pod, and the first pod of the current slice.
    i: int = 0
    first: int = 0
    # The fastest cycle so far: with fewer seconds left than the pods left
    # need at that pace, the answer cannot arrive in time.
    fastest: float = 0.0
    # Pods placed in this batch, with what the snapshot held for them
    # before, so the snapshot can be put back: the caller owns the truth.
    placed: list[tuple[str, cpb.Pod | None]] = field(default_factory=list)
    answered: bool = False

    def __post_init__(self) -> None:
        self.out.generation = self.gen


def _batch_pods(request: pb.ScheduleBatchRequest) -> list[PodInfo]:
    if request.start_index < 0:
        raise errors.invalid("start_index", f"must be >= 0, got {request.start_index}")
    seen: set[str] = set()
    pods: list[PodInfo] = []
    for i, msg in enumerate(request.pods):
        if not msg.uid or not msg.name:
            field_name = "uid" if not msg.uid else "name"
            raise errors.invalid(f"pods[{i}].{field_name}", "must not be empty")
        if msg.uid in seen:
            raise errors.invalid(f"pods[{i}].uid", f"{msg.uid!r} repeats")
        seen.add(msg.uid)
        pods.append(PodInfo(msg))
    return pods


def _undo_batch(b: _Batch) -> None:
    """Puts the snapshot back as the batch found it (on the worker)."""
    undo = cpb.ClusterDelta()
    added: list[str] = []
    for uid, previous in reversed(b.placed):
        if previous is not None:
            undo.upsert_pods.append(previous)
        elif b.answered:
            added.append(uid)
        else:
            undo.delete_pods.append(uid)
    b.snap.apply(undo)
    # The pods of an answered batch that were new to the snapshot go when it
    # is next used, unless the caller's next delta brings them back as they
    # were assumed here (Snapshot.remove_later): most do, and stay without
    # being removed and added again. A batch stopped early is answered with
    # an error: its pods go at once.
    b.snap.remove_later(added)


def deadline_error(exc: DeadlineExceeded) -> ServiceError:
    log.info("a call stopped at its deadline: %s", exc)
    return errors.deadline(
        f"deadline: {exc}; the cycle stopped there and nothing of it was kept: retry with "
        "a longer deadline"
    )


def _parse(cls: type[Msg], item: Msg | bytes) -> Msg:
    if not isinstance(item, bytes):
        return item
    try:
        return cls.FromString(item)
    except DecodeError as exc:
        raise errors.invalid(
            "request", f"not a valid {cls.DESCRIPTOR.full_name} message: {exc}"
        ) from exc


def _stream_request(item: pb.ScheduleRequest | bytes) -> pb.ScheduleRequest:
    if not isinstance(item, bytes):
        return item
    try:
        return pb.ScheduleRequest.FromString(item)
    except DecodeError as exc:
        raise errors.invalid(
            "request", f"not a valid berth.v1.ScheduleRequest message: {exc}"
        ) from exc


def schedule_response(
    result: ScheduleResult, state: CycleState, generation: int, explain: bool
) -> pb.ScheduleResponse:
    out = pb.ScheduleResponse(
        status=status_to_pb(result.status),
        node=result.node,
        evaluated_nodes=result.evaluated,
        feasible_nodes=result.feasible,
        next_start_index=result.next_start_index,
        generation=generation,
    )
    if result.node:
        out.cycle.CopyFrom(cycle_to_pb(state))
    if not result.status.is_success or explain:
        d = out.diagnosis
        for name, st in result.rejected.items():
            d.rejected.add(node=name, status=status_to_pb(st))
        d.unschedulable_plugins.extend(sorted(result.unschedulable_plugins))
        if result.pre_filter_status is not None:
            d.pre_filter_status.CopyFrom(status_to_pb(result.pre_filter_status))
        d.message = result.message
    if result.post_filter_status is not None:
        out.post_filter.status.CopyFrom(status_to_pb(result.post_filter_status))
        out.post_filter.nominated_node_name = result.nominated_node
        out.post_filter.nominating_mode = (
            pb.NOMINATING_MODE_OVERRIDE
            if result.nominating_mode is NominatingMode.OVERRIDE
            else pb.NOMINATING_MODE_NOOP
        )
        _add_signals(out.post_filter.signals, result.post_filter_signals)
        _add_preemption(
            out.post_filter,
            result.post_filter_plugin,
            result.victims,
            result.clear_nomination_pod_uids,
        )
    if result.reserve_status is not None:
        out.reserve_status.CopyFrom(status_to_pb(result.reserve_status))
        if result.reserve_status.is_success:
            out.assume_annotations.update(state.assume_annotations)
    if result.permit_status is not None:
        out.permit.CopyFrom(
            _permit_pb(
                result.permit_status,
                result.permit_timeouts,
                state,
                result.permit_signals,
                result.activate_pod_uids,
            )
        )
        # Permit let the pod on and every PreBind plugin's PreBindPreFlight
        # answered Skip: the caller need not call PreBind (the skipped plugins
        # are also recorded in `cycle`, so a PreBind call skips them too).
        out.pre_bind_skip = result.pre_bind_skip
        pre_flight = result.pre_bind_pre_flight_status
        if pre_flight is not None and not (pre_flight.is_success or pre_flight.is_skip):
            out.pre_bind_pre_flight_error.CopyFrom(status_to_pb(pre_flight))
    # Reserve failed or Permit rejected: what the Unreserve that followed asked.
    _add_signals(out.unreserve_signals, result.unreserve_signals)
    if explain and result.scores is not None:
        sc = result.scores
        names = sc.nodes.names
        order = sorted(range(len(names)), key=lambda k: (-int(sc.totals[k]), names[k]))
        per_plugin = {p: s.tolist() for p, s in sc.weighted.items()}
        totals = sc.totals.tolist()
        for k in order:
            ns = out.scores.add(node=names[k], total=totals[k])
            for p, s in per_plugin.items():
                ns.plugins[p] = s[k]
    return out


def _renominates(result: ScheduleResult, pod: PodInfo, snap: Snapshot) -> bool:
    """Does a failed cycle change the pod's nomination as the snapshot holds
    it (NominatingMode OVERRIDE to another node, or to none)?"""
    if result.nominating_mode is not NominatingMode.OVERRIDE:
        return False
    held = snap.pods.get(pod.uid)
    current = pod.proto.nominated_node_name if held is None else held.proto.nominated_node_name
    if held is not None and held.node_name:
        # The snapshot holds the pod on a node (a caller's stale record):
        # leave it to the caller.
        return False
    return result.nominated_node != current


def _holds_node(result: ScheduleResult) -> bool:
    """Does a placed pod count on its node for the next cycle? Yes unless
    Reserve or Permit turned it away (then upstream forgets the assumption)."""
    if result.reserve_status is not None and not result.reserve_status.is_success:
        return False
    st = result.permit_status
    return st is None or st.is_success or st.is_wait


def _permit_pb(
    st: Status,
    waits: Mapping[str, float],
    state: CycleState,
    signals: Iterable[Signal],
    activate: Iterable[str],
) -> pb.PermitResponse:
    out = pb.PermitResponse(status=status_to_pb(st), cycle=cycle_to_pb(state))
    for plugin, seconds in waits.items():
        out.wait_timeout_millis[plugin] = int(seconds * 1000)
    _add_signals(out.signals, signals)
    out.activate_pod_uids.extend(activate)
    return out


def _add_signals(out: Any, signals: Iterable[Signal]) -> None:
    """PostFilter/Permit/Unreserve: the waiting-pod signals plugins raised."""
    for uid, plugin, allow, message in signals:
        out.add(pod_uid=uid, plugin=plugin, allow=allow, message=message)


def _add_preemption(
    out: pb.PostFilterResponse, plugin: str, victims: Iterable[PodInfo], clear: Iterable[str]
) -> None:
    """A successful PostFilter's plugin and what it asks of the caller: the
    victims to evict, in order, and the nominations to clear."""
    out.plugin = plugin
    for v in victims:
        out.victims.add(uid=v.uid, namespace=v.namespace, name=v.name)
    out.clear_nomination_pod_uids.extend(clear)


def _add_writes(out: pb.StatusResponse, state: CycleState) -> None:
    """PreBind/PostBind: the writes plugins asked for, in order."""
    for plugin, write in state.take_writes():
        out.writes.append(write.to_proto(plugin))


class _bound:
    """Points the profile's handle at the request's snapshot for a block."""

    def __init__(self, fw: Framework, snap: Snapshot) -> None:
        self.fw = fw
        self.snap = snap

    def __enter__(self) -> None:
        self.fw.handle.bind_snapshot(self.snap)

    def __exit__(self, *exc: object) -> None:
        self.fw.handle.bind_snapshot(None)


def _guard(fn: Callable[[], Status]) -> Status:
    """A plugin error becomes the call's Error status, as upstream returns it."""
    try:
        return fn()
    except CycleError as exc:
        return exc.status


def _guard2(fn: Callable[[], tuple[Any, Status]]) -> tuple[Any, Status]:
    try:
        return fn()
    except CycleError as exc:
        return None, exc.status


__all__ = [
    "SchedulingService",
    "ServiceError",
    "schedule_response",
    "status_from_pb",
    "status_to_pb",
]
