"""The scheduler: its parts wired together, and the loop that runs them
(pkg/scheduler/scheduler.go New, Run).

``Scheduler`` builds the cache, the queue and the collaborators that follow
upstream's seams, each handed only what it uses:

- ``EventHandlers`` (shim/eventhandlers.py): the informers' callbacks;
- ``SchedulingCycle`` and ``FailureHandler`` (shim/schedule_one.py): one
  scheduling cycle, and what a failed attempt writes and where the pod goes;
- ``BindingCycle`` and ``Binder`` (shim/binding.py): Permit waits, PreBind,
  Bind, PostBind, each binding cycle a task of its own;
- ``PreemptionExecutor`` (shim/preemption.py): the preemptions the plugin
  service decided, carried out asynchronously;
- ``PodStatusWriter`` (shim/podstatus.py): the PodScheduled condition and the
  nominated node.

``run`` starts the event recorders and the informers of nodes and pods,
asks the plugin service what its profiles read (and again every 30 s) and
watches or polls those objects (shim/objects.py), waits for the caches to
sync, then runs the queue's flushers, admission (PreEnqueue, QueueSort), the
check of assumed pods that never showed up, and the scheduling loop until
``stop``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.events import unroll_wildcard_resource
from berth.framework.extenders import ExtenderConfig
from berth.kube.asynchttp import AsyncApi
from berth.kube.errors import ApiError
from berth.kube.records import PodSlabs, node_record, pod_record
from berth.kube.rest import JSON, KubeApi, pod_path
from berth.shim import metrics
from berth.shim.background import ApiWorkers, Tasks
from berth.shim.binding import Binder, BindingCycle, WaitingPods
from berth.shim.cache import DEFAULT_ASSUMED_TTL, Assumed, SchedulerCache
from berth.shim.eventhandlers import EventHandlers
from berth.shim.events import EventRecorder, ThreadedSink
from berth.shim.explain import DEFAULT_MAX_ENTRIES, AttemptStore, Explainer
from berth.shim.extenders import EXTENDER_PLUGIN, Extenders
from berth.shim.hints import HintMap
from berth.shim.informer import DELETED, Event, Informer, node_key, pod_key
from berth.shim.metrics import Counters
from berth.shim.objects import ObjectChange, ObjectSources, Source
from berth.shim.podstatus import PodStatusWriter
from berth.shim.preemption import PreemptionExecutor
from berth.shim.queue import SchedulingQueue
from berth.shim.schedule_one import FailureHandler, SchedulingCycle
from berth.shim.service import GangSchedulingGate, PluginService, ServiceUnavailable

if TYPE_CHECKING:
    # berth shim --record only; app.py imports it then.
    from berth.shim.record import Recording

log = logging.getLogger(__name__)

R = TypeVar("R")

# How often the shim asks the plugin service again what its profiles read.
PROFILES_REFRESH_SECONDS = 30.0

# kube-scheduler's informer ignores finished pods (scheduler.go, NewInformerFactory:
# status.phase!=Succeeded,status.phase!=Failed).
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


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
    # (berth.kube.asynchttp), this many at a time, shared with the events (which
    # hold at most half of them); 0: both from the worker threads.
    # kube-scheduler has a binding in flight per bound pod (one goroutine each,
    # over HTTP/2); fewer connections queue the bindings of a burst of pods
    # behind one another. Each connection costs a TLS handshake, ~1.5 ms of
    # client CPU, and a drain opens every one: with 32 rather than 64 drains ran
    # as fast or faster, on less CPU in the shim and the API server
    # (docs/benchmarks.md, "The write pool's connections: 32 by default").
    bind_connections: int = 32
    # Pending pods whose last failed attempt is kept for explanations
    # (shim/explain.py, GET /debug/explain); 0 keeps none.
    explain_entries: int = DEFAULT_MAX_ENTRIES


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
        extenders: Sequence[ExtenderConfig] = (),
        record: Recording | None = None,
    ) -> None:
        """``extenders``: KubeSchedulerConfiguration.extenders (shim/extenders.py).
        ``record``: berth shim --record's recorder (shim/record.py), which
        gets every informer event and every cycle's call and answers; the
        cluster state's changes it gets from ``service.state``."""
        self.api = api
        self.record = record
        self.service = service
        self.profiles = set(profiles)
        self.options = options or ShimOptions()
        self.cache = SchedulerCache(service.state)
        self.queue = SchedulingQueue(
            service.sort_keys,
            self._pre_enqueue,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
        )
        self.counters = Counters()
        self.extenders = Extenders(extenders, profiles) if extenders else None
        self.waiting = WaitingPods()
        self.tasks = Tasks()
        self._workers = ApiWorkers(self.options.bind_workers)
        self._informers: list[Informer[Any]] = []
        self._cache_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.ready = False
        # Set once the informers' first lists are in the cache (start_cache).
        self.synced = asyncio.Event()
        # Spans per pod only when they go somewhere.
        traced = tracing()
        self._async_api: AsyncApi | None = None
        # The events share the bindings' connections as background requests:
        # they hold at most half of them, the other half is the bindings' own.
        events_api: AsyncApi | None = None
        if self.options.bind_connections > 0:
            self._async_api = AsyncApi.from_kubeapi(api, connections=self.options.bind_connections)
            if self._async_api is None:
                log.info(
                    "binding POSTs and events go from worker threads: the API access "
                    "configuration (a proxy, or assert_hostname) needs the kubernetes "
                    "client's pool"
                )
            else:
                # The recorder needs only to know an Event was written, not
                # the Event the API server sends back.
                events_api = self._async_api.background(decode=False)
        self._events_api: AsyncApi | ThreadedSink = events_api or ThreadedSink(api)
        # One recorder per profile, reporting as the profile's schedulerName, as
        # kube-scheduler's profile.NewMap does (the "From" of kubectl describe).
        self.recorders: dict[str, EventRecorder] = {
            name: EventRecorder(self._events_api, name) for name in sorted(self.profiles)
        }
        if recorder is not None:
            self.recorders = dict.fromkeys(self.profiles, recorder)

        self.pod_status = PodStatusWriter(api, self._workers)
        # Pods whose status.nominatedNodeName a binding cycle set, to that node
        # (bindingCycle, NominatedNodeNameForExpectation), until it changes again.
        binding_nominations: dict[str, str] = {}
        self.event_handlers = EventHandlers(
            profiles=self.profiles,
            cache=self.cache,
            queue=self.queue,
            waiting=self.waiting,
            status=self.pod_status,
            binding_nominations=binding_nominations,
        )
        self.objects = ObjectSources(
            api,
            self.cache.state,
            self.event_handlers.on_object_change
            if record is None
            else recorded_objects(record, self.event_handlers.on_object_change),
        )
        self.preemption = PreemptionExecutor(
            api=api,
            workers=self._workers,
            tasks=self.tasks,
            cache=self.cache,
            queue=self.queue,
            waiting=self.waiting,
            recorders=self.recorders,
            status=self.pod_status,
        )
        self.attempts: AttemptStore | None = None
        if self.options.explain_entries > 0:
            self.attempts = AttemptStore(self.options.explain_entries)
            self.queue.on_leave = self.attempts.drop
        handle_failure = FailureHandler(
            cache=self.cache,
            queue=self.queue,
            recorders=self.recorders,
            status=self.pod_status,
            counters=self.counters,
            tasks=self.tasks,
            attempts=self.attempts,
        )
        self.explainer = Explainer(
            cache=self.cache,
            queue=self.queue,
            service=service,
            store=self.attempts if self.attempts is not None else AttemptStore(1),
            waiting=self.waiting,
        )
        self.binding = BindingCycle(
            api=api,
            workers=self._workers,
            service=service,
            cache=self.cache,
            queue=self.queue,
            waiting=self.waiting,
            binder=Binder(api, self._async_api, self._workers, self.cache),
            recorders=self.recorders,
            status=self.pod_status,
            nominations=binding_nominations,
            counters=self.counters,
            handle_failure=handle_failure,
            on_forgotten=self.event_handlers.assumed_pod_forgotten,
            traced=traced,
            on_written=self.objects.written,
            extenders=self.extenders,
        )
        self.scheduling_cycle = SchedulingCycle(
            service=service,
            cache=self.cache,
            queue=self.queue,
            waiting=self.waiting,
            bind=self.binding.run,
            preempt=self.preemption.start,
            handle_failure=handle_failure,
            post_filter_writes=self.binding.post_filter_writes,
            tasks=self.tasks,
            counters=self.counters,
            batch_size=self.options.batch_size,
            traced=traced,
            extenders=self.extenders,
            extender_preemption=(
                functools.partial(self.preemption.run_extenders, self.extenders)
                if self.extenders is not None and self.extenders.any_preempt
                else None
            ),
            record=record,
        )

    # -- lifecycle ----------------------------------------------------------------

    async def start_cache(self) -> None:
        """Starts the informers and waits for their first lists (server.go
        ``startInformersAndWaitForSync``). Called more than once, it starts
        them once and each call waits for the same sync: before the election
        when ``delayCacheUntilActive`` is false (shim/app.py), else from
        ``run`` once this replica leads."""
        if self._cache_task is None:
            self._cache_task = asyncio.create_task(self._start_cache())
        await asyncio.shield(self._cache_task)

    async def _start_cache(self) -> None:
        loop = asyncio.get_running_loop()
        decode_node: Callable[[JSON], cpb.Node] = node_record
        decode_pod: Callable[[JSON], cpb.Pod] = pod_record
        # The first list's pods share messages (PodSlabs: less memory a pod).
        decode_listed_pods: Callable[[], Callable[[JSON], cpb.Pod]] | None = PodSlabs
        on_node_events: Callable[[list[Event[cpb.Node]]], None] = self.event_handlers.on_node_events
        on_pod_events: Callable[[list[Event[cpb.Pod]]], None] = self.event_handlers.on_pod_events
        if self.extenders is not None:
            # The extenders are sent full objects: keep their JSON as the
            # informers deliver them.
            objects = self.extenders.objects
            decode_node = objects.node_decoder(node_record)
            decode_pod = objects.pod_decoder(pod_record)
            decode_listed_pods = None
            on_node_events = _pruning(on_node_events, objects.on_deleted_node)
            on_pod_events = _pruning(on_pod_events, objects.on_deleted_pod)
        nodes: Informer[cpb.Node] = Informer(
            self.api,
            "/api/v1/nodes",
            name="nodes",
            decode=decode_node,
            key_of=node_key,
            on_events=recorded(self.record, "nodes", on_node_events),
            loop=loop,
        )
        pods: Informer[cpb.Pod] = Informer(
            self.api,
            "/api/v1/pods",
            name="pods",
            decode=decode_pod,
            decode_first_list=decode_listed_pods,
            key_of=pod_key,
            on_events=recorded(self.record, "pods", on_pod_events),
            loop=loop,
            field_selector=POD_FIELD_SELECTOR,
        )
        self._informers = [nodes, pods]
        for inf in self._informers:
            inf.start()
        await self._describe_profiles()
        self._update_reads()
        self._update_hints()
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
        self.synced.set()

    async def run(self) -> None:
        """Starts the cache (unless ``start_cache`` already has), then
        schedules until ``stop``."""
        for rec in set(self.recorders.values()):
            rec.start()
        await self.start_cache()
        self.ready = True
        self.tasks.spawn(self.queue.run_flushers())
        self.tasks.spawn(self.queue.run_hints())
        self.tasks.spawn(self._admit_loop())
        self.tasks.spawn(self._expire_loop())
        self.tasks.spawn(self._refresh_profiles_loop())
        try:
            while not self._stopping.is_set():
                if not await self.scheduling_cycle.schedule_one():
                    return
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
        self.event_handlers.move_on_unscheduled_add = any(
            GangSchedulingGate.name in info.points.get("preEnqueue", ())
            for name, info in self.service.profiles.items()
            if name in self.profiles
        )

    def _update_hints(self) -> None:
        """The queue's hint map: the events this shim's profiles' rejecting
        plugins registered (DescribeProfiles), their hints asked through
        QueueingHints."""
        events = {
            name: info.events
            for name, info in self.service.profiles.items()
            if name in self.profiles
        }
        if self.extenders is not None:
            # framework.go NewFramework: with extenders, "Extender" registers
            # every event without a hint (defaultEnqueueExtension), so a pod
            # extenders rejected is retried by any cluster event.
            extra = [
                pb.RegisteredEvent(
                    plugin=EXTENDER_PLUGIN,
                    resource=e.event.resource,
                    action_type=int(e.event.action_type),
                )
                for e in unroll_wildcard_resource()
            ]
            events = {name: (*regs, *extra) for name, regs in events.items()}
        self.queue.set_hints(HintMap.from_profiles(events), self.service.queueing_hints)

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
            self._update_hints()

    async def stop(self) -> None:
        self._stopping.set()
        if self._cache_task is not None and not self._cache_task.done():
            self._cache_task.cancel()
            await asyncio.gather(self._cache_task, return_exceptions=True)
        self.queue.close()
        self.objects.stop()
        for inf in self._informers:
            inf.stop()
        await self.tasks.cancel_all()
        await asyncio.gather(*(rec.stop() for rec in set(self.recorders.values())))
        self._workers.shutdown()
        if self._async_api is not None:
            await self._async_api.close()
        await self._events_api.close()
        if self.extenders is not None:
            await self.extenders.close()

    # -- admission ---------------------------------------------------------------------

    async def _pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        """PreEnqueue: the shim's own gate first (DefaultPreemption.PreEnqueue:
        a pod whose preemption is still running waits for it), then the
        profile's PreEnqueue plugins."""
        gated = self.preemption.gate(pod)
        if gated is not None:
            return gated
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
            obj = await self._workers.call(self.api.get, pod_path(pod.namespace, pod.name))
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


def recorded(
    record: Recording | None, kind: str, handler: Callable[[list[Event[R]]], None]
) -> Callable[[list[Event[R]]], None]:
    """An informer's callback that records each event before handling it."""
    if record is None:
        return handler

    def on_events(events: list[Event[R]]) -> None:
        for ev in events:
            record.event(kind, ev.type, ev.record)
        handler(events)

    return on_events


def recorded_objects(
    record: Recording, handler: Callable[[Source, Sequence[ObjectChange]], None]
) -> Callable[[Source, Sequence[ObjectChange]], None]:
    """ObjectSources' callback that records each change of a kind a plugin
    reads (after the state took it: ObjectSources applies, then reports)."""

    def on_change(source: Source, changes: Sequence[ObjectChange]) -> None:
        for type_, old, new in changes:
            record.event(source.name, type_, new if new is not None else old)
        handler(source, changes)

    return on_change


def tracing() -> bool:
    """Is a tracer provider installed (berth shim --otlp-endpoint, or
    OTEL_PYTHON_TRACER_PROVIDER)? Without one every span is a no-op, not
    worth building per pod."""
    return not isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    )


__all__ = ["Counters", "Scheduler", "ShimOptions"]


def _pruning(
    handler: Callable[[list[Event[R]]], None], drop: Callable[[str, str], None]
) -> Callable[[list[Event[R]]], None]:
    """The informer's handler, after ``drop(key, resourceVersion)`` for each
    DELETED event (what ObjectJson kept of the object goes)."""

    def on_events(events: list[Event[R]]) -> None:
        for ev in events:
            if ev.type == DELETED:
                drop(ev.key, ev.resource_version)
        handler(events)

    return on_events
