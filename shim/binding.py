"""The binding cycle (pkg/scheduler/schedule_one.go bindingCycle), which runs
as a task of its own, never blocking the next scheduling cycle:

1. a failed PreBindPreFlight (ScheduleResponse.pre_bind_pre_flight_error)
   ends it at once, Unreserve aside;
2. nominatedNodeName set to the node when the pod waits at Permit or PreBind
   has work (NominatedNodeNameForExpectation);
3. the wait at Permit (WaitOnPermit: allowed by every waiting plugin, or
   rejected by one, by a timeout, or as a preemption's victim);
4. PreBind, unless the scheduling cycle's PreBindPreFlight found no PreBind
   plugin with work (ScheduleResponse.pre_bind_skip), then PreBind's writes
   (shim/objects.py), each checked first (shim/guard.py);
5. Bind: the pods/binding subresource when the Bind plugin answers
   caller_binds, or straight away when DefaultBinder is the profile's only
   Bind plugin (its answer could only be caller_binds), so a pod whose PreBind
   plugins all skip costs no call beyond its scheduling cycle;
6. PostBind and its writes (a failure there leaves the pod bound), the pods
   PreBind and PostBind asked to activate, the Scheduled event.

Any failure before the pod is bound: Unreserve (and its writes, best
effort, undoing PreBind's), the assumed pod forgotten,
the pod requeued with backoff through the scheduling failure handler
(handleBindingCycleError).

``WaitingPods`` holds the pods waiting at Permit
(framework/runtime/waiting_pods_map.go); ``Binder`` is DefaultBinder's write
done with the scheduler's credentials, with the check of a binding whose
outcome is in doubt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework import observe
from berth.framework.status import Code
from berth.kube.asynchttp import AsyncApi
from berth.kube.errors import ApiError
from berth.kube.records import pod_record
from berth.kube.rest import JSON, KubeApi, pod_path
from berth.logs import V
from berth.shim import guard, metrics
from berth.shim.background import ApiWorkers
from berth.shim.cache import SchedulerCache
from berth.shim.extenders import ExtenderError, Extenders
from berth.shim.fence import LeaderFence
from berth.shim.fiterror import rejection
from berth.shim.metrics import Counters
from berth.shim.objects import WriteFailed, perform_writes
from berth.shim.podstatus import (
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    PodStatusWriter,
    Recorder,
    pod_ref,
)
from berth.shim.queue import QueuedPod, SchedulingQueue, activate_pods
from berth.shim.service import PluginService, ServiceUnavailable

log = logging.getLogger(__name__)
tracer = trace.get_tracer("berth.shim")

CODE_SUCCESS = pb.CODE_SUCCESS
CODE_SKIP = pb.CODE_SKIP
CODE_WAIT = pb.CODE_WAIT
# Bounds on the delay a PreBind plugin asks for before it is called again
# (StatusResponse.recheck_after_ms): never a busy loop, never an hour's nap.
PRE_BIND_RECHECK_MIN = 0.05
PRE_BIND_RECHECK_MAX = 60.0

# (message, requeue) of a binding cycle that did not bind its pod.
Failure = tuple[str, bool]


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
    # Rejected by a plugin or its timeout (WaitingPod.Reject): the plugin,
    # and its message.
    rejected_by: str | None = None
    rejection: str = ""

    def allow(self, plugin: str) -> None:
        self.pending.pop(plugin, None)
        if not self.pending and not self.done.done():
            self.done.set_result(None)

    def reject(self, plugin: str, message: str) -> None:
        if not self.done.done():
            self.rejected_by = plugin
            self.rejection = message
            self.done.set_result(f"{message} (plugin {plugin})" if plugin else message)


class WaitingPods(dict[str, WaitingPod]):
    """The pods waiting at Permit by uid (waitingPodsMap), counted in
    berth_shim_permit_waiting_pods; and, in ``pre_bind``, the pods whose PreBind
    waits to be called again (StatusResponse.recheck_after_ms), each with an
    event set when the pod is deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.pre_bind: dict[str, asyncio.Event] = {}

    def add(self, w: WaitingPod) -> None:
        self[w.qp.uid] = w
        metrics.PERMIT_WAITING.set(len(self))

    def remove(self, uid: str) -> None:
        self.pre_bind.pop(uid, None)
        # Every pod's binding cycle ends here, most never having waited: the
        # gauge (a locked write) changes only when a waiting pod leaves.
        if self.pop(uid, None) is not None:
            metrics.PERMIT_WAITING.set(len(self))

    def pod_deleted(self, uid: str) -> None:
        """The pod was deleted (or is being deleted): a wait at Permit is
        rejected, a wait between PreBind calls ends."""
        w = self.get(uid)
        if w is not None:
            w.reject("", "pod deleted while waiting at Permit")
        gone = self.pre_bind.get(uid)
        if gone is not None:
            gone.set()

    def signal(self, signals: Iterable[pb.WaitingPodSignal]) -> None:
        """Allow or reject pods already waiting (WaitingPod.Allow/Reject), as
        Permit, PostFilter or Unreserve plugins asked."""
        for sig in signals:
            w = self.get(sig.pod_uid)
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


class HandleFailure(Protocol):
    """handleSchedulingFailure (shim/schedule_one.py FailureHandler)."""

    def __call__(
        self,
        qp: QueuedPod,
        message: str,
        reason: str,
        *,
        error: bool,
        start: float,
        plugins: frozenset[str] = ...,
        pending: frozenset[str] = ...,
        nominated: str | None = ...,
    ) -> None: ...


@dataclass(frozen=True)
class BindingRequest:
    """What a scheduling cycle that placed a pod hands to its binding cycle."""

    qp: QueuedPod
    profile: str
    node: str
    cycle: pb.CycleState
    waiting: WaitingPod | None
    span: trace.Span
    start: float
    # The scheduling cycle's PreBindPreFlight found no PreBind plugin with
    # work for the pod (ScheduleResponse.pre_bind_skip), so PreBind is not
    # called. False, also from a plugin server that predates the field,
    # means PreBind is called when the profile has PreBind plugins (or is not
    # known).
    pre_bind_skip: bool = False
    # PreBindPreFlight failed (ScheduleResponse.pre_bind_pre_flight_error),
    # which ends the binding cycle at once.
    pre_flight_error: pb.Status | None = None
    # The scheduling cycle's ScheduleResponse.evaluated_nodes and
    # feasible_nodes, for the binding cycle's log line.
    evaluated_nodes: int = 0
    feasible_nodes: int = 0


class Binder:
    """DefaultBinder's write (default_binder.go Bind), done with the
    scheduler's credentials: POST pods/binding, from the event loop when
    ``async_api`` is given, else from the worker threads."""

    def __init__(
        self,
        api: KubeApi,
        async_api: AsyncApi | None,
        workers: ApiWorkers,
        cache: SchedulerCache,
    ) -> None:
        self._api = api
        self._async_api = async_api
        self._workers = workers
        self._cache = cache

    async def bind(self, pod: cpb.Pod, node: str) -> Failure | None:
        """Returns None when bound."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        nodes = self._cache.nodes
        path = pod_path(pod.namespace, pod.name, "binding")
        if self._async_api is not None:
            try:
                await self._async_api.wait_for_token()
                if node not in nodes:
                    return f"binding rejected: node {node} was deleted", True
                # The answer (a Status) says nothing a 201 has not said.
                await self._async_api.request("POST", path, body=body, limit=False, decode=False)
                return None
            except ApiError as exc:
                return await self._binding_error(pod, node, exc)

        api = self._api

        def post() -> bool:
            # The rate limiter may hold the bind for a while: check the node is
            # still there after waiting, right before the write.
            api.wait_for_token()
            if node not in nodes:
                return False
            api.request("POST", path, body=body, limit=False)
            return True

        try:
            if not await self._workers.call(post):
                return f"binding rejected: node {node} was deleted", True
            return None
        except ApiError as exc:
            return await self._binding_error(pod, node, exc)

    async def _binding_error(self, pod: cpb.Pod, node: str, exc: ApiError) -> Failure | None:
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
        cache = self._cache
        if exc.not_found:
            return f"binding rejected: pod {pod.namespace}/{pod.name} no longer exists", False
        if exc.status in (400, 403, 422, 429):
            return f"binding rejected: {exc}", True
        # What the informer reports while the GET is under way is newer than its answer.
        entry = cache.assumed.get(pod.uid)
        try:
            obj = await self._workers.call(self._api.get, pod_path(pod.namespace, pod.name))
        except ApiError as get_exc:
            if get_exc.not_found:
                cache.remove_pod(pod.uid)
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
            cache.remove_pod(pod.uid)
            return (
                f"binding rejected: pod {pod.namespace}/{pod.name} was replaced by another "
                f"of the same name (uid {current.uid})",
                False,
            )
        if not cache.still_assumed(entry):
            # The informer reported the pod before the GET's answer was handled:
            # its report is the truth, bound (the cache holds it) or not (deleted
            # or finished; not retried).
            bound_to = cache.bound_node(pod.uid)
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
            cache.add_or_update_pod(current)
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


class BindingCycle:
    """bindingCycle and what ends it (handleBindingCycleError on a failure)."""

    def __init__(
        self,
        *,
        api: KubeApi,
        workers: ApiWorkers,
        service: PluginService,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        waiting: WaitingPods,
        binder: Binder,
        recorders: Mapping[str, Recorder],
        status: PodStatusWriter,
        nominations: dict[str, str],
        counters: Counters,
        handle_failure: HandleFailure,
        on_forgotten: Callable[[cpb.Pod], None],
        traced: bool,
        on_written: Callable[[Sequence[tuple[pb.ObjectWrite, JSON]]], None] | None = None,
        extenders: Extenders | None = None,
    ) -> None:
        """``nominations``: the pods whose status.nominatedNodeName a binding
        cycle set, to that node, until it changes again (the event handlers
        read it). ``on_forgotten``: called with the uid of an assumed pod
        forgotten after a preemption rejected it at Permit, whose room may
        help other pods."""
        self._api = api
        self._workers = workers
        self._on_written = on_written
        self._service = service
        self._cache = cache
        self._queue = queue
        self._waiting = waiting
        self._binder = binder
        self._recorders = recorders
        self._status = status
        self._nominations = nominations
        self._counters = counters
        self._handle_failure = handle_failure
        self._on_forgotten = on_forgotten
        self._traced = traced
        self._extenders = extenders

    def _span(self, name: str) -> contextlib.AbstractContextManager[None]:
        return _span(name) if self._traced else contextlib.nullcontext()

    async def run(self, req: BindingRequest) -> None:
        """The binding cycle of a pod its scheduling cycle assumed on
        ``req.node``, then what its outcome means for the pod."""
        qp, profile, node, span = req.qp, req.profile, req.node, req.span
        pod = qp.pod
        token = otel_context.attach(trace.set_span_in_context(span)) if self._traced else None
        # scheduler_goroutines{operation="binding"} (runBindingCycle).
        metrics.BINDING_GOROUTINES.inc()
        try:
            failure = await self._binding_cycle(req)
        except asyncio.CancelledError:
            self._cache.forget(qp.uid)
            raise
        except Exception as exc:
            log.exception("binding pod %s/%s failed unexpectedly", pod.namespace, pod.name)
            failure = (f"binding rejected: {exc}", True)
        finally:
            metrics.BINDING_GOROUTINES.dec()
            self._waiting.remove(qp.uid)
            if token is not None:
                otel_context.detach(token)
        if failure is None:
            self._counters.bound += 1
            metrics.attempt("scheduled", profile, time.perf_counter() - req.start)
            metrics.scheduled(qp.attempts, time.time() - qp.first_seen)
            if qp.flushed:
                metrics.POD_SCHEDULED_AFTER_FLUSH.inc()
            self._queue.done_bound(qp)
            self._status.forget(qp.uid)
            self._nominations.pop(qp.uid, None)
            span.set_attribute("berth.result", "scheduled")
            span.set_attribute("k8s.node.name", node)
            span.end()
            return
        message, requeue = failure
        span.set_status(trace.StatusCode.ERROR, message)
        span.end()
        assumed = self._cache.assumed.get(qp.uid)
        forgotten = self._cache.forget(qp.uid)
        w = req.waiting
        if requeue and qp.uid in self._queue:
            self._counters.bind_failures += 1
            if w is not None and w.rejected_by is not None and not w.preempted:
                # bindingCycle: a pod rejected while waiting at Permit is a
                # FitError over its node with the rejecting plugin recorded:
                # Unschedulable, retried by the events that plugin registered.
                fit, plugins, pending = rejection(
                    node,
                    pb.Status(
                        code=pb.CODE_UNSCHEDULABLE, reasons=[w.rejection], plugin=w.rejected_by
                    ),
                )
                self._handle_failure(
                    qp,
                    fit,
                    REASON_UNSCHEDULABLE,
                    error=False,
                    start=req.start,
                    plugins=plugins,
                    pending=pending,
                )
            else:
                self._handle_failure(
                    qp, message, REASON_SCHEDULER_ERROR, error=True, start=req.start
                )
        else:
            # The pod is gone, or bound by someone else: nothing to retry.
            self._queue.done_bound(qp)
        if forgotten and assumed is not None:
            # handleBindingCycleError: forgetting an assumed pod frees what it
            # held on its node, like an assigned pod's deletion (the pod
            # itself aside), after the pod's own failure was handled.
            self._on_forgotten(assumed.pod)

    async def _binding_cycle(self, req: BindingRequest) -> Failure | None:
        """Returns None when bound, else (message, requeue)."""
        qp, profile, node, waiting = req.qp, req.profile, req.node, req.waiting
        pod = qp.pod
        service = self._service
        info = service.profiles.get(profile)
        # The cycle state as the last call left it (a PreBind that answered
        # Wait returns a newer one), sent with the binding cycle's calls.
        cycles = [req.cycle]
        # RunPreBindPreFlights' Success as the scheduling cycle reported it.
        pre_bind = (info is None or info.has("preBind")) and not req.pre_bind_skip

        async def unreserve() -> None:
            if info is None or info.has("reserve"):
                with contextlib.suppress(ServiceUnavailable):
                    resp: pb.StatusResponse = await service.node_call(
                        "Unreserve", profile, pod, node, cycles[-1]
                    )
                    self._waiting.signal(resp.signals)
                    await self._unreserve_writes(profile, pod, list(resp.writes))

        pre_flight_error = req.pre_flight_error
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
            await self._nominate(qp, node)
        if waiting is not None:
            with self._span("permit_wait"):
                rejection = await _wait_permit(waiting)
            if rejection is not None:
                await unreserve()
                return rejection, True
        if node not in self._cache.nodes:
            await unreserve()
            return f"binding rejected: node {node} was deleted", True
        try:
            if pre_bind:
                failure = await self._pre_bind(req, cycles, unreserve, activate)
                if failure is not None:
                    return failure
            handled, outcome = await self._extenders_binding(pod, node)
            if handled:
                if outcome is not None:
                    await unreserve()
                    return outcome
            elif info is not None and info.shim_binds:
                # The only Bind plugin is DefaultBinder, whose answer is always
                # Success with caller_binds: POST the binding without asking
                # (default_binder.go Bind).
                with self._span("Bind"):
                    started = time.perf_counter()
                    outcome = await self._binder.bind(pod, node)
                # The Bind extension point runs here, not on the plugin service:
                # timed as upstream's RunBindPlugins is, in
                # scheduler_framework_extension_point_duration_seconds.
                observe.observe_extension_point(
                    "Bind",
                    profile,
                    Code.SUCCESS if outcome is None else Code.ERROR,
                    time.perf_counter() - started,
                )
                if outcome is not None:
                    await unreserve()
                    return outcome
            else:
                with self._span("Bind"):
                    bind: pb.BindResponse = await service.node_call(
                        "Bind", profile, pod, node, cycles[-1]
                    )
                if bind.status.code != CODE_SUCCESS:
                    await unreserve()
                    return (
                        f"binding rejected: {'; '.join(bind.status.reasons) or 'no bind plugin bound the pod'}",
                        True,
                    )
                if bind.caller_binds:
                    with self._span("binding"):
                        outcome = await self._binder.bind(pod, node)
                    if outcome is not None:
                        await unreserve()
                        return outcome
        except ServiceUnavailable as exc:
            await unreserve()
            return f"binding rejected: {exc}", True
        self._cache.finish_binding(qp.uid)
        if info is None or info.has("postBind"):
            with contextlib.suppress(ServiceUnavailable), self._span("PostBind"):
                post: pb.StatusResponse = await service.node_call(
                    "PostBind", profile, pod, node, cycles[-1]
                )
                activate.extend(post.activate_pod_uids)
                await self._post_bind_writes(profile, pod, list(post.writes))
        # schedule_one.go bindingCycle's line, at V(2) as there.
        if log.isEnabledFor(V(2)):
            log.log(
                V(2),
                "Successfully bound pod to node",
                extra={
                    "pod": f"{pod.namespace}/{pod.name}",
                    "node": node,
                    "profile": profile,
                    "evaluatedNodes": req.evaluated_nodes,
                    "feasibleNodes": req.feasible_nodes,
                },
            )
        # The end of a binding cycle that bound the pod (bindingCycle).
        activate_pods(self._queue, pod, "the binding cycle", activate)
        self._scheduled_event(profile, pod, node)
        return None

    async def _extenders_binding(self, pod: cpb.Pod, node: str) -> tuple[bool, Failure | None]:
        """schedule_one.go extendersBinding: the extender with a bind verb
        that is interested in the pod binds it instead of the profile's Bind
        plugins. (handled, failure): not handled when there is no such
        extender, or when it failed and is ignorable (then the plugins bind)."""
        ext = self._extenders
        binder = None if ext is None else ext.binder(ext.pod(pod.uid))
        if binder is None:
            return False, None
        try:
            with self._span("Bind"):
                await binder.bind(pod.namespace, pod.name, pod.uid, node)
        except ExtenderError as exc:
            if binder.ignorable:
                log.info(
                    "Skipping extender in bind as it returned error and has ignorable flag set",
                    extra={
                        "extender": binder.name,
                        "err": str(exc),
                        "pod": f"{pod.namespace}/{pod.name}",
                    },
                )
                return False, None
            return True, (f"binding rejected: {exc}", True)
        return True, None

    async def _pre_bind(
        self,
        req: BindingRequest,
        cycles: list[pb.CycleState],
        unreserve: Callable[[], Awaitable[None]],
        activate: list[str],
    ) -> Failure | None:
        """PreBind (RunPreBindPlugins) and its writes; while a plugin answers
        Wait with recheck_after_ms (e.g. DynamicResources waiting for devices'
        binding conditions, where upstream's PreBind polls), its writes are
        performed and PreBind is called again after the delay, with the cycle
        the last call returned and the current cluster state. The pod stays
        assumed meanwhile; this task sleeps, so the scheduling cycle and
        other binding cycles go on. The wait ends early when the pod is
        deleted (not retried) or this replica is no longer the leader.
        ``cycles[-1]`` is the cycle state to send; a Wait appends the one it
        returned."""
        qp, profile, node = req.qp, req.profile, req.node
        pod = qp.pod
        service = self._service
        waited = False
        # Set when the pod is deleted meanwhile (EventHandlers, WaitingPods.pod_deleted).
        gone = self._waiting.pre_bind.setdefault(qp.uid, asyncio.Event())
        while True:
            with self._span("PreBind"):
                st: pb.StatusResponse = await service.node_call(
                    "PreBind", profile, pod, node, cycles[-1]
                )
            waiting = st.status.code == CODE_WAIT and st.recheck_after_ms > 0
            if waiting:
                cycles.append(st.cycle)
            elif st.status.code not in (CODE_SUCCESS, CODE_SKIP):
                await unreserve()
                # The server's reasons already say which plugin, in upstream's
                # words (RunPreBindPlugins: 'running PreBind plugin "X": ...').
                reasons = "; ".join(st.status.reasons)
                return (reasons or f"PreBind plugin {st.status.plugin!r} failed", True)
            else:
                activate.extend(st.activate_pod_uids)
            failure = await self._pre_bind_writes(profile, pod, st.writes, unreserve)
            if failure is not None:
                return failure
            if not waiting:
                if waited:
                    log.info(
                        "pod %s/%s: PreBind plugin waited and is done; binding to %s",
                        pod.namespace,
                        pod.name,
                        node,
                    )
                return None
            delay = min(max(st.recheck_after_ms / 1000, PRE_BIND_RECHECK_MIN), PRE_BIND_RECHECK_MAX)
            if not waited:
                waited = True
                log.info(
                    "pod %s/%s: PreBind plugin %s waits (%s); calling it again in %gs, "
                    "and so on until it is done",
                    pod.namespace,
                    pod.name,
                    st.status.plugin,
                    "; ".join(st.status.reasons) or "no reason given",
                    delay,
                    extra={"pod": f"{pod.namespace}/{pod.name}", "node": node},
                )
            with self._span("PreBind wait"), contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gone.wait(), delay)
            if gone.is_set():
                await unreserve()
                return (
                    f"binding rejected: pod {pod.namespace}/{pod.name} was deleted while "
                    f"PreBind plugin {st.status.plugin} waited",
                    False,
                )
            fence = self._api.fence
            if isinstance(fence, LeaderFence) and not fence.open:
                # A deposed leader writes nothing (its Unreserve would be
                # refused too); the pod goes back to the queue, which a new
                # term of this replica schedules again.
                return (
                    f"binding rejected: PreBind's wait ended: this replica may no longer "
                    f"be the leader (lease {fence.lease})",
                    True,
                )
            if node not in self._cache.nodes:
                await unreserve()
                return (f"binding rejected: node {node} was deleted", True)

    async def _pre_bind_writes(
        self,
        profile: str,
        pod: cpb.Pod,
        writes: Sequence[pb.ObjectWrite],
        unreserve: Callable[[], Awaitable[None]],
    ) -> Failure | None:
        """A PreBind answer's writes (checked first: shim/guard.py), with the
        shim's credentials, before binding: a refused or failed write fails
        the binding cycle (after Unreserve)."""
        refused = self._refused_writes(profile, pod, "PreBind", writes)
        if refused:
            # Nothing written: the binding cycle fails as for a failed write.
            await unreserve()
            return f"PreBind writes refused by the scheduler: {refused}", True
        if not writes:
            return None
        try:
            with self._span("PreBind writes"):
                answers = await self._workers.call(perform_writes, self._api, list(writes), pod)
            if self._on_written is not None:
                # The written objects count at once (ObjectSources.written).
                self._on_written(answers)
        except WriteFailed as exc:
            await unreserve()
            # Worded as RunPreBindPlugins words a plugin's error.
            return f'running PreBind plugin "{exc.write.plugin}": {exc}', True
        return None

    async def _nominate(self, qp: QueuedPod, node: str) -> None:
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
                await self._workers.call(
                    self._api.strategic_patch, pod_path(pod.namespace, pod.name, "status"), patch
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
        self._nominations[pod.uid] = node
        # The status changed: a later condition patch must not be skipped as
        # already written (it also clears this nomination).
        self._status.forget(pod.uid)
        nominated = cpb.Pod()
        nominated.CopyFrom(pod)
        nominated.nominated_node_name = node
        qp.pod = nominated

    def _scheduled_event(self, profile: str, pod: cpb.Pod, node: str) -> None:
        """schedule_one.go bindingCycle: the Scheduled event of a bound pod."""
        self._recorders[profile].record(
            pod_ref(pod),
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
            self._recorders[profile].record(
                pod_ref(pod),
                "Warning",
                "FailedPostBindWrite",
                "PostBind",
                f"PostBind writes refused by the scheduler: {refused}",
            )
            return
        try:
            await self._workers.call(perform_writes, self._api, writes, pod)
        except WriteFailed as exc:
            log.warning("pod %s/%s: PostBind %s", pod.namespace, pod.name, exc)
            self._recorders[profile].record(
                pod_ref(pod), "Warning", "FailedPostBindWrite", "PostBind", str(exc)
            )

    async def _unreserve_writes(
        self, profile: str, pod: cpb.Pod, writes: list[pb.ObjectWrite]
    ) -> None:
        """Unreserve's writes (StatusResponse.writes, e.g. DynamicResources
        removing the pod from a claim's reservedFor), checked as PreBind's are
        (shim/guard.py). Best effort, as upstream's Unreserve only logs its
        API errors: a refusal is logged and reported as an event on the pod,
        a failed write is logged and the writes after it are still tried.
        What the API server answered goes into the state at once."""
        if not writes:
            return
        refused = self._refused_writes(profile, pod, "Unreserve", writes)
        if refused:
            self._recorders[profile].record(
                pod_ref(pod),
                "Warning",
                "FailedUnreserveWrite",
                "Unreserve",
                f"Unreserve writes refused by the scheduler: {refused}",
            )
            return
        rest = writes
        while rest:
            try:
                answers = await self._workers.call(perform_writes, self._api, rest, pod)
            except WriteFailed as exc:
                log.warning(
                    "pod %s/%s: Unreserve %s (left as it is; the next attempt sees it)",
                    pod.namespace,
                    pod.name,
                    exc,
                )
                self._recorders[profile].record(
                    pod_ref(pod), "Warning", "FailedUnreserveWrite", "Unreserve", str(exc)
                )
                rest = rest[exc.index + 1 :]
                continue
            if self._on_written is not None:
                self._on_written(answers)
            rest = []

    async def post_filter_writes(
        self, profile: str, pod: cpb.Pod, writes: list[pb.ObjectWrite]
    ) -> None:
        """A failed cycle's PostFilter writes (PostFilterResponse.writes, e.g.
        DynamicResources deallocating a claim), checked as PreBind's are
        (shim/guard.py) and applied in order; the pod is unschedulable either
        way, so a refusal or a failure is only logged and reported as an event
        on the pod. What the API server answered goes into the state at once
        (ObjectSources.written), so the pods waiting for the claim move."""
        if not writes:
            return
        refused = self._refused_writes(profile, pod, "PostFilter", writes)
        if refused:
            self._recorders[profile].record(
                pod_ref(pod),
                "Warning",
                "FailedPostFilterWrite",
                "PostFilter",
                f"PostFilter writes refused by the scheduler: {refused}",
            )
            return
        try:
            answers = await self._workers.call(perform_writes, self._api, writes, pod)
        except WriteFailed as exc:
            log.warning("pod %s/%s: PostFilter %s", pod.namespace, pod.name, exc)
            self._recorders[profile].record(
                pod_ref(pod), "Warning", "FailedPostFilterWrite", "PostFilter", str(exc)
            )
            return
        if self._on_written is not None:
            self._on_written(answers)

    def _refused_writes(
        self, profile: str, pod: cpb.Pod, point: str, writes: Sequence[pb.ObjectWrite]
    ) -> str:
        """The writes of a PreBind or PostBind answer the shim will not
        perform (shim/guard.py), logged and counted; "" when it performs them
        all. One refused refuses them all."""
        if not writes:
            return ""
        declared = self._service.declared_writes.get(profile, {})
        refused = guard.check_writes(pod, writes, declared)
        if not refused:
            return ""
        guard.report(refused, pod, f"{point} of profile {profile}")
        return "; ".join(str(r) for r in refused)


async def _wait_permit(w: WaitingPod) -> str | None:
    """WaitOnPermit: the first plugin to time out rejects the pod. The wait
    is observed in scheduler_permit_wait_duration_seconds with its status
    code (framework.go WaitOnPermit)."""
    timeout = min(w.pending.values()) if w.pending else 0.0
    start = time.perf_counter()
    try:
        rejection = await asyncio.wait_for(asyncio.shield(w.done), timeout)
    except TimeoutError:
        plugin = min(w.pending, key=lambda p: w.pending[p]) if w.pending else ""
        message = f"rejected due to timeout after waiting {timeout:g}s at plugin {plugin}"
        # waiting_pods_map.go: the timer rejects the pod in the plugin's name.
        w.rejected_by = plugin
        w.rejection = message
        metrics.permit_waited(PERMIT_UNSCHEDULABLE, time.perf_counter() - start)
        return message
    if rejection is None:
        result = PERMIT_SUCCESS
    else:
        # Preempt stops the wait with Error, Reject with Unschedulable.
        result = PERMIT_ERROR if w.preempted else PERMIT_UNSCHEDULABLE
    metrics.permit_waited(result, time.perf_counter() - start)
    return rejection


# The status codes a wait at Permit ends with (Code.String()).
PERMIT_SUCCESS = "Success"
PERMIT_UNSCHEDULABLE = "Unschedulable"
PERMIT_ERROR = "Error"


@contextlib.contextmanager
def _span(name: str) -> Iterator[None]:
    with tracer.start_as_current_span(name):
        yield


__all__ = [
    "Binder",
    "BindingCycle",
    "BindingRequest",
    "HandleFailure",
    "WaitingPod",
    "WaitingPods",
]
