"""The scheduling loop: informers in, bindings out.

Follows kube-scheduler's pkg/scheduler/schedule_one.go:

- ``ScheduleOne``: pop pods from the queue; one pod goes through
  ScheduleStream (or unary Schedule when traced, so each call carries its
  trace context), several queued pods of one profile through ScheduleBatch
  (each still its own cycle, earlier placements assumed). The service runs
  PreFilter .. Score, host selection, Reserve and Permit.
- ``schedulingCycle`` outcome: a placed pod is assumed in the cache at once
  (so the next cycle sees it) and handed to a binding cycle; a pod no node
  fits gets FailedScheduling (upstream's FitError text), the PodScheduled
  condition False/Unschedulable, nominatedNodeName when a PostFilter
  nominated one, and goes back to the queue.
- ``bindingCycle`` runs as its own task, never blocking the next scheduling
  cycle: nominatedNodeName (NominatedNodeNameForExpectation, when the pod
  waits at Permit or PreBind has work), wait at Permit, PreBind, Bind (the
  pods/binding subresource when the Bind plugin answers caller_binds),
  PostBind, the Scheduled event. Any failure: Unreserve, forget, requeue with
  backoff. PreBind is not called when the scheduling cycle's PreBindPreFlight
  found no PreBind plugin with work (ScheduleResponse.pre_bind_skip); when it
  failed (pre_bind_pre_flight_error), the binding cycle ends with that error
  before anything else, Unreserve aside. When
  DefaultBinder is the only Bind plugin, the shim POSTs the binding without
  asking Bind (the answer could only be caller_binds), so a pod whose PreBind
  plugins all skip costs no RPC beyond its scheduling cycle; the POST goes
  from the event loop (shim.asynchttp) unless the API access configuration
  needs the kubernetes client's pool.
- Objects beyond nodes and pods that the profiles' plugins read
  (DescribeProfiles' Profile.reads) are watched or polled into the cluster
  state (shim/objects.py); Reserve's assume_annotations go on the assumed
  pod; PreBind's writes are applied before binding (a failed write fails
  the binding cycle), PostBind's after it, each only if it targets the pod
  or a kind its plugin declares (shim/guard.py).
- What plugins ask of other pods: signals from PostFilter, Permit and
  Unreserve allow or reject pods waiting at Permit (WaitingPod.Allow/Reject;
  a rejected pod's binding cycle unreserves it); pods to activate
  (PodsToActivate, e.g. Coscheduling's ActivateSiblings) move from the
  backoff queue or the unschedulable pool to the active queue at the end of a
  scheduling cycle that lets its pod on (Permit Success or Wait) and at the
  end of a binding cycle that binds it (PreBind's and PostBind's).
- The plugin service unreachable: the pods of the failed call go to the
  error backoff queue; nothing is dropped; the next call reconnects and the
  cluster-state protocol resyncs the replica.
- Preemption (framework/preemption/executor.go, asynchronous as
  SchedulerAsyncPreemption has it by default): the plugin service picks the
  victims (PostFilterResponse.victims); the shim checks them (shim/guard.py:
  in its cache, on the nominated node, of lower priority, not the preemptor;
  otherwise the preemption is refused whole), nominates the pod, then, in
  a task of its own that never blocks the next cycle, clears the nominations
  of lower-priority pods on that node, rejects victims waiting at Permit and
  marks (DisruptionTarget) and deletes the others. Meanwhile the preemptor is
  held at PreEnqueue (IsPodRunningPreemption); an API failure activates it.
- Nominated pods (backend/queue/nominator.go): pending pods of this shim's
  profiles with a nominated node are in the cluster state (shim/cache.py), from
  the moment PostFilter nominates them, so the plugin service counts them for
  pods of lower or equal priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.kube.asynchttp import AsyncApi
from berth.kube.errors import ApiError
from berth.kube.records import node_record, pod_record
from berth.kube.rest import KubeApi, pod_path
from berth.shim import dra, guard, metrics
from berth.shim.cache import DEFAULT_ASSUMED_TTL, Assumed, AssumeRefused, SchedulerCache
from berth.shim.events import DEFAULT_WRITERS, EventRecorder, ObjectRef
from berth.shim.informer import ADDED, DELETED, Event, Informer, node_key, pod_key
from berth.shim.objects import ObjectSources, Source, WriteFailed, perform_writes
from berth.shim.queue import QueuedPod, SchedulingQueue
from berth.shim.service import BatchTooLarge, PluginService, ServiceUnavailable

log = logging.getLogger(__name__)
tracer = trace.get_tracer("berth.shim")

CODE_SUCCESS = pb.CODE_SUCCESS
CODE_ERROR = pb.CODE_ERROR
CODE_WAIT = pb.CODE_WAIT
CODE_SKIP = pb.CODE_SKIP

# schedule_one.go: the reasons of the PodScheduled condition.
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

# How often the shim asks the plugin service again what its profiles read.
PROFILES_REFRESH_SECONDS = 30.0

# kube-scheduler's informer ignores finished pods (scheduler.go, NewInformerFactory:
# status.phase!=Succeeded,status.phase!=Failed).
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

# executor.go: the default preemption plugin, the gate it holds at PreEnqueue
# while a pod's preemption runs, and the texts of PreemptPod.
DEFAULT_PREEMPTION = "DefaultPreemption"
PREEMPTION_PLUGINS = frozenset({DEFAULT_PREEMPTION})
PREEMPTION_GATE_MESSAGE = "waiting for the preemption for this pod to be finished"
# v1.DisruptionTarget and v1.PodReasonPreemptionByScheduler.
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

# Plugins whose rejection an event may undo (their EventsToRegister in
# pkg/scheduler/framework/plugins/*). A plugin not listed here (out-of-tree, or
# not ported yet) is moved by every event, as upstream treats a plugin that does
# not implement EnqueueExtensions.
NODE_EVENTS_ONLY = {
    "NodeName",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
}
POD_DELETE_HELPS = {"NodeResourcesFit", "NodePorts", "NodeResourcesBalancedAllocation"}


@dataclass
class ShimOptions:
    """How the shim runs; defaults are kube-scheduler's where it has one."""

    # Most pods one ScheduleBatch call takes (1: always ScheduleStream).
    batch_size: int = 16
    assumed_ttl: float = DEFAULT_ASSUMED_TTL
    # Threads that carry API writes (status patches, expiry checks, PreBind and
    # PostBind writes; bindings too when not sent from the event loop).
    bind_workers: int = 16
    # Binding POSTs from the event loop over keep-alive connections
    # (shim.asynchttp), this many at a time; 0: from the worker threads.
    # kube-scheduler has a binding in flight per bound pod (one goroutine each,
    # over HTTP/2); 16 made a queue of bindings that held Berth at ~300 pods
    # waiting in `berth bench SchedulingBasic` where 64 keeps up
    # (docs/benchmarks.md, session 16).
    bind_connections: int = 64


@dataclass(eq=False)
class WaitingPod:
    """A pod held at Permit (upstream's waitingPod): allowed once every
    waiting plugin allows it, rejected by any plugin or by a timeout."""

    qp: QueuedPod
    node: str
    pending: dict[str, float]
    done: asyncio.Future[str | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    # Rejected as a preemption's victim (WaitingPod.Preempt).
    preempted: bool = False

    def allow(self, plugin: str) -> None:
        self.pending.pop(plugin, None)
        if not self.pending and not self.done.done():
            self.done.set_result(None)

    def reject(self, plugin: str, message: str) -> None:
        if not self.done.done():
            self.done.set_result(f"{message} (plugin {plugin})" if plugin else message)


@dataclass
class Counters:
    """What the shim did, for logs, the demo and tests."""

    cycles: int = 0
    scheduled: int = 0
    bound: int = 0
    unschedulable: int = 0
    errors: int = 0
    bind_failures: int = 0
    service_failures: int = 0


class Scheduler:
    def __init__(
        self,
        api: KubeApi,
        service: PluginService,
        profiles: list[str],
        *,
        recorder: EventRecorder | None = None,
        options: ShimOptions | None = None,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
    ) -> None:
        self.api = api
        self.service = service
        self.profiles = set(profiles)
        self.options = options or ShimOptions()
        # One recorder per profile, reporting as the profile's schedulerName, as
        # kube-scheduler's profile.NewMap does (the "From" of kubectl describe).
        self.recorders: dict[str, EventRecorder] = {
            name: EventRecorder(api, name) for name in sorted(self.profiles)
        }
        if recorder is not None:
            self.recorders = dict.fromkeys(self.profiles, recorder)
        self.cache = SchedulerCache(service.state)
        self.queue = SchedulingQueue(
            service.sort_keys,
            self._pre_enqueue,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
        )
        self.counters = Counters()
        self.waiting: dict[str, WaitingPod] = {}
        # Pods whose asynchronous preemption is running, to the plugin that
        # asked for it (executor.go Executor.preempting).
        self.preempting: dict[str, str] = {}
        self._executor = ThreadPoolExecutor(
            max_workers=self.options.bind_workers, thread_name_prefix="berth-api"
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._informers: list[Informer[Any]] = []
        self.objects = ObjectSources(api, self.cache.state, self._on_object_change)
        self._start_index: dict[str, int] = {}
        self._conditions: dict[str, tuple[str, str, str | None]] = {}
        # Pods whose status.nominatedNodeName the binding cycle set (bindingCycle,
        # NominatedNodeNameForExpectation), to that node, until it changes again.
        self._binding_nominations: dict[str, str] = {}
        # Per pod: the lock that orders its status patches, and how many
        # patches hold or wait for it.
        self._condition_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._stopping = asyncio.Event()
        self.ready = False
        # Spans per pod only when they go somewhere.
        self._traced = tracing()
        self._async_api: AsyncApi | None = None
        # The events' own connections, so that events never hold up a binding.
        self._events_api: AsyncApi | None = None
        if self.options.bind_connections > 0:
            self._async_api = AsyncApi.from_kubeapi(api, connections=self.options.bind_connections)
            if self._async_api is None:
                log.info(
                    "binding POSTs and events go from worker threads: the API access "
                    "configuration (a proxy, or assert_hostname) needs the kubernetes "
                    "client's pool"
                )
            else:
                self._events_api = AsyncApi.from_kubeapi(api, connections=DEFAULT_WRITERS)

    # -- lifecycle ----------------------------------------------------------------

    async def run(self) -> None:
        """Starts the informers, waits for their first lists, then schedules
        until ``stop``."""
        loop = asyncio.get_running_loop()
        for rec in set(self.recorders.values()):
            if self._events_api is not None:
                rec.use_event_loop(self._events_api)
            rec.start()
        nodes: Informer[cpb.Node] = Informer(
            self.api,
            "/api/v1/nodes",
            name="nodes",
            decode=node_record,
            key_of=node_key,
            on_events=self._on_node_events,
            loop=loop,
        )
        pods: Informer[cpb.Pod] = Informer(
            self.api,
            "/api/v1/pods",
            name="pods",
            decode=pod_record,
            key_of=pod_key,
            on_events=self._on_pod_events,
            loop=loop,
            field_selector=POD_FIELD_SELECTOR,
        )
        self._informers = [nodes, pods]
        for inf in self._informers:
            inf.start()
        await self._describe_profiles()
        self._update_reads()
        # WaitForCacheSync: nodes first, so pods land on known nodes.
        await nodes.wait_synced()
        await pods.wait_synced()
        await self.objects.wait_synced()
        log.info(
            "caches synced: %d nodes, %d pods on nodes, %d pods queued for %s",
            len(self.cache.nodes),
            len(self.cache.state.pods),
            sum(self.queue.counts().values()),
            ", ".join(sorted(self.profiles)),
        )
        self.ready = True
        self._spawn(self.queue.run_flushers())
        self._spawn(self._admit_loop())
        self._spawn(self._expire_loop())
        self._spawn(self._refresh_profiles_loop())
        try:
            await self._schedule_loop()
        finally:
            self.ready = False

    async def _describe_profiles(self) -> None:
        delay = 0.5
        while not self._stopping.is_set():
            try:
                found = await self.service.describe()
            except ServiceUnavailable as exc:
                log.warning("plugin service not answering yet (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            missing = self.profiles - set(found)
            if missing:
                raise SystemExit(
                    f"berth shim: the plugin service at {self.service.address} does not run "
                    f"profile(s) {', '.join(sorted(missing))}; it has {', '.join(sorted(found))}. "
                    "Start it with the same --config."
                )
            return

    def _update_reads(self) -> None:
        """Watch or poll what this shim's profiles read, nothing more."""
        reads = [
            kind
            for name, info in self.service.profiles.items()
            if name in self.profiles
            for kind in info.reads
        ]
        self.objects.update(reads)

    async def _refresh_profiles_loop(self) -> None:
        """A plugin service restarted with another configuration may read
        other kinds: ask again now and then."""
        while not self._stopping.is_set():
            await asyncio.sleep(PROFILES_REFRESH_SECONDS)
            try:
                await self.service.describe()
            except ServiceUnavailable as exc:
                log.debug("DescribeProfiles refresh failed: %s", exc)
                continue
            self._update_reads()

    def _on_object_change(self, source: Source) -> None:
        """Objects a plugin reads changed: pods its plugins rejected may fit
        now (a plugin's EventsToRegister on that kind)."""
        readers = source.plugins

        def helps(qp: QueuedPod) -> bool:
            return not qp.unschedulable_plugins or bool(qp.unschedulable_plugins & readers)

        self.queue.move_all(f"{source.kind or source.name}Change", helps)

    async def stop(self) -> None:
        self._stopping.set()
        self.queue.close()
        self.objects.stop()
        for inf in self._informers:
            inf.stop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(asyncio.to_thread(rec.stop) for rec in set(self.recorders.values())))
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._async_api is not None:
            await self._async_api.close()
        if self._events_api is not None:
            await self._events_api.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _api(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    # -- informer events ------------------------------------------------------------

    def _on_node_events(self, events: list[Event[cpb.Node]]) -> None:
        for ev in events:
            if ev.type == DELETED:
                self.cache.delete_node(ev.key)
                continue
            old = self.cache.nodes.get(ev.key)
            self.cache.upsert_node(ev.record)
            if ev.type == ADDED or old is None:
                self.queue.move_all("NodeAdd")
            elif _node_changed_for_scheduling(old, ev.record):
                self.queue.move_all("NodeUpdate")

    def _on_pod_events(self, events: list[Event[cpb.Pod]]) -> None:
        for ev in events:
            pod = ev.record
            uid = ev.key
            if ev.type == DELETED:
                was_placed = self.cache.holds(uid)
                was_nominated = bool(self.cache.nominated_to(uid)) or (
                    bool(pod.nominated_node_name) and pod.scheduler_name in self.profiles
                )
                self.cache.remove_pod(uid)
                self.queue.delete(uid)
                self._conditions.pop(uid, None)
                self._binding_nominations.pop(uid, None)
                w = self.waiting.get(uid)
                if w is not None:
                    w.reject("", "pod deleted while waiting at Permit")
                if was_placed:
                    self.queue.move_all("AssignedPodDelete", _pod_delete_helps)
                elif was_nominated and not pod.node_name:
                    # deletePodFromSchedulingQueue: pods of lower or equal
                    # priority counted the nominated pod as if it were assigned.
                    self.queue.move_all("AssignedPodDelete", _le_priority(pod.priority))
                continue
            if pod.node_name:
                # Bound (by us or anyone): it occupies its node; stop queueing it.
                qp = self.queue.get(uid)
                if qp is not None and qp.where != "in_flight":
                    self.queue.delete(uid)
                existed = self.cache.holds(uid)
                self.cache.add_or_update_pod(pod)
                if not existed:
                    self.queue.move_all("AssignedPodAdd", _pod_add_helps)
                continue
            if pod.scheduler_name not in self.profiles:
                continue
            if pod.terminating:
                # skipPodSchedule: a pod being deleted is not scheduled.
                self.queue.delete(uid)
                self.cache.clear_nomination(uid)
                continue
            if self.cache.is_assumed(uid):
                # Being bound: the unbound copy is older news (skipPodUpdate).
                continue
            qp = self.queue.get(uid)
            old = None
            if qp is not None:
                old = qp.updated if qp.updated is not None else qp.pod
                self.queue.update(pod)
            else:
                self.queue.add(pod, pod.scheduler_name)
            if (
                pod.nominated_node_name
                or uid in self.cache.nominated
                or (old is not None and old.nominated_node_name)
            ):
                self._nomination_update(old, pod)

    def _nomination_update(self, old: cpb.Pod | None, pod: cpb.Pod) -> None:
        """A pending pod of ours arrived or changed with a nomination, or lost
        one: the nominator follows (AddNominatedPod, UpdateNominatedPod), and a
        nomination that moved away from a node may let lower or equal priority
        pods fit there (updatePodInSchedulingQueue, hasNominatedNodeNameChanged)."""
        old_node = old.nominated_node_name if old is not None else ""
        self.cache.update_nominated(old_node, pod)
        expected = self._binding_nominations.get(pod.uid)
        if expected is not None and pod.nominated_node_name != expected:
            self._binding_nominations.pop(pod.uid, None)
            if old_node == expected:
                # The binding cycle's nomination, cleared after that cycle failed:
                # the node got back what the assumed pod held when it was
                # forgotten, which moves pods only after a preemption (_bind,
                # handleBindingCycleError); its nomination leaving moves none
                # either, or a gang rejected at Permit would bring its
                # unschedulable member straight back to reject it again.
                return
        if old is not None and old_node and old_node != pod.nominated_node_name:
            self.queue.move_all("AssignedPodDelete", _le_priority(old.priority))

    # -- admission ---------------------------------------------------------------------

    async def _pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        """PreEnqueue: the shim's own gate first (DefaultPreemption.PreEnqueue:
        a pod whose preemption is still running waits for it), then the
        profile's PreEnqueue plugins."""
        plugin = self.preempting.get(pod.uid)
        if plugin is not None:
            return pb.Status(
                code=pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE,
                reasons=[PREEMPTION_GATE_MESSAGE],
                plugin=plugin,
            )
        return await self.service.pre_enqueue(profile, pod)

    async def _admit_loop(self) -> None:
        delay = 0.5
        while not self._stopping.is_set():
            if not self.queue.has_incoming:
                await self.queue.wait_incoming()
            try:
                await self.queue.admit_incoming()
                delay = 0.5
            except ServiceUnavailable as exc:
                metrics.PLUGIN_SERVICE_ERRORS.labels("QueueSort").inc()
                log.warning("cannot admit queued pods: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    # -- scheduling cycles ---------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while not self._stopping.is_set():
            batch = await self.queue.pop_batch(self.options.batch_size)
            if not batch:
                return
            # Pods that changed while queued are scheduled as they are now.
            try:
                await self._schedule(batch)
            except Exception:
                log.exception("scheduling cycle failed unexpectedly; requeueing its pods")
                for qp in batch:
                    if qp.where == "in_flight":
                        self.queue.done_error(qp)

    async def _schedule(self, batch: list[QueuedPod]) -> None:
        batch = self._refuse_resource_claims(batch)
        if not batch:
            return
        profile = batch[0].profile
        start = time.perf_counter()
        pops = time.time()
        spans = [self._attempt_span(qp, pops) for qp in batch]
        metrics.SCHEDULE_BATCH_PODS.observe(len(batch))
        try:
            start_index = self._start_index.get(profile, 0)
            try:
                if len(batch) == 1:
                    with trace.use_span(spans[0], end_on_exit=False):
                        resp = await self.service.schedule(
                            profile, self._as_nominated(batch[0].pod), start_index
                        )
                    results = [resp]
                    self._start_index[profile] = resp.next_start_index
                else:
                    with trace.use_span(spans[0], end_on_exit=False):
                        bresp = await self.service.schedule_batch(
                            profile, [self._as_nominated(qp.pod) for qp in batch], start_index
                        )
                    results = list(bresp.results)
                    self._start_index[profile] = bresp.next_start_index
            except BatchTooLarge as exc:
                smaller = max(1, len(batch) // 2)
                log.warning("%s; sending at most %d pods per batch from now on", exc, smaller)
                self.options.batch_size = smaller
                for qp, span in zip(batch, spans, strict=True):
                    # Not the pods' fault: straight back to the activeQ, no backoff.
                    self.queue.done_retry(qp)
                    span.end()
                return
            except ServiceUnavailable as exc:
                self.counters.service_failures += 1
                metrics.PLUGIN_SERVICE_ERRORS.labels("Schedule").inc()
                log.warning("%s; %d pod(s) back to the queue with backoff", exc, len(batch))
                for qp, span in zip(batch, spans, strict=True):
                    # No cycle ran: the pod's nomination stands.
                    self._failed(
                        qp,
                        str(exc),
                        REASON_SCHEDULER_ERROR,
                        error=True,
                        start=start,
                        nominated=None,
                    )
                    span.set_status(trace.StatusCode.ERROR, str(exc))
                    span.end()
                return
            self.counters.cycles += len(batch)
            for qp, resp, span in zip(batch, results, spans, strict=True):
                self._handle_result(qp, profile, resp, span, start)
        except BaseException:
            for span in spans:
                if span.is_recording():
                    span.end()
            raise

    def _refuse_resource_claims(self, batch: list[QueuedPod]) -> list[QueuedPod]:
        """The batch less the pods with resource claims, each of which is
        reported unschedulable here, whatever the profile (shim/dra.py)."""
        kept: list[QueuedPod] = []
        for qp in batch:
            message = dra.refusal(qp.pod, len(self.cache.nodes))
            if message is None:
                kept.append(qp)
                continue
            self._failed(
                qp,
                message,
                REASON_UNSCHEDULABLE,
                error=False,
                start=time.perf_counter(),
                plugins=frozenset({dra.PLUGIN}),
            )
        return kept

    def _as_nominated(self, pod: cpb.Pod) -> cpb.Pod:
        """The pod as a cycle sees it: with the node this scheduler nominated
        it to even when the informer has not yet delivered the status patch
        that writes it. Upstream's queue holds the pod with the nomination
        applied once the patch call is made (framework/api_calls/
        pod_status_patch.go PodStatusPatchCall.Sync), so the next cycle's
        evaluateNominatedNode (schedule_one.go findNodesThatFitPod) tries that
        node first. A victim's deletion can reach the shim before the patch
        does; without this the retry would weigh every node alike."""
        node = self.cache.nominated_to(pod.uid)
        if not node or pod.nominated_node_name == node:
            return pod
        nominated = cpb.Pod()
        nominated.CopyFrom(pod)
        nominated.nominated_node_name = node
        return nominated

    def _span(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _span(name) if self._traced else contextlib.nullcontext()

    def _attempt_span(self, qp: QueuedPod, popped: float) -> trace.Span:
        if not self._traced:
            return trace.INVALID_SPAN
        span = tracer.start_span(
            "scheduling_attempt",
            attributes={
                "k8s.pod.name": qp.pod.name,
                "k8s.namespace.name": qp.pod.namespace,
                "k8s.pod.uid": qp.uid,
                "berth.profile": qp.profile,
                "berth.attempt": qp.attempts,
            },
        )
        ctx = trace.set_span_in_context(span)
        wait = tracer.start_span(
            "queue_wait", context=ctx, start_time=int(max(qp.enqueued_at, qp.timestamp) * 1e9)
        )
        wait.end(end_time=int(popped * 1e9))
        return span

    def _handle_result(
        self,
        qp: QueuedPod,
        profile: str,
        resp: pb.ScheduleResponse,
        span: trace.Span,
        start: float,
    ) -> None:
        pod = qp.pod
        if qp.uid not in self.queue:
            # Deleted (or bound by someone else) during the cycle.
            span.end()
            return
        st = resp.status
        if st.code == CODE_SUCCESS and resp.node:
            rs = resp.reserve_status
            if rs.code != CODE_SUCCESS:
                # Unreserve ran on the server; it may have signalled waiting pods.
                self._signals(resp.unreserve_signals)
                msg = "; ".join(rs.reasons) or "Reserve failed"
                self._failed(qp, msg, _reason(rs), error=rs.code == CODE_ERROR, start=start)
                span.end()
                return
            permit = resp.permit
            if permit.status.code not in (CODE_SUCCESS, CODE_WAIT, CODE_SKIP):
                # Permit's own signals, then those of the Unreserve that followed.
                self._signals(permit.signals)
                self._signals(resp.unreserve_signals)
                msg = "; ".join(permit.status.reasons) or "rejected at Permit"
                self._failed(
                    qp,
                    msg,
                    _reason(permit.status),
                    error=permit.status.code == CODE_ERROR,
                    start=start,
                )
                span.end()
                return
            try:
                self.cache.assume(pod, resp.node, resp.assume_annotations)
            except AssumeRefused as exc:
                self._assume_refused(qp, exc, start)
                span.set_attribute("berth.result", "error")
                span.end()
                return
            self.counters.scheduled += 1
            self._signals(permit.signals)
            waiting = None
            if permit.status.code == CODE_WAIT:
                pending = {p: ms / 1000.0 for p, ms in permit.wait_timeout_millis.items()}
                waiting = WaitingPod(qp, resp.node, pending)
                self.waiting[qp.uid] = waiting
                metrics.PERMIT_WAITING.set(len(self.waiting))
            # The end of a scheduling cycle that lets the pod on
            # (prepareForBindingCycle): the pods its plugins asked for go active.
            self._activate(pod, "Permit", permit.activate_pod_uids)
            self._spawn(
                self._bind(
                    qp,
                    profile,
                    resp.node,
                    resp.cycle,
                    waiting,
                    span,
                    start,
                    pre_bind_skip=resp.pre_bind_skip,
                    pre_flight_error=resp.pre_bind_pre_flight_error
                    if resp.HasField("pre_bind_pre_flight_error")
                    else None,
                )
            )
            return
        # No node: FitError (Unschedulable) or an Error. PostFilter may have
        # rejected pods waiting at Permit (e.g. the rest of a gang).
        pf = resp.post_filter
        self._signals(pf.signals)
        error = st.code == CODE_ERROR
        msg = resp.diagnosis.message or "; ".join(st.reasons) or "scheduling failed"
        nominated = self._nomination_after_failure(pod, resp)
        plugins = frozenset(resp.diagnosis.unschedulable_plugins)
        if resp.HasField("post_filter") and self._runs_preemption(profile, pf):
            metrics.PREEMPTION_ATTEMPTS.inc()
        # A pod bound while its cycle ran needs no room: nothing is preempted for it
        # (and _failed does not queue it again).
        if (
            pf.nominated_node_name
            and not self.cache.bound_node(qp.uid)
            and not self._start_preemption(qp, pf)
        ):
            # Refused (shim/guard.py): a failed preemption, as when upstream's
            # prepareCandidate fails inside PostFilter (preemption.go Preempt):
            # no NominatingInfo, so the nomination stays as it was, and the pod
            # is unschedulable.
            nominated = None
        self._failed(
            qp,
            msg,
            REASON_SCHEDULER_ERROR if error else REASON_UNSCHEDULABLE,
            error=error,
            start=start,
            plugins=plugins,
            nominated=nominated,
        )
        span.set_attribute("berth.result", "error" if error else "unschedulable")
        span.end()

    def _assume_refused(self, qp: QueuedPod, exc: AssumeRefused, start: float) -> None:
        """schedulingCycle's assume failed (cache.go AssumePod refuses a pod
        already in the cache): the pod was bound while its cycle ran, by a
        binding of an earlier attempt that landed after its call failed, or
        by another scheduler. The cycle ends before Reserve's and Permit's
        answers take effect, as upstream's ends before running them: no
        assumed copy, no waiting, no signals, no Unreserve (nothing was
        reserved here). Like handleSchedulingFailure for a pod the informer
        shows assigned, it is not queued again."""
        pod = qp.pod
        metrics.attempt("error", qp.profile, time.perf_counter() - start)
        self.counters.errors += 1
        if exc.assumed:
            # Not reachable from the queue (a pod is in one cycle at a time);
            # the binding cycle that assumed it decides what becomes of it.
            log.warning(
                "pod %s/%s: %s; this cycle's placement is dropped", pod.namespace, pod.name, exc
            )
            return
        self.queue.done_bound(qp)
        log.info(
            "pod %s/%s was bound to node %s while its scheduling cycle ran (a binding "
            "that landed after its call failed, or another scheduler); not binding it again",
            pod.namespace,
            pod.name,
            exc.node,
        )

    def _signals(self, signals: Iterable[pb.WaitingPodSignal]) -> None:
        """Allow or reject pods already waiting (WaitingPod.Allow/Reject), as
        Permit or Unreserve plugins asked."""
        for sig in signals:
            w = self.waiting.get(sig.pod_uid)
            if w is None:
                continue
            if sig.allow:
                w.allow(sig.plugin)
            elif not w.done.done():
                pod = w.qp.pod
                log.info(
                    "pod %s/%s waiting at Permit rejected by %s: %s",
                    pod.namespace,
                    pod.name,
                    sig.plugin or "a plugin",
                    sig.message or "rejected",
                )
                w.reject(sig.plugin, sig.message or "rejected")

    def _activate(self, pod: cpb.Pod, point: str, uids: Iterable[str]) -> None:
        """PodsToActivate: the named pods, if they wait in the backoff queue or
        the unschedulable pool, go to the active queue now
        (SchedulingQueue.Activate)."""
        wanted = list(uids)
        if not wanted:
            return
        moved = self.queue.activate(wanted)
        log.info(
            "%s of %s/%s asked to activate %d pod(s); %d moved to the active queue",
            point,
            pod.namespace,
            pod.name,
            len(wanted),
            moved,
        )

    def _failed(
        self,
        qp: QueuedPod,
        message: str,
        reason: str,
        *,
        error: bool,
        start: float,
        plugins: frozenset[str] = frozenset(),
        nominated: str | None = "",
    ) -> None:
        """handleSchedulingFailure: event, condition, requeue, nomination.
        ``nominated``: the pod's nominated node from now on ("" clears it,
        upstream's clearNominatedNode), or None to leave it as it is
        (NominatingMode Noop).

        A pod the informer reports bound (bound while this attempt ran) is
        not queued again, as handleSchedulingFailure leaves a pod whose
        informer copy has a nodeName out of the queue. Upstream still records
        FailedScheduling and patches PodScheduled=False on it; here neither is
        written, since the binding already set PodScheduled=True and a
        scheduled pod's status must not say otherwise."""
        pod = qp.pod
        bound_to = self.cache.bound_node(qp.uid)
        if bound_to:
            metrics.attempt(
                "error" if error else "unschedulable", qp.profile, time.perf_counter() - start
            )
            self.queue.done_bound(qp)
            log.info(
                "pod %s/%s is bound to node %s; its failed attempt (%s) is not retried",
                pod.namespace,
                pod.name,
                bound_to,
                message,
            )
            return
        if nominated is not None:
            # AddNominatedPod, before the status patch below reaches the API
            # server: the next cycles count the pod on its node at once.
            self.cache.nominate(pod, nominated)
        result = "error" if error else "unschedulable"
        metrics.attempt(result, qp.profile, time.perf_counter() - start)
        if error:
            self.counters.errors += 1
            self.queue.done_error(qp)
        else:
            self.counters.unschedulable += 1
            self.queue.done_unschedulable(qp, plugins)
        log.info(
            "pod %s/%s %s: %s",
            pod.namespace,
            pod.name,
            "failed" if error else "unschedulable",
            message,
        )
        self.recorders[qp.profile].record(
            _ref(pod), "Warning", "FailedScheduling", "Scheduling", message
        )
        if nominated is None:
            # Left as it is: the nominator's node, which the API has or will
            # have (an earlier patch carrying it may be superseded by this one).
            nominated = self.cache.nominated_to(pod.uid) or None
        self._spawn(self._patch_condition(pod, reason, message, nominated))

    async def _patch_condition(
        self, pod: cpb.Pod, reason: str, message: str, nominated: str | None
    ) -> None:
        """updatePod: PodScheduled=False with the reason and message, and
        nominatedNodeName when ``nominated`` is not None and differs from the
        pod's (None: left as it is), patched only when they change."""
        want = (reason, message, nominated)
        uid = pod.uid
        if self._conditions.get(uid) == want:
            return
        self._conditions[uid] = want
        # One patch per pod at a time, the latest wanted status last: two
        # failures of one pod in quick succession must not land out of order
        # (the older message would stay while the cache says the newer one).
        lock, users = self._condition_locks.get(uid) or (asyncio.Lock(), 0)
        self._condition_locks[uid] = (lock, users + 1)
        try:
            async with lock:
                if self._conditions.get(uid) != want:
                    return  # superseded: the newer status's own task patches it
                await self._send_condition(pod, reason, message, nominated)
        finally:
            lock, users = self._condition_locks[uid]
            if users <= 1:
                del self._condition_locks[uid]
            else:
                self._condition_locks[uid] = (lock, users - 1)

    async def _send_condition(
        self, pod: cpb.Pod, reason: str, message: str, nominated: str | None
    ) -> None:
        want = (reason, message, nominated)
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status: dict[str, Any] = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                }
            ]
        }
        if nominated is not None and nominated != pod.nominated_node_name:
            status["nominatedNodeName"] = nominated or None
        patch = {"metadata": {"uid": pod.uid}, "status": status}
        try:
            await self._api(
                self.api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
            )
        except ApiError as exc:
            if self._conditions.get(pod.uid) == want:
                self._conditions.pop(pod.uid, None)
            if not exc.not_found and not exc.conflict and not exc.uid_mismatch:
                log.warning(
                    "could not update status of pod %s/%s: %s", pod.namespace, pod.name, exc
                )

    # -- preemption (framework/preemption/executor.go) -------------------------------------

    def _runs_preemption(self, profile: str, pf: pb.PostFilterResponse) -> bool:
        """Did this cycle's PostFilter attempt a preemption (what
        scheduler_preemption_attempts_total counts: every DefaultPreemption
        PostFilter call)? Yes when the profile runs a preemption plugin at
        PostFilter, or when the answer names victims."""
        if pf.victims or pf.plugin in PREEMPTION_PLUGINS:
            return True
        info = self.service.profiles.get(profile)
        return info is not None and any(
            p in PREEMPTION_PLUGINS for p in info.points.get("postFilter", ())
        )

    def _nomination_after_failure(self, pod: cpb.Pod, resp: pb.ScheduleResponse) -> str | None:
        """The pod's nominated node after a cycle that found no node
        (schedulingAlgorithm's nominatingInfo): "" clears it, None leaves it.

        An error, or a FitError without PostFilter plugins, clears it
        (clearNominatedNode). Otherwise PostFilter's nominating_mode decides:
        Override sets nominated_node_name ("" clears: no preemption
        candidate), Noop leaves the nomination (the pod may not preempt now,
        PodEligibleToPreemptOthers). A server that does not say (Unspecified)
        gets the same answer worked out here: the nomination stands when the
        pod may not preempt (preemptionPolicy Never) or when its nominated
        node still holds a terminating pod of lower priority, the victims of
        its own preemption being deleted; otherwise it is cleared."""
        if resp.status.code == CODE_ERROR or not resp.HasField("post_filter"):
            return ""
        pf = resp.post_filter
        if pf.nominating_mode == pb.NOMINATING_MODE_NOOP:
            return None
        if pf.nominating_mode == pb.NOMINATING_MODE_OVERRIDE:
            return pf.nominated_node_name
        if pf.nominated_node_name:
            return pf.nominated_node_name
        current = self.cache.nominated_to(pod.uid) or pod.nominated_node_name
        if not current:
            return ""
        if pod.preemption_policy == "Never":
            return None
        for other in self.cache.state.pods.values():
            if other.node_name == current and other.terminating and other.priority < pod.priority:
                return None
        return ""

    def _start_preemption(self, qp: QueuedPod, pf: pb.PostFilterResponse) -> bool:
        """executor.go prepareCandidateAsync: victims already terminating need
        no call; with none left nothing starts. Otherwise the pod is marked as
        preempting (held at PreEnqueue) and the calls run in a task of their
        own. Runs before the pod goes back to the queue, so it is held at
        PreEnqueue from the start (prepareCandidateAsync runs inside
        PostFilter, before handleSchedulingFailure).

        First the shim checks what it is asked to do (shim/guard.py): one
        victim it cannot justify refuses the preemption whole (returns False,
        nothing is deleted); a nomination to clear that is not of a
        lower-priority pod nominated to the node is skipped."""
        pod = qp.pod
        node = pf.nominated_node_name
        plugin = pf.plugin or DEFAULT_PREEMPTION
        context = f"PostFilter of profile {qp.profile}, plugin {plugin}, node {node}"
        refused = guard.check_victims(pod, node, pf.victims, self.cache.state.pods)
        if refused:
            guard.report(refused, pod, context)
            log.warning(
                "preemption for pod %s/%s on node %s refused: %d of its %d victim(s) fail the "
                "shim's checks; nothing is preempted and the pod stays unschedulable",
                pod.namespace,
                pod.name,
                node,
                len(refused),
                len(pf.victims),
            )
            return False
        victims: list[pb.Victim] = []
        for v in pf.victims:
            known = self.cache.state.pods.get(v.uid)
            if known is not None and known.terminating:
                log.debug(
                    "victim %s/%s is already being deleted; no call for it", v.namespace, v.name
                )
                continue
            victims.append(v)
        if not victims:
            return True
        clear: list[str] = []
        for uid in pf.clear_nomination_pod_uids:
            other_qp = self.queue.get(uid)
            other = other_qp.pod if other_qp is not None else self.cache.state.pods.get(uid)
            if other is None:
                continue  # gone: nothing to clear (_clear_nominations skips it too)
            nominated = other.nominated_node_name or self.cache.nominated_to(uid)
            if not nominated:
                continue
            refusal = guard.check_nomination(pod, node, other, nominated)
            if refusal is not None:
                guard.report([refusal], pod, context)
                continue
            clear.append(uid)
        metrics.PREEMPTION_VICTIMS.observe(len(pf.victims))
        self.preempting[pod.uid] = plugin
        self._spawn(self._preempt(pod, node, plugin, victims, clear))
        return True

    async def _preempt(
        self,
        preemptor: cpb.Pod,
        node: str,
        plugin: str,
        victims: list[pb.Victim],
        clear_uids: list[str],
    ) -> None:
        """The goroutine of prepareCandidateAsync: clear the nominations of
        lower-priority pods on the node (a failure is noted, not fatal), then
        preempt every victim concurrently; the first failure cancels the rest.
        At the end the pod leaves the preempting set; after a failure it is
        activated (it might otherwise sit in the unschedulable pool with
        nothing left to move it), else, if an event or its backoff brought it
        to the gate meanwhile, it carries on towards the activeQ
        (SchedulingQueue.ungate).

        Upstream preempts the last victim on its own so that PreEnqueue can
        tell a finished deletion from a pending one, and a deletion event that
        arrives before the goroutine returns is not lost; here the gate is
        lifted in the event loop that delivers the deletions, and a pod an
        event sent to the gate meanwhile is sent on, so no such split is
        needed."""
        start = time.perf_counter()
        ok = True
        log.info(
            "preempting %d pod(s) on node %s for pod %s/%s: %s",
            len(victims),
            node,
            preemptor.namespace,
            preemptor.name,
            ", ".join(f"{v.namespace}/{v.name}" for v in victims),
        )
        try:
            if not await self._clear_nominations(clear_uids, node):
                ok = False
            tasks = [
                asyncio.ensure_future(self._preempt_victim(preemptor, node, plugin, v))
                for v in victims
            ]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for t in done:
                exc = t.exception()
                if exc is not None:
                    ok = False
                    log.warning(
                        "preemption for pod %s/%s on node %s failed: %s",
                        preemptor.namespace,
                        preemptor.name,
                        node,
                        exc,
                    )
        finally:
            self.preempting.pop(preemptor.uid, None)
        result = "success" if ok else "error"
        metrics.preemption_finished(result, time.perf_counter() - start)
        log.info(
            "preemption for pod %s/%s on node %s finished: %s",
            preemptor.namespace,
            preemptor.name,
            node,
            result,
        )
        if ok:
            self.queue.ungate(preemptor.uid, plugin)
        else:
            self._activate(preemptor, "a failed preemption", [preemptor.uid])

    async def _preempt_victim(
        self, preemptor: cpb.Pod, node: str, plugin: str, victim: pb.Victim
    ) -> None:
        """executor.go PreemptPod: a victim waiting at Permit is rejected in
        memory (WaitingPod.Preempt: it goes back to the queue as an error, no
        API call); any other gets the DisruptionTarget condition, then is
        deleted, with its uid as precondition (a victim already gone, or
        replaced by a pod of the same name, is no failure and gets no event).
        Then the Preempted event. Raises ApiError when a call fails."""
        note = f"Preempted by pod {preemptor.uid} on node {node}"
        w = self.waiting.get(victim.uid)
        if w is not None and not w.done.done():
            w.preempted = True
            w.reject(plugin, "preempted")
            log.info(
                "pod %s/%s waiting at Permit preempted by %s/%s",
                victim.namespace,
                victim.name,
                preemptor.namespace,
                preemptor.name,
            )
            note += " (in kube-scheduler memory)."
        else:
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            condition = {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "reason": REASON_PREEMPTION_BY_SCHEDULER,
                "message": (
                    f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod"
                ),
                "lastTransitionTime": now,
            }
            patch = {"metadata": {"uid": victim.uid}, "status": {"conditions": [condition]}}
            path = pod_path(victim.namespace, victim.name)
            try:
                await self._api(self.api.strategic_patch, f"{path}/status", patch)
                await self._api(functools.partial(self.api.delete, path, uid=victim.uid))
            except ApiError as exc:
                # Gone (404), or replaced by a pod of the same name: the patch's
                # uid does not match (422 on metadata.uid), nor the deletion's
                # precondition (409).
                if exc.not_found or exc.conflict or exc.uid_mismatch:
                    log.info(
                        "victim %s/%s is already gone (%s)",
                        victim.namespace,
                        victim.name,
                        exc.reason or exc.status,
                    )
                    return
                raise
            log.info(
                "pod %s/%s preempted pod %s/%s on node %s",
                preemptor.namespace,
                preemptor.name,
                victim.namespace,
                victim.name,
                node,
            )
        self.recorders[preemptor.scheduler_name].record(
            ObjectRef(kind="Pod", namespace=victim.namespace, name=victim.name, uid=victim.uid),
            "Normal",
            "Preempted",
            "Preempting",
            note,
            related=_ref(preemptor),
        )

    async def _clear_nominations(self, uids: list[str], node: str) -> bool:
        """executor.go clearNominatedNodeName: lower-priority pods nominated to
        the node may no longer fit there; their status.nominatedNodeName is
        cleared (the informer brings the change to the nominator, which moves
        them). Returns False when a patch failed."""
        ok = True
        for uid in uids:
            qp = self.queue.get(uid)
            pod = qp.pod if qp is not None else self.cache.state.pods.get(uid)
            if pod is None or not pod.nominated_node_name:
                continue
            self._conditions.pop(uid, None)
            patch = {"metadata": {"uid": uid}, "status": {"nominatedNodeName": None}}
            try:
                await self._api(
                    self.api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
                )
                log.info(
                    "cleared the nomination of pod %s/%s to node %s",
                    pod.namespace,
                    pod.name,
                    node,
                )
            except ApiError as exc:
                if exc.not_found or exc.conflict or exc.uid_mismatch:
                    continue
                log.warning(
                    "could not clear the nomination of pod %s/%s to node %s: %s",
                    pod.namespace,
                    pod.name,
                    node,
                    exc,
                )
                ok = False
        return ok

    # -- binding cycles -------------------------------------------------------------------

    async def _bind(
        self,
        qp: QueuedPod,
        profile: str,
        node: str,
        cycle: pb.CycleState,
        waiting: WaitingPod | None,
        span: trace.Span,
        start: float,
        *,
        pre_bind_skip: bool = False,
        pre_flight_error: pb.Status | None = None,
    ) -> None:
        pod = qp.pod
        token = otel_context.attach(trace.set_span_in_context(span)) if self._traced else None
        try:
            failure = await self._binding_cycle(
                qp,
                profile,
                node,
                cycle,
                waiting,
                pre_bind_skip=pre_bind_skip,
                pre_flight_error=pre_flight_error,
            )
        except asyncio.CancelledError:
            self.cache.forget(qp.uid)
            raise
        except Exception as exc:
            log.exception("binding pod %s/%s failed unexpectedly", pod.namespace, pod.name)
            failure = (f"binding rejected: {exc}", True)
        finally:
            self.waiting.pop(qp.uid, None)
            metrics.PERMIT_WAITING.set(len(self.waiting))
            if token is not None:
                otel_context.detach(token)
        if failure is None:
            self.counters.bound += 1
            metrics.attempt("scheduled", profile, time.perf_counter() - start)
            metrics.scheduled(qp.attempts, time.time() - qp.first_seen)
            self.queue.done_bound(qp)
            self._conditions.pop(qp.uid, None)
            self._binding_nominations.pop(qp.uid, None)
            span.set_attribute("berth.result", "scheduled")
            span.set_attribute("k8s.node.name", node)
            span.end()
            return
        message, requeue = failure
        span.set_status(trace.StatusCode.ERROR, message)
        span.end()
        forgotten = self.cache.forget(qp.uid)
        if requeue and qp.uid in self.queue:
            self.counters.bind_failures += 1
            self._failed(qp, message, REASON_SCHEDULER_ERROR, error=True, start=start)
        else:
            # The pod is gone, or bound by someone else: nothing to retry.
            self.queue.done_bound(qp)
        if forgotten and waiting is not None and waiting.preempted:
            # handleBindingCycleError: forgetting an assumed pod frees what it
            # held on its node, like an assigned pod's deletion: a victim
            # preempted while waiting at Permit makes room for its preemptor.
            # Upstream moves pods after every forgotten binding cycle; the shim
            # only after a preempted one for now: it requeues every Permit
            # rejection as an error, and moving pods after the rejections of a
            # gang (Coscheduling) would bring its unschedulable member straight
            # back (SchedulerPopFromBackoffQ) to reject the gang again.
            self.queue.move_all("AssignedPodDelete", _pod_delete_helps_others(qp.uid))

    async def _binding_cycle(
        self,
        qp: QueuedPod,
        profile: str,
        node: str,
        cycle: pb.CycleState,
        waiting: WaitingPod | None,
        *,
        pre_bind_skip: bool = False,
        pre_flight_error: pb.Status | None = None,
    ) -> tuple[str, bool] | None:
        """Returns None when bound, else (message, requeue).

        ``pre_bind_skip``: the scheduling cycle's PreBindPreFlight found no
        PreBind plugin with work for the pod (ScheduleResponse.pre_bind_skip),
        so PreBind is not called. False, also from a plugin server that
        predates the field, means PreBind is called when the profile has
        PreBind plugins (or is not known). ``pre_flight_error``:
        PreBindPreFlight failed (ScheduleResponse.pre_bind_pre_flight_error),
        which ends the binding cycle at once."""
        pod = qp.pod
        info = self.service.profiles.get(profile)
        # RunPreBindPreFlights' Success as the scheduling cycle reported it.
        pre_bind = (info is None or info.has("preBind")) and not pre_bind_skip

        async def unreserve() -> None:
            if info is None or info.has("reserve"):
                with contextlib.suppress(ServiceUnavailable):
                    resp: pb.StatusResponse = await self.service.node_call(
                        "Unreserve", profile, pod, node, cycle
                    )
                    self._signals(resp.signals)

        if pre_flight_error is not None:
            # schedule_one.go bindingCycle: a failed RunPreBindPreFlights is
            # returned before the nomination, WaitOnPermit and PreBind; the
            # binding cycle's error handling unreserves and requeues.
            await unreserve()
            reasons = "; ".join(pre_flight_error.reasons)
            return reasons or f"PreBindPreFlight of plugin {pre_flight_error.plugin!r} failed", True
        # PreBind's and PostBind's PodsToActivate, activated once bound.
        activate: list[str] = []
        if (pre_bind or waiting is not None) and pod.nominated_node_name != node:
            # schedule_one.go bindingCycle (NominatedNodeNameForExpectation,
            # beta and on in v1.36): when PreBind has work or the pod waits at
            # Permit, the pod is not bound at once, so tell other components
            # (e.g. the cluster autoscaler) where it is going. Otherwise it is
            # bound soon anyway and nothing is written.
            await self._nominate_for_binding(qp, node)
        if waiting is not None:
            with self._span("permit_wait"):
                rejection = await self._wait_permit(waiting)
            if rejection is not None:
                await unreserve()
                return rejection, True
        if node not in self.cache.nodes:
            await unreserve()
            return f"binding rejected: node {node} was deleted", True
        try:
            if pre_bind:
                with self._span("PreBind"):
                    st = await self.service.node_call("PreBind", profile, pod, node, cycle)
                if st.status.code not in (CODE_SUCCESS, CODE_SKIP):
                    await unreserve()
                    # The server's reasons already say which plugin, in upstream's
                    # words (RunPreBindPlugins: 'running PreBind plugin "X": ...').
                    reasons = "; ".join(st.status.reasons)
                    return reasons or f"PreBind plugin {st.status.plugin!r} failed", True
                activate.extend(st.activate_pod_uids)
                refused = self._refused_writes(profile, pod, "PreBind", st.writes)
                if refused:
                    # Nothing written: the binding cycle fails as for a failed write.
                    await unreserve()
                    return f"PreBind writes refused by the scheduler: {refused}", True
                if st.writes:
                    # The plugins' writes, with the shim's credentials, before binding:
                    # a failed write fails PreBind.
                    try:
                        with self._span("PreBind writes"):
                            await self._api(perform_writes, self.api, list(st.writes), pod)
                    except WriteFailed as exc:
                        await unreserve()
                        # Worded as RunPreBindPlugins words a plugin's error.
                        return f'running PreBind plugin "{exc.write.plugin}": {exc}', True
            if info is not None and info.shim_binds:
                # The only Bind plugin is DefaultBinder, whose answer is always
                # Success with caller_binds: POST the binding without asking
                # (default_binder.go Bind).
                with self._span("Bind"):
                    outcome = await self._post_binding(pod, node)
                if outcome is not None:
                    await unreserve()
                    return outcome
            else:
                with self._span("Bind"):
                    bind: pb.BindResponse = await self.service.node_call(
                        "Bind", profile, pod, node, cycle
                    )
                if bind.status.code != CODE_SUCCESS:
                    await unreserve()
                    return (
                        f"binding rejected: {'; '.join(bind.status.reasons) or 'no bind plugin bound the pod'}",
                        True,
                    )
                if bind.caller_binds:
                    with self._span("binding"):
                        outcome = await self._post_binding(pod, node)
                    if outcome is not None:
                        await unreserve()
                        return outcome
        except ServiceUnavailable as exc:
            await unreserve()
            return f"binding rejected: {exc}", True
        self.cache.finish_binding(qp.uid)
        if info is None or info.has("postBind"):
            with contextlib.suppress(ServiceUnavailable), self._span("PostBind"):
                post: pb.StatusResponse = await self.service.node_call(
                    "PostBind", profile, pod, node, cycle
                )
                activate.extend(post.activate_pod_uids)
                await self._post_bind_writes(profile, pod, list(post.writes))
        # kube-scheduler logs a binding at V(2) (schedule_one.go bindingCycle).
        log.debug("bound %s/%s to %s", pod.namespace, pod.name, node)
        # The end of a binding cycle that bound the pod (bindingCycle).
        self._activate(pod, "the binding cycle", activate)
        self._scheduled_event(profile, pod, node)
        return None

    async def _nominate_for_binding(self, qp: QueuedPod, node: str) -> None:
        """bindingCycle's updatePod with NominatingInfo{node, ModeOverride}:
        the pod's status.nominatedNodeName becomes ``node``. A failure is
        logged and the binding cycle goes on, as upstream's does. Once it is
        written, the queued copy of the pod carries it too, so a binding cycle
        that fails clears it again (handleBindingCycleError's
        clearNominatedNode, which upstream patches against the informer's
        copy); a binding that succeeds has it cleared by the API server
        (ClearingNominatedNodeNameAfterBinding)."""
        pod = qp.pod
        patch = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node}}
        try:
            with self._span("nominate"):
                await self._api(
                    self.api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
                )
        except ApiError as exc:
            log.warning(
                "could not set the nominated node of pod %s/%s to %s before binding it "
                "(binding goes on): %s",
                pod.namespace,
                pod.name,
                node,
                exc,
            )
            return
        log.debug("pod %s/%s nominated to %s for its binding", pod.namespace, pod.name, node)
        self._binding_nominations[pod.uid] = node
        # The status changed: a later condition patch must not be skipped as
        # already written (it also clears this nomination).
        self._conditions.pop(pod.uid, None)
        nominated = cpb.Pod()
        nominated.CopyFrom(pod)
        nominated.nominated_node_name = node
        qp.pod = nominated

    def _scheduled_event(self, profile: str, pod: cpb.Pod, node: str) -> None:
        """schedule_one.go bindingCycle: the Scheduled event of a bound pod."""
        self.recorders[profile].record(
            _ref(pod),
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
        )

    async def _post_bind_writes(
        self, profile: str, pod: cpb.Pod, writes: list[pb.ObjectWrite]
    ) -> None:
        """PostBind's writes: the pod stays bound whatever happens; a failure
        is logged and reported as an event on the pod."""
        if not writes:
            return
        refused = self._refused_writes(profile, pod, "PostBind", writes)
        if refused:
            self.recorders[profile].record(
                _ref(pod),
                "Warning",
                "FailedPostBindWrite",
                "PostBind",
                f"PostBind writes refused by the scheduler: {refused}",
            )
            return
        try:
            await self._api(perform_writes, self.api, writes, pod)
        except WriteFailed as exc:
            log.warning("pod %s/%s: PostBind %s", pod.namespace, pod.name, exc)
            self.recorders[profile].record(
                _ref(pod), "Warning", "FailedPostBindWrite", "PostBind", str(exc)
            )

    def _refused_writes(
        self, profile: str, pod: cpb.Pod, point: str, writes: Sequence[pb.ObjectWrite]
    ) -> str:
        """The writes of a PreBind or PostBind answer the shim will not
        perform (shim/guard.py), logged and counted; "" when it performs them
        all. One refused refuses them all."""
        if not writes:
            return ""
        declared = self.service.declared_writes.get(profile, {})
        refused = guard.check_writes(pod, writes, declared)
        if not refused:
            return ""
        guard.report(refused, pod, f"{point} of profile {profile}")
        return "; ".join(str(r) for r in refused)

    async def _wait_permit(self, w: WaitingPod) -> str | None:
        """WaitOnPermit: the first plugin to time out rejects the pod."""
        timeout = min(w.pending.values()) if w.pending else 0.0
        try:
            return await asyncio.wait_for(asyncio.shield(w.done), timeout)
        except TimeoutError:
            plugin = min(w.pending, key=lambda p: w.pending[p]) if w.pending else ""
            return f"rejected due to timeout after waiting {timeout:g}s at plugin {plugin}"

    async def _post_binding(self, pod: cpb.Pod, node: str) -> tuple[str, bool] | None:
        """DefaultBinder's write, done here with the shim's credentials:
        POST pods/binding. Returns None when bound."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        nodes = self.cache.nodes
        path = pod_path(pod.namespace, pod.name, "binding")
        if self._async_api is not None:
            try:
                await self._async_api.wait_for_token()
                if node not in nodes:
                    return f"binding rejected: node {node} was deleted", True
                await self._async_api.request("POST", path, body=body, limit=False)
                return None
            except ApiError as exc:
                return await self._binding_error(pod, node, exc)

        def post() -> bool:
            # The rate limiter may hold the bind for a while: check the node is
            # still there after waiting, right before the write.
            self.api.wait_for_token()
            if node not in nodes:
                return False
            self.api.request("POST", path, body=body, limit=False)
            return True

        try:
            if not await self._api(post):
                return f"binding rejected: node {node} was deleted", True
            return None
        except ApiError as exc:
            return await self._binding_error(pod, node, exc)

    async def _binding_error(
        self, pod: cpb.Pod, node: str, exc: ApiError
    ) -> tuple[str, bool] | None:
        """What a refused binding POST means: (message, requeue), or None when
        the pod turns out bound to ``node`` after all.

        A 404 says the pod is gone. 429, 403, 400 and 422 say the binding was
        not made: back off and retry. Any other answer leaves the outcome in
        doubt: no answer (a timeout, a dropped connection) or a 5xx may come
        after the binding was written, and a 409 says the pod is already
        assigned (by an earlier attempt whose answer was lost, or another
        scheduler) or was replaced by a pod of the same name. Then the API
        server is asked (a quorum read) before the node gets its resources
        back, so a pod that is bound is never forgotten for the moment until
        its watch event comes: bound to ``node``, the binding landed and the
        binding cycle goes on; bound elsewhere, the cache takes that copy and
        the pod is not retried; not bound, it is retried; gone or replaced, it
        is dropped. (Upstream forgets the pod at once and handleSchedulingFailure
        reads the informer's copy; the informer may not have seen the binding
        yet, the API server has.)"""
        if exc.not_found:
            return f"binding rejected: pod {pod.namespace}/{pod.name} no longer exists", False
        if exc.status in (400, 403, 422, 429):
            return f"binding rejected: {exc}", True
        # What the informer reports while the GET is under way is newer than its answer.
        entry = self.cache.assumed.get(pod.uid)
        try:
            obj = await self._api(self.api.get, pod_path(pod.namespace, pod.name))
        except ApiError as get_exc:
            if get_exc.not_found:
                self.cache.remove_pod(pod.uid)
                return (
                    f"binding rejected: pod {pod.namespace}/{pod.name} no longer exists",
                    False,
                )
            log.warning(
                "binding of pod %s/%s to %s failed (%s) and its outcome cannot be checked "
                "(%s); retrying it",
                pod.namespace,
                pod.name,
                node,
                exc,
                get_exc,
            )
            return f"binding rejected: {exc}", True
        current = pod_record(obj)
        if current.uid != pod.uid:
            self.cache.remove_pod(pod.uid)
            return (
                f"binding rejected: pod {pod.namespace}/{pod.name} was replaced by another "
                f"of the same name (uid {current.uid})",
                False,
            )
        if not self.cache.still_assumed(entry):
            # The informer reported the pod before the GET's answer was handled:
            # its report is the truth, bound (the cache holds it) or not (deleted
            # or finished; not retried).
            bound_to = self.cache.bound_node(pod.uid)
            if not bound_to:
                return (
                    f"binding rejected: pod {pod.namespace}/{pod.name} was deleted or finished "
                    f"while its binding ({exc}) was checked",
                    False,
                )
            current.node_name = bound_to
        elif not current.node_name:
            return f"binding rejected: {exc}", True
        else:
            # AddPod: the API server's copy replaces the assumed one, wherever it is.
            self.cache.add_or_update_pod(current)
        if current.node_name == node:
            log.info(
                "binding of pod %s/%s to %s was made although its call failed (%s)",
                pod.namespace,
                pod.name,
                node,
                exc,
            )
            return None
        log.info(
            "pod %s/%s is already bound to %s (binding it to %s: %s)",
            pod.namespace,
            pod.name,
            current.node_name,
            node,
            exc,
        )
        return f"binding rejected: pod is already bound to node {current.node_name}", False

    # -- assumed pods that never showed up ----------------------------------------------------

    async def _expire_loop(self) -> None:
        ttl = self.options.assumed_ttl
        while not self._stopping.is_set():
            await asyncio.sleep(max(1.0, ttl / 4))
            for a in self.cache.expired(ttl):
                await self._check_expired(a)

    async def _check_expired(self, entry: Assumed) -> None:
        """An assumed pod whose binding finished ``assumed_ttl`` ago without the
        informer confirming it: the API server says what it is. Its answer is
        applied only if the informer has still said nothing (``still_assumed``):
        a report that came while the GET was under way is newer."""
        pod = entry.pod
        try:
            obj = await self._api(self.api.get, pod_path(pod.namespace, pod.name))
        except ApiError as exc:
            if exc.not_found:
                log.warning("assumed pod %s/%s is gone; removing it", pod.namespace, pod.name)
                self.cache.remove_pod(pod.uid)
            return
        if not self.cache.still_assumed(entry):
            return
        current = pod_record(obj)
        if current.uid != pod.uid:
            self.cache.remove_pod(pod.uid)
        elif current.node_name:
            self.cache.add_or_update_pod(current)
        else:
            log.warning(
                "assumed pod %s/%s was never bound; scheduling it again", pod.namespace, pod.name
            )
            self.cache.forget(pod.uid)
            if pod.scheduler_name in self.profiles and pod.uid not in self.queue:
                self.queue.add(current, pod.scheduler_name)


def _reason(st: pb.Status) -> str:
    return REASON_SCHEDULER_ERROR if st.code == CODE_ERROR else REASON_UNSCHEDULABLE


def _ref(pod: cpb.Pod) -> ObjectRef:
    return ObjectRef(kind="Pod", namespace=pod.namespace, name=pod.name, uid=pod.uid)


def _pod_delete_helps(qp: QueuedPod) -> bool:
    return not qp.unschedulable_plugins or not qp.unschedulable_plugins <= NODE_EVENTS_ONLY


def _pod_delete_helps_others(uid: str) -> Callable[[QueuedPod], bool]:
    """An assumed pod forgotten: the other pods its deletion may help."""

    def helps(qp: QueuedPod) -> bool:
        return qp.uid != uid and _pod_delete_helps(qp)

    return helps


def _le_priority(priority: int) -> Callable[[QueuedPod], bool]:
    """getLEPriorityPreCheck: pods of lower or equal priority, for the event
    of a nominated pod leaving a node (checked against their rejectors as an
    assigned pod's deletion is)."""

    def helps(qp: QueuedPod) -> bool:
        return qp.pod.priority <= priority and _pod_delete_helps(qp)

    return helps


def _pod_add_helps(qp: QueuedPod) -> bool:
    return not qp.unschedulable_plugins <= (NODE_EVENTS_ONLY | POD_DELETE_HELPS)


def _node_changed_for_scheduling(old: cpb.Node, new: cpb.Node) -> bool:
    """Node updates that can change a placement (upstream's nodeSchedulingPropertiesChange):
    allocatable, labels, taints, unschedulable, annotations."""
    return (
        old.allocatable != new.allocatable
        or old.labels != new.labels
        or list(old.taints) != list(new.taints)
        or old.unschedulable != new.unschedulable
        or old.annotations != new.annotations
    )


@contextlib.contextmanager
def _span(name: str) -> Iterator[None]:
    with tracer.start_as_current_span(name):
        yield


def tracing() -> bool:
    """Is a tracer provider installed (berth shim --otlp-endpoint, or
    OTEL_PYTHON_TRACER_PROVIDER)? Without one every span is a no-op, not
    worth building per pod."""
    return not isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    )


__all__ = ["Counters", "Scheduler", "ShimOptions", "WaitingPod"]
