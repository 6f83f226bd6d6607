"""One scheduling cycle (pkg/scheduler/schedule_one.go ScheduleOne,
schedulingCycle, handleSchedulingFailure).

- ``SchedulingCycle.schedule_one`` pops pods from the queue: one pod goes
  through ScheduleStream (or unary Schedule when traced, so each call carries
  its trace context), several queued pods of one profile through
  ScheduleBatch (each still its own cycle, earlier placements assumed). The
  plugin service runs PreFilter .. Score, host selection, Reserve and Permit.
- A placed pod is assumed in the cache at once (so the next cycle sees it),
  Reserve's assume_annotations on the assumed copy; Permit's and
  PostFilter's signals allow or reject pods waiting at Permit; the pods
  Permit asked to activate (PodsToActivate) go to the activeQ; the pod is
  handed to its binding cycle (shim/binding.py), which runs as a task of its
  own.
- A pod no node fits: a preemption the PostFilter asked for is started
  (shim/preemption.py), then ``FailureHandler`` records FailedScheduling
  (upstream's FitError text), patches PodScheduled=False and the nominated
  node (shim/podstatus.py), and requeues the pod.
- The plugin service unreachable: the pods of the failed call go to the
  error backoff queue; nothing is dropped; the next call reconnects and the
  cluster-state protocol resyncs the replica.
- A pod HTTP extenders filter or prioritize (shim/extenders.py) has its
  cycle in two calls: Schedule stopped after Filter, the extenders' filters
  over the feasible nodes (findNodesThatPassExtenders), then Schedule resumed
  at Score with the nodes left and the extenders' scores (prioritizeNodes);
  when they leave no node, PostFilter and the FitError as upstream's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client.answers import rejected_nodes
from berth.framework.status import Code, Status, fit_error_message
from berth.logs import V
from berth.server.convert import status_from_pb, status_to_pb
from berth.shim import metrics
from berth.shim.background import Tasks
from berth.shim.binding import BindingRequest, WaitingPod, WaitingPods
from berth.shim.cache import AssumeRefused, SchedulerCache
from berth.shim.explain import (
    RESULT_ANNOTATION,
    AttemptStore,
    attempt_of,
    result_annotation,
    wants_explain,
)
from berth.shim.extenders import EXTENDER_PLUGIN, ExtenderError, Extenders, PodJson
from berth.shim.fiterror import is_rejected, rejection
from berth.shim.metrics import Counters
from berth.shim.podstatus import (
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    PodStatusWriter,
    Recorder,
    pod_ref,
)
from berth.shim.preemption import PREEMPTION_PLUGINS
from berth.shim.queue import QueuedPod, SchedulingQueue, activate_pods
from berth.shim.service import BatchTooLarge, PluginService, ServiceUnavailable

if TYPE_CHECKING:
    # berth shim --record only; app.py imports it then.
    from berth.shim.record import Recording

log = logging.getLogger(__name__)
tracer = trace.get_tracer("berth.shim")

CODE_SUCCESS = pb.CODE_SUCCESS
CODE_ERROR = pb.CODE_ERROR
CODE_WAIT = pb.CODE_WAIT
CODE_SKIP = pb.CODE_SKIP


class FailureHandler:
    """handleSchedulingFailure: event, condition, requeue, nomination."""

    def __init__(
        self,
        *,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        recorders: Mapping[str, Recorder],
        status: PodStatusWriter,
        counters: Counters,
        tasks: Tasks,
        attempts: AttemptStore | None = None,
    ) -> None:
        """``attempts``: where each failed attempt is kept for explanations
        (shim/explain.py); pods that asked for them also get it written to
        their explain.berth.dev/result annotation."""
        self._cache = cache
        self._queue = queue
        self._recorders = recorders
        self._status = status
        self._counters = counters
        self._tasks = tasks
        self.attempts = attempts

    def write_result(self, pod: cpb.Pod, value: str) -> None:
        """Writes an attempt's explain.berth.dev/result on a pod that asked
        for it, in the background."""
        self._tasks.spawn(self._status.annotate(pod, RESULT_ANNOTATION, value))

    def __call__(
        self,
        qp: QueuedPod,
        message: str,
        reason: str,
        *,
        error: bool,
        start: float,
        plugins: frozenset[str] = frozenset(),
        pending: frozenset[str] = frozenset(),
        nominated: str | None = "",
        resp: pb.ScheduleResponse | None = None,
        node: str = "",
        node_status: pb.Status | None = None,
    ) -> None:
        """``resp``, or ``node`` and ``node_status`` (a Reserve or Permit
        rejection): the attempt as the plugin service answered it, kept for
        explanations.
        ``plugins``: the plugins that rejected the pod (UnschedulablePlugins),
        ``pending`` those of them that answered Pending (PendingPlugins); they
        decide which cluster events retry it (shim/queue.py).
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
        bound_to = self._cache.bound_node(qp.uid)
        if bound_to:
            metrics.attempt(
                "error" if error else "unschedulable", qp.profile, time.perf_counter() - start
            )
            self._queue.done_bound(qp)
            log.info(
                "pod %s/%s is bound to node %s; its failed attempt (%s) is not retried",
                pod.namespace,
                pod.name,
                bound_to,
                message,
            )
            return
        if self.attempts is not None:
            self.attempts.put(
                qp.uid,
                attempt_of(
                    qp.attempts,
                    message,
                    error=error,
                    resp=resp,
                    node=node,
                    status=node_status,
                    num_nodes=len(self._cache.nodes),
                ),
            )
            if wants_explain(pod):
                self.write_result(
                    pod,
                    result_annotation(
                        qp.attempts,
                        resp,
                        result="error" if error else "unschedulable",
                        message=message,
                    ),
                )
        if nominated is not None:
            # AddNominatedPod, before the status patch below reaches the API
            # server: the next cycles count the pod on its node at once.
            self._cache.nominate(pod, nominated)
        result = "error" if error else "unschedulable"
        metrics.attempt(result, qp.profile, time.perf_counter() - start)
        if error:
            self._counters.errors += 1
            self._queue.done_error(qp)
        else:
            self._counters.unschedulable += 1
            self._queue.done_unschedulable(qp, plugins, pending)
        keys = {"pod": f"{pod.namespace}/{pod.name}", "profile": qp.profile, "err": message}
        if plugins:
            # The rejecting plugins (Diagnosis.UnschedulablePlugins), comma-separated.
            keys["plugin"] = ",".join(sorted(plugins))
        if error:
            # handleSchedulingFailure: an error other than a FitError is
            # reported (utilruntime.HandleErrorWithContext), not logged at V(2).
            log.error("Error scheduling pod; retrying", extra=keys)
        else:
            # handleSchedulingFailure's line for a FitError.
            log.log(V(2), "Unable to schedule pod; no fit; waiting", extra=keys)
        self._recorders[qp.profile].record(
            pod_ref(pod), "Warning", "FailedScheduling", "Scheduling", message
        )
        if nominated is None:
            # Left as it is: the nominator's node, which the API has or will
            # have (an earlier patch carrying it may be superseded by this one).
            nominated = self._cache.nominated_to(pod.uid) or None
        self._tasks.spawn(self._status.patch_condition(pod, reason, message, nominated))


class SchedulingCycle:
    """ScheduleOne and schedulingCycle, for a batch of pods of one profile."""

    def __init__(
        self,
        *,
        service: PluginService,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        waiting: WaitingPods,
        bind: Callable[[BindingRequest], Coroutine[Any, Any, None]],
        preempt: Callable[[QueuedPod, pb.PostFilterResponse], bool],
        handle_failure: FailureHandler,
        post_filter_writes: Callable[
            [str, cpb.Pod, list[pb.ObjectWrite]], Coroutine[Any, Any, None]
        ]
        | None = None,
        tasks: Tasks,
        counters: Counters,
        batch_size: int,
        traced: bool,
        extenders: Extenders | None = None,
        extender_preemption: Callable[[QueuedPod, pb.ScheduleResponse], Coroutine[Any, Any, None]]
        | None = None,
        record: Recording | None = None,
    ) -> None:
        """``bind``: the binding cycle of a placed pod (shim/binding.py
        BindingCycle.run), run as a task of its own. ``preempt``: starts the
        preemption a PostFilter asked for (shim/preemption.py
        PreemptionExecutor.start); False when it is refused.
        ``post_filter_writes``: performs a failed cycle's PostFilter writes
        (BindingCycle.post_filter_writes), run as a task. ``batch_size``:
        most pods one ScheduleBatch call takes (1: always ScheduleStream);
        halved when the plugin service finds a batch too large. ``record``:
        berth shim --record's recorder, told each call (with a tie-break seed
        it draws, so that a replay breaks ties alike) and its answers; the
        cycles of pods an extender is interested in are not recorded."""
        self._service = service
        self._post_filter_writes = post_filter_writes
        self._cache = cache
        self._queue = queue
        self._waiting = waiting
        self._bind = bind
        self._preempt = preempt
        self._failed = handle_failure
        self._tasks = tasks
        self._counters = counters
        self.batch_size = batch_size
        self._traced = traced
        self._extenders = extenders
        # The extenders' ProcessPreemption on a PostFilter's choice
        # (PreemptionExecutor.run_extenders), when any has a preempt verb.
        self._extender_preemption = extender_preemption
        self._record = record
        # Per profile: where the next cycle starts looking at nodes
        # (percentageOfNodesToScore's rotation, nextStartNodeIndex).
        self._start_index: dict[str, int] = {}

    async def schedule_one(self) -> bool:
        """Pops the next pods and runs their cycle; False once the queue is
        closed."""
        batch = await self._queue.pop_batch(self.batch_size)
        if not batch:
            return False
        # Pods that changed while queued are scheduled as they are now.
        try:
            await self.schedule(batch)
        except Exception:
            log.exception("scheduling cycle failed unexpectedly; requeueing its pods")
            for qp in batch:
                if qp.where == "in_flight":
                    self._queue.done_error(qp)
        return True

    async def schedule(self, batch: list[QueuedPod]) -> None:
        ext = self._extenders
        if ext is not None:
            jsons = [ext.pod(qp.uid) for qp in batch]
            if any(ext.interested(pj) or ext.preempts(pj) for pj in jsons):
                # Pods the extenders see run one at a time, in queue order;
                # the others of the batch around them as their own cycles. A
                # pod whose preemption the extenders process has every
                # candidate answered and the shim selects after them
                # (run_extenders), before the next pod's cycle, which sees
                # the nomination (preemption.go Preempt).
                for qp, pj in zip(batch, jsons, strict=True):
                    if pj is not None and ext.interested(pj):
                        await self._schedule_with_extenders(qp, ext, pj)
                    else:
                        await self._schedule([qp], preemption_candidates=ext.preempts(pj))
                return
        if (
            len(batch) > 1
            and self._failed.attempts is not None
            and any(wants_explain(qp.pod) for qp in batch)
        ):
            # A pod that asked for explanations has a cycle of its own with
            # explain (every node's verdict and scores): the batch runs as
            # single cycles, in its order.
            for qp in batch:
                await self._schedule([qp])
            return
        await self._schedule(batch)

    async def _schedule(self, batch: list[QueuedPod], preemption_candidates: bool = False) -> None:
        """The cycles of ``batch`` in one call (ScheduleBatch, or a single
        Schedule). ``preemption_candidates``: one pod whose preemption the
        extenders process; its cycle is not recorded (--record), as the
        answer it gets is not one a replay without the extenders gets."""
        profile = batch[0].profile
        start = time.perf_counter()
        pops = time.time()
        spans = [self._attempt_span(qp, pops) for qp in batch]
        if log.isEnabledFor(V(3)):
            # schedulingCycle's line (schedule_one.go), at V(3) as there.
            for qp in batch:
                log.log(
                    V(3),
                    "Attempting to schedule pod",
                    extra={"pod": f"{qp.pod.namespace}/{qp.pod.name}", "profile": profile},
                )
        metrics.SCHEDULE_BATCH_PODS.observe(len(batch))
        try:
            start_index = self._start_index.get(profile, 0)
            # The scheduler's cycle count (schedule_one.go's schedulingCycle
            # numbers): the first pod's cycle, the others following.
            cycle = self._counters.cycles + 1
            sent = [self._as_nominated(qp.pod) for qp in batch]
            explain = (
                len(batch) == 1 and self._failed.attempts is not None and wants_explain(sent[0])
            )
            seed, recorded = (
                (0, 0)
                if preemption_candidates
                else self._record_call(profile, sent, start_index, cycle, explain)
            )
            try:
                if len(batch) == 1:
                    pod = sent[0]
                    with trace.use_span(spans[0], end_on_exit=False):
                        resp = await self._service.schedule(
                            profile,
                            pod,
                            start_index,
                            cycle,
                            explain=explain,
                            seed=seed,
                            preemption_candidates=preemption_candidates,
                        )
                    results = [resp]
                    self._start_index[profile] = resp.next_start_index
                else:
                    with trace.use_span(spans[0], end_on_exit=False):
                        bresp = await self._service.schedule_batch(
                            profile, sent, start_index, cycle, seed=seed
                        )
                    results = list(bresp.results)
                    self._start_index[profile] = bresp.next_start_index
            except BatchTooLarge as exc:
                if recorded and self._record is not None:
                    self._record.cycle_failed(recorded, str(exc))
                smaller = max(1, len(batch) // 2)
                log.warning("%s; sending at most %d pods per batch from now on", exc, smaller)
                self.batch_size = smaller
                for qp, span in zip(batch, spans, strict=True):
                    # Not the pods' fault: straight back to the activeQ, no backoff.
                    self._queue.done_retry(qp)
                    span.end()
                return
            except ServiceUnavailable as exc:
                if recorded and self._record is not None:
                    self._record.cycle_failed(recorded, str(exc))
                self._service_failed(batch, spans, exc, start)
                return
            self._counters.cycles += len(batch)
            if recorded and self._record is not None:
                attempts = [qp.attempts for qp in batch]
                self._record.decisions(recorded, profile, sent, attempts, results)
            if self._extender_preemption is not None:
                for qp, resp in zip(batch, results, strict=True):
                    await self._extender_preemption(qp, resp)
            for qp, resp, span in zip(batch, results, spans, strict=True):
                if self._traced:
                    # In the attempt's span, so its log lines carry its trace id.
                    with trace.use_span(span, end_on_exit=False):
                        self.handle_result(qp, profile, resp, span, start)
                else:
                    # Untraced, every span is INVALID_SPAN, already the current one.
                    self.handle_result(qp, profile, resp, span, start)
        except BaseException:
            for span in spans:
                if span.is_recording():
                    span.end()
            raise

    def _service_failed(
        self, batch: list[QueuedPod], spans: list[trace.Span], exc: Exception, start: float
    ) -> None:
        self._counters.service_failures += 1
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

    async def _schedule_with_extenders(self, qp: QueuedPod, ext: Extenders, pj: PodJson) -> None:
        """One pod's cycle with the extenders between Filter and Score
        (schedule_one.go schedulePod, findNodesThatFitPod)."""
        profile = qp.profile
        start = time.perf_counter()
        span = self._attempt_span(qp, time.time())
        metrics.SCHEDULE_BATCH_PODS.observe(1)
        pod = self._as_nominated(qp.pod)
        try:
            try:
                resp = await self._extended_cycle(qp, profile, pod, ext, pj, start)
            except ServiceUnavailable as exc:
                self._service_failed([qp], [span], exc, start)
                return
            if resp is None:
                span.set_attribute("berth.result", "error")
                span.end()
                return
            self._counters.cycles += 1
            if self._extender_preemption is not None:
                await self._extender_preemption(qp, resp)
            self.handle_result(qp, profile, resp, span, start)
        except BaseException:
            if span.is_recording():
                span.end()
            raise

    async def _extended_cycle(
        self,
        qp: QueuedPod,
        profile: str,
        pod: cpb.Pod,
        ext: Extenders,
        pj: PodJson,
        start: float,
    ) -> pb.ScheduleResponse | None:
        """The calls of a cycle with extenders; the response handle_result
        takes, or None when an extender failed the cycle (already handled:
        an error, as upstream's schedulingCycle treats it)."""
        start_index = self._start_index.get(profile, 0)
        candidates = ext.preempts(pj)
        first = await self._service.schedule_stopped(profile, pod, start_index, candidates)
        self._start_index[profile] = first.next_start_index
        if not first.feasible:
            return first
        try:
            outcome = await ext.filter(pj, list(first.feasible))
            earlier: dict[str, Status] = {}
            if (
                not outcome.nodes
                and pod.nominated_node_name
                and list(first.feasible) == [pod.nominated_node_name]
                and first.evaluated_nodes == 1
            ):
                # evaluateNominatedNode found the nominated node feasible but
                # the extenders did not: every node is evaluated
                # (findNodesThatFitPod), the nominated node's statuses kept.
                earlier = outcome.statuses
                plain = cpb.Pod()
                plain.CopyFrom(pod)
                plain.nominated_node_name = ""
                first = await self._service.schedule_stopped(
                    profile, plain, start_index, candidates
                )
                self._start_index[profile] = first.next_start_index
                if not first.feasible:
                    return first
                outcome = await ext.filter(pj, list(first.feasible))
                outcome.statuses.update(
                    {n: st for n, st in earlier.items() if n not in outcome.statuses}
                )
            if not outcome.nodes:
                return await self._extenders_rejected_all(
                    profile, pod, first, outcome.statuses, candidates
                )
            scores = await ext.prioritize(pj, outcome.nodes) if len(outcome.nodes) > 1 else {}
        except ExtenderError as exc:
            # findNodesThatFitPod returns the error: the cycle is an Error
            # (SchedulerError, clearNominatedNode), retried after a backoff.
            self._failed(qp, str(exc), REASON_SCHEDULER_ERROR, error=True, start=start)
            return None
        resume = pb.ScheduleResume(
            cycle=first.cycle,
            nodes=outcome.nodes,
            extra_scores={n: scores[n] for n in outcome.nodes if n in scores},
            evaluated_nodes=first.evaluated_nodes,
        )
        resp = await self._service.schedule_resumed(profile, pod, first.next_start_index, resume)
        if outcome.filtered and not resp.node:
            resp.diagnosis.unschedulable_plugins.append(EXTENDER_PLUGIN)
        return resp

    async def _extenders_rejected_all(
        self,
        profile: str,
        pod: cpb.Pod,
        first: pb.ScheduleResponse,
        statuses: dict[str, Status],
        preemption_candidates: bool = False,
    ) -> pb.ScheduleResponse:
        """The extenders left no node: a FitError over the Filter plugins'
        and the extenders' statuses, "Extender" among the rejecting plugins;
        PostFilter runs on it (preemption) when the profile has any, with
        every candidate answered when the extenders process the pod's
        preemption."""
        d = first.diagnosis
        rejected = {node: status_from_pb(st) for node, st in rejected_nodes(d)}
        rejected.update(statuses)
        rejected_pb = [pb.NodeStatus(node=n, status=status_to_pb(st)) for n, st in rejected.items()]
        resp = pb.ScheduleResponse(
            evaluated_nodes=first.evaluated_nodes,
            next_start_index=first.next_start_index,
            generation=first.generation,
        )
        post_filter_msg = ""
        info = self._service.profiles.get(profile)
        if info is None or info.has("postFilter"):
            pf = await self._service.post_filter(
                profile, pod, first.cycle, rejected_pb, preemption_candidates
            )
            resp.post_filter.CopyFrom(pf)
            post_filter_msg = status_from_pb(pf.status).message
        absent = status_from_pb(d.absent_status) if d.HasField("absent_status") else None
        message = fit_error_message(d.num_all_nodes, rejected, "", post_filter_msg, absent)
        resp.status.CopyFrom(status_to_pb(Status(Code.UNSCHEDULABLE, (message,))))
        out = resp.diagnosis
        out.rejected.extend(rejected_pb)
        out.unschedulable_plugins.extend(sorted({*d.unschedulable_plugins, EXTENDER_PLUGIN}))
        out.pending_plugins.extend(d.pending_plugins)
        out.message = message
        return resp

    def _record_call(
        self, profile: str, sent: list[cpb.Pod], start_index: int, cycle: int, explain: bool
    ) -> tuple[int, int]:
        """With --record: the call's tie-break seed, and its cycle number
        once recorded with the state it is made on (committed here, so that
        the state is what was recorded before it). (0, 0) otherwise: unseeded."""
        record = self._record
        if record is None or not record.recording:
            return 0, 0
        seed = record.seed()
        state = self._service.state
        state.commit()
        return seed, record.cycle(
            profile, sent, state.generation, start_index, seed, explain, scheduler_cycle=cycle
        )

    def _as_nominated(self, pod: cpb.Pod) -> cpb.Pod:
        """The pod as a cycle sees it: with the node this scheduler nominated
        it to even when the informer has not yet delivered the status patch
        that writes it. Upstream's queue holds the pod with the nomination
        applied once the patch call is made (framework/api_calls/
        pod_status_patch.go PodStatusPatchCall.Sync), so the next cycle's
        evaluateNominatedNode (schedule_one.go findNodesThatFitPod) tries that
        node first. A victim's deletion can reach the shim before the patch
        does; without this the retry would weigh every node alike."""
        node = self._cache.nominated_to(pod.uid)
        if not node or pod.nominated_node_name == node:
            return pod
        nominated = cpb.Pod()
        nominated.CopyFrom(pod)
        nominated.nominated_node_name = node
        return nominated

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

    def handle_result(
        self,
        qp: QueuedPod,
        profile: str,
        resp: pb.ScheduleResponse,
        span: trace.Span,
        start: float,
    ) -> None:
        """The end of schedulingCycle for one pod of the batch."""
        pod = qp.pod
        if qp.uid not in self._queue:
            # Deleted (or bound by someone else) during the cycle.
            span.end()
            return
        st = resp.status
        if st.code == CODE_SUCCESS and resp.node:
            rs = resp.reserve_status
            if rs.code != CODE_SUCCESS:
                # Unreserve ran on the server; it may have signalled waiting pods.
                self._waiting.signal(resp.unreserve_signals)
                self._reserve_or_permit_failed(qp, resp.node, rs, "Reserve failed", start)
                span.end()
                return
            permit = resp.permit
            if permit.status.code not in (CODE_SUCCESS, CODE_WAIT, CODE_SKIP):
                # Permit's own signals, then those of the Unreserve that followed.
                self._waiting.signal(permit.signals)
                self._waiting.signal(resp.unreserve_signals)
                self._reserve_or_permit_failed(
                    qp, resp.node, permit.status, "rejected at Permit", start
                )
                span.end()
                return
            try:
                self._cache.assume(pod, resp.node, resp.assume_annotations)
            except AssumeRefused as exc:
                self._assume_refused(qp, exc, start)
                span.set_attribute("berth.result", "error")
                span.end()
                return
            self._counters.scheduled += 1
            if self._failed.attempts is not None and wants_explain(pod):
                self._failed.write_result(
                    pod, result_annotation(qp.attempts, resp, result="scheduled")
                )
            self._waiting.signal(permit.signals)
            waiting = None
            if permit.status.code == CODE_WAIT:
                pending = {p: ms / 1000.0 for p, ms in permit.wait_timeout_millis.items()}
                waiting = WaitingPod(qp, resp.node, pending)
                self._waiting.add(waiting)
            # The end of a scheduling cycle that lets the pod on
            # (prepareForBindingCycle): the pods its plugins asked for go active.
            activate_pods(self._queue, pod, "Permit", permit.activate_pod_uids)
            self._tasks.spawn(
                self._bind(
                    BindingRequest(
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
                        evaluated_nodes=resp.evaluated_nodes,
                        feasible_nodes=resp.feasible_nodes,
                    )
                )
            )
            return
        # No node: FitError (Unschedulable) or an Error. PostFilter may have
        # rejected pods waiting at Permit (e.g. the rest of a gang).
        pf = resp.post_filter
        self._waiting.signal(pf.signals)
        if pf.writes and self._post_filter_writes is not None:
            # E.g. DynamicResources deallocating a claim that keeps the pod off
            # every node; the claim's update then moves the pod (its hint).
            self._tasks.spawn(self._post_filter_writes(profile, pod, list(pf.writes)))
        error = st.code == CODE_ERROR
        msg = resp.diagnosis.message or "; ".join(st.reasons) or "scheduling failed"
        nominated = self._nomination_after_failure(pod, resp)
        plugins = frozenset(resp.diagnosis.unschedulable_plugins)
        pending_plugins = frozenset(resp.diagnosis.pending_plugins)
        if resp.HasField("post_filter") and self._runs_preemption(profile, pf):
            metrics.PREEMPTION_ATTEMPTS.inc()
        # A pod bound while its cycle ran needs no room: nothing is preempted for it
        # (and the failure handler does not queue it again).
        if (
            pf.nominated_node_name
            and not self._cache.bound_node(qp.uid)
            and not self._preempt(qp, pf)
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
            pending=pending_plugins,
            nominated=nominated,
            resp=resp,
        )
        span.set_attribute("berth.result", "error" if error else "unschedulable")
        span.end()

    def _reserve_or_permit_failed(
        self, qp: QueuedPod, node: str, st: pb.Status, fallback: str, start: float
    ) -> None:
        """schedulingCycle when Reserve or Permit turns the pod away: a
        rejection (Unschedulable, UnschedulableAndUnresolvable, Pending) is a
        FitError over the one node with the rejecting plugin recorded, so the
        pod is Unschedulable and the events that plugin registered retry it;
        any other code is an error, retried after a backoff."""
        if st.code == CODE_ERROR or not is_rejected(st):
            msg = "; ".join(st.reasons) or fallback
            self._failed(
                qp, msg, REASON_SCHEDULER_ERROR, error=True, start=start, node=node, node_status=st
            )
            return
        message, plugins, pending = rejection(node, st)
        self._failed(
            qp,
            message,
            REASON_UNSCHEDULABLE,
            error=False,
            start=start,
            plugins=plugins,
            pending=pending,
            node=node,
            node_status=st,
        )

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
        self._counters.errors += 1
        if exc.assumed:
            # Not reachable from the queue (a pod is in one cycle at a time);
            # the binding cycle that assumed it decides what becomes of it.
            log.warning(
                "pod %s/%s: %s; this cycle's placement is dropped", pod.namespace, pod.name, exc
            )
            return
        self._queue.done_bound(qp)
        log.info(
            "pod %s/%s was bound to node %s while its scheduling cycle ran (a binding "
            "that landed after its call failed, or another scheduler); not binding it again",
            pod.namespace,
            pod.name,
            exc.node,
        )

    def _runs_preemption(self, profile: str, pf: pb.PostFilterResponse) -> bool:
        """Did this cycle's PostFilter attempt a preemption (what
        scheduler_preemption_attempts_total counts: every DefaultPreemption
        PostFilter call)? Yes when the profile runs a preemption plugin at
        PostFilter, or when the answer names victims."""
        if pf.victims or pf.plugin in PREEMPTION_PLUGINS:
            return True
        info = self._service.profiles.get(profile)
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
        current = self._cache.nominated_to(pod.uid) or pod.nominated_node_name
        if not current:
            return ""
        if pod.preemption_policy == "Never":
            return None
        for other in self._cache.state.pods.values():
            if other.node_name == current and other.terminating and other.priority < pod.priority:
                return None
        return ""


__all__ = ["FailureHandler", "SchedulingCycle"]
