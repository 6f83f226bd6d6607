"""The scheduling queue, like upstream's PriorityQueue
(pkg/scheduler/backend/queue/scheduling_queue.go, backoff_queue.go).

- **activeQ**: pods ready for a cycle, in the profile's QueueSort order (the
  sort keys come from the plugin service's QueueSort, one call per batch of
  arriving pods).
- **backoffQ**: pods that failed a cycle, waiting ``initial << (count-1)``
  capped at the max (1 s .. 10 s by default), from the moment they failed
  (backoffQueue.calculateBackoffDuration, getBackoffTime). ``count`` is the
  number of unschedulable attempts, or the consecutive errors after an
  error. With SchedulerPopFromBackoffQ (on by default since 1.33), an empty
  activeQ pops a pod that failed as unschedulable from the backoffQ early.
- **unschedulable**: pods no node fits, with the plugins that rejected them
  (UnschedulablePlugins, PendingPlugins). A cluster event (``move``: a
  ``ClusterEvent`` and its old and new object) moves only the pods whose
  rejecting plugins registered it (``HintMap``, from DescribeProfiles) and
  whose hints answer Queue, to the backoffQ or, when their backoff is over,
  to the activeQ; to the activeQ at once when a plugin whose Pending status
  held the pod answers Queue (movePodsToActiveOrBackoffQueue,
  isPodWorthRequeuing). The hints of all the pods one event may move are
  asked in one QueueingHints call, by ``run_hints``; none is asked when no
  pod has a hinted plugin for it. Any pod left for 5 minutes is moved anyway
  (flushUnschedulablePodsLeftover, checked every 30 s).
- **gated**: pods a PreEnqueue plugin turned away (e.g. scheduling gates);
  they are checked again when the pod is updated, or when an event the
  gating plugin registered helps them.
- **in flight**: popped and not yet done. An event that arrives while a pod
  is in flight is remembered; if the pod's cycle fails, the events its
  rejecting plugins registered send it to the backoffQ (or the activeQ)
  instead of the unschedulable pool (upstream's in-flight events,
  determineSchedulingHintForInFlightPod), so an event is never missed
  between a pod's cycle and its requeue; the hints of those events are
  asked once the pod is back in the pool.

``scheduler_queue_incoming_pods_total{event,queue}`` counts every pod that
enters a queue by the event that moved it (upstream's labels: the event's
ClusterEvent label such as ``NodeAdd`` or ``AssignedPodDelete``, or
``ScheduleAttemptFailure``, ``BackoffComplete``, ``ForceActivate``,
``UnschedulableTimeout``).

Plugins may ask for pods to be activated (``activate``, upstream's Activate
of PodsToActivate, e.g. the rest of a gang): from the backoffQ, the
unschedulable pool or the gated set straight to admission, backoff or not.

Every pod is in exactly one of these places (or in none, once it is bound
or deleted): the queue never holds a pod twice and never drops one.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.events import (
    BACKOFF_COMPLETE,
    EVENT_FORCE_ACTIVATE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    EVENT_UNSCHEDULED_POD_ADD,
    FORCE_ACTIVATE,
    POP_FROM_BACKOFF_Q,
    SCHEDULE_ATTEMPT_FAILURE,
    UNSCHEDULABLE_TIMEOUT,
    ClusterEvent,
    pod_scheduling_properties_change,
)
from berth.shim import metrics
from berth.shim.hints import AskHints, HintMap, Strategy, Verdict
from berth.shim.service import SortKey

log = logging.getLogger(__name__)

# scheduling_queue.go: DefaultPodMaxInUnschedulablePodsDuration, and the
# flush periods of PriorityQueue.Run.
DEFAULT_MAX_IN_UNSCHEDULABLE = 5 * 60.0
UNSCHEDULABLE_FLUSH_PERIOD = 30.0
BACKOFF_FLUSH_PERIOD = 1.0

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
GATED = "gated"
IN_FLIGHT = "in_flight"


@dataclass(eq=False)
class QueuedPod:
    """upstream's QueuedPodInfo."""

    pod: cpb.Pod
    profile: str
    # When the pod last entered the queue or last failed (PodInfo.Timestamp).
    timestamp: float
    # When the pod first entered the queue (InitialAttemptTimestamp is set at
    # the first pop; this is when it arrived).
    first_seen: float
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    # The plugins that rejected the pod in its last cycle (upstream's
    # UnschedulablePlugins; the Pending ones also in pending_plugins).
    unschedulable_plugins: frozenset[str] = frozenset()
    pending_plugins: frozenset[str] = frozenset()
    key: SortKey = ()
    where: str = ""
    # moveRequestCycle seen when the pod was popped.
    popped_at_move: int = 0
    gated_by: str = ""
    # An update arrived while in flight: schedule the new spec next time.
    updated: cpb.Pod | None = None
    error_backoff: bool = False
    backoff_expiry: float = 0.0
    enqueued_at: float = field(default=0.0)
    # Counts the pod's entries into the unschedulable pool: a hint answer
    # asked during an earlier stay there is stale.
    parked: int = 0
    # The plugins counting this pod in scheduler_unschedulable_pods: its
    # rejectors since its last cycle, and the PreEnqueue plugin gating it.
    counted: frozenset[str] = frozenset()
    # Last moved by the unschedulable pool's flush (upstream's
    # WasFlushedFromUnschedulable), until its next failure.
    flushed: bool = False

    @property
    def uid(self) -> str:
        return self.pod.uid


SortKeys = Callable[[str, Sequence[pb.QueuedPod]], Awaitable[list[SortKey]]]
PreEnqueue = Callable[[str, cpb.Pod], Awaitable[pb.Status]]


@dataclass(eq=False)
class _HintJob:
    """The pods one event may move once their hints answer, with what the
    local half of isPodWorthRequeuing found for each."""

    event: ClusterEvent
    old: Any
    new: Any
    pods: list[tuple[QueuedPod, Verdict, int]]


# An event remembered for pods in flight: (move cycle, event, the one pod a
# ForceActivate is for or "", the event's old and new records).
_Move = tuple[int, ClusterEvent, str, Any, Any]


class SchedulingQueue:
    def __init__(
        self,
        sort_keys: SortKeys,
        pre_enqueue: PreEnqueue,
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = DEFAULT_MAX_IN_UNSCHEDULABLE,
        clock: Callable[[], float] = time.time,
        pop_from_backoff: bool = True,
        hints: HintMap | None = None,
        ask_hints: AskHints | None = None,
    ) -> None:
        """``hints``: the profiles' registered events (``set_hints`` replaces
        it once the plugin service described its profiles); without it every
        event moves every unschedulable pod. ``ask_hints``: the QueueingHints
        call; without it a hinted registration counts as Queue."""
        self._sort_keys = sort_keys
        self._pre_enqueue = pre_enqueue
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self.clock = clock
        self.pop_from_backoff = pop_from_backoff
        self._pods: dict[str, QueuedPod] = {}
        self._seq = itertools.count()
        self._active: list[tuple[SortKey, int, QueuedPod]] = []
        self._backoff: list[tuple[float, int, QueuedPod]] = []
        self._incoming: list[QueuedPod] = []
        self._unschedulable: dict[str, QueuedPod] = {}
        self._gated: dict[str, QueuedPod] = {}
        self._move_cycle = 0
        # Recent events, for pods in flight meanwhile.
        self._moves: deque[_Move] = deque(maxlen=4096)
        self.hints = hints or HintMap()
        self._ask_hints = ask_hints
        self._hint_jobs: deque[_HintJob] = deque()
        self._hints_ready = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._incoming_ready = asyncio.Event()
        self._closed = False
        # Called with a pod's uid when it leaves the queue bound or deleted
        # (shim/explain.py forgets its last attempt).
        self.on_leave: Callable[[str], None] | None = None

    def set_hints(self, hints: HintMap, ask_hints: AskHints | None = None) -> None:
        """The profiles' registered events, from DescribeProfiles."""
        self.hints = hints
        if ask_hints is not None:
            self._ask_hints = ask_hints

    # -- introspection ----------------------------------------------------------

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def get(self, uid: str) -> QueuedPod | None:
        return self._pods.get(uid)

    def pods(self) -> list[QueuedPod]:
        """Every pod the queue holds, wherever it is (a copy of the list)."""
        return list(self._pods.values())

    def find(self, namespace: str, name: str) -> QueuedPod | None:
        """The queued pod of that name (a walk over the queue: for
        explanations, not for cycles)."""
        for qp in self._pods.values():
            if qp.pod.name == name and qp.pod.namespace == namespace:
                return qp
        return None

    def counts(self) -> dict[str, int]:
        out = {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0, IN_FLIGHT: 0, "incoming": 0}
        for qp in self._pods.values():
            out[qp.where or "incoming"] = out.get(qp.where or "incoming", 0) + 1
        return out

    def _set_where(self, qp: QueuedPod, where: str) -> None:
        metrics.pending_moved(qp.where, where)
        if qp.counted and where in (IN_FLIGHT, "deleted", "bound"):
            # Popped for a cycle (activeQueue.pop) or gone
            # (PriorityQueue.Delete): its plugins stop counting it.
            metrics.unschedulable_plugins(qp.profile, qp.counted, -1)
            qp.counted = frozenset()
        if qp.where == UNSCHEDULABLE:
            self._unschedulable.pop(qp.uid, None)
        if where == UNSCHEDULABLE:
            self._unschedulable[qp.uid] = qp
            qp.parked += 1
        if qp.where == GATED:
            self._gated.pop(qp.uid, None)
        if where == GATED:
            self._gated[qp.uid] = qp
            qp.parked += 1
        qp.where = where

    # -- arrivals ------------------------------------------------------------------

    def add(self, pod: cpb.Pod, profile: str) -> None:
        """A new pending pod for one of our profiles (informer Add)."""
        if pod.uid in self._pods:
            self.update(pod)
            return
        now = self.clock()
        qp = QueuedPod(pod=pod, profile=profile, timestamp=now, first_seen=now, where="new")
        self._pods[pod.uid] = qp
        self._set_where(qp, "")
        self._incoming.append(qp)
        self._incoming_ready.set()
        metrics.incoming(EVENT_UNSCHEDULED_POD_ADD.label, ACTIVE)

    def update(self, pod: cpb.Pod) -> None:
        """The pending pod changed (informer Update)."""
        qp = self._pods.get(pod.uid)
        if qp is None:
            return
        if not spec_changed(qp.pod, pod):
            # isPodUpdated: a change of status alone (our own condition patch,
            # say) is no reason to try the pod again.
            qp.pod = pod
            return
        if qp.where == IN_FLIGHT:
            qp.updated = pod
            return
        old, qp.pod = qp.pod, pod
        events = pod_scheduling_properties_change(pod, old)
        if qp.where == GATED:
            # An update may lift a gate: PreEnqueue again.
            self._incoming.append(qp)
            self._set_where(qp, "")
            self._incoming_ready.set()
            metrics.incoming(events[0].label, ACTIVE)
        elif qp.where == UNSCHEDULABLE:
            # Update: each UpdatePod* event the change amounts to, judged by
            # the pod's rejecting plugins' registrations and hints, with the
            # old and new pod as the event's objects.
            for ev in events:
                if self._judge_and_move([qp], ev, old, pod):
                    break

    def delete(self, uid: str) -> QueuedPod | None:
        """The pod is gone or was bound by someone: forget it."""
        qp = self._pods.pop(uid, None)
        if qp is not None:
            self._remove_from_heaps(qp)
            self._set_where(qp, "deleted")
        if self.on_leave is not None:
            self.on_leave(uid)
        return qp

    def _remove_from_heaps(self, qp: QueuedPod) -> None:
        if qp.where == ACTIVE:
            self._active = [e for e in self._active if e[2] is not qp]
            heapq.heapify(self._active)
        elif qp.where == BACKOFF:
            self._backoff = [e for e in self._backoff if e[2] is not qp]
            heapq.heapify(self._backoff)
        elif qp.where == "" and qp in self._incoming:
            self._incoming.remove(qp)

    async def admit_incoming(self) -> int:
        """Runs PreEnqueue and QueueSort for the pods that arrived since the
        last call and puts them in the activeQ (or the gated set). Returns how
        many were admitted. Raises ServiceUnavailable when the plugin service
        cannot answer; the pods stay incoming and are tried again."""
        if not self._incoming:
            return 0
        batch, self._incoming = self._incoming, []
        try:
            by_profile: dict[str, list[QueuedPod]] = {}
            for qp in batch:
                if qp.uid not in self._pods or qp.where != "":
                    continue
                by_profile.setdefault(qp.profile, []).append(qp)
            for profile, pods in by_profile.items():
                ready: list[QueuedPod] = []
                for qp in pods:
                    sent = qp.pod
                    at_move = self._move_cycle
                    st = await self._pre_enqueue(profile, sent)
                    if self._pods.get(qp.uid) is not qp or qp.where != "":
                        continue  # deleted while PreEnqueue ran
                    if qp.pod is not sent and spec_changed(sent, qp.pod):
                        # Updated while PreEnqueue ran (a gate lifted, say):
                        # judge the new spec in the next round.
                        self._incoming.append(qp)
                        self._incoming_ready.set()
                        continue
                    if st.code != 0 and self._gating_event_since(
                        qp.profile, st.plugin or "PreEnqueue", at_move
                    ):
                        # An event the gating plugin registered arrived while
                        # PreEnqueue ran on the state before it (a gang's
                        # member, say): judge the pod again in the next round,
                        # as upstream's PreEnqueue under the queue lock would.
                        self._incoming.append(qp)
                        self._incoming_ready.set()
                        continue
                    if st.code != 0:
                        qp.gated_by = st.plugin or "PreEnqueue"
                        self._count(qp, frozenset((qp.gated_by,)))
                        self._set_where(qp, GATED)
                        log.info(
                            "pod %s/%s gated by %s: %s",
                            qp.pod.namespace,
                            qp.pod.name,
                            qp.gated_by,
                            "; ".join(st.reasons),
                        )
                    else:
                        ready.append(qp)
                if ready:
                    await self._activate(profile, ready)
        except Exception:
            # Put back what was not admitted, in order, for the next try (a pod
            # already back in the new incoming list is not put there twice).
            queued = {id(qp) for qp in self._incoming}
            rest = [
                qp
                for qp in batch
                if qp.where == "" and self._pods.get(qp.uid) is qp and id(qp) not in queued
            ]
            self._incoming = rest + self._incoming
            raise
        return len(batch)

    async def _activate(self, profile: str, pods: list[QueuedPod]) -> None:
        now = self.clock()
        req = [
            pb.QueuedPod(
                pod=qp.pod,
                enqueued_unix_micros=int(qp.timestamp * 1_000_000),
                attempts=qp.attempts,
            )
            for qp in pods
        ]
        keys = await self._sort_keys(profile, req)
        for qp, key in zip(pods, keys, strict=True):
            if qp.uid not in self._pods or qp.where != "":
                continue
            qp.key = key
            qp.enqueued_at = now
            heapq.heappush(self._active, (key, next(self._seq), qp))
            self._set_where(qp, ACTIVE)
        self._wakeup.set()

    async def wait_incoming(self) -> None:
        await self._incoming_ready.wait()
        self._incoming_ready.clear()

    @property
    def has_incoming(self) -> bool:
        return bool(self._incoming)

    # -- popping -------------------------------------------------------------------

    async def pop_batch(self, max_pods: int) -> list[QueuedPod]:
        """Waits for a pod, then pops up to ``max_pods`` consecutive pods of the
        same profile from the activeQ (the head decides the profile)."""
        while True:
            if self._closed:
                return []
            self.flush_backoff_completed()
            if not self._active and self.pop_from_backoff:
                self._pop_backoff_early()
            if self._active:
                break
            self._wakeup.clear()
            timeout = self._next_backoff_wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
        out: list[QueuedPod] = []
        profile = self._active[0][2].profile
        while self._active and len(out) < max_pods and self._active[0][2].profile == profile:
            _, _, qp = heapq.heappop(self._active)
            qp.attempts += 1
            qp.popped_at_move = self._move_cycle
            qp.backoff_expiry = 0.0
            self._set_where(qp, IN_FLIGHT)
            out.append(qp)
        return out

    def _next_backoff_wait(self) -> float | None:
        if not self._backoff:
            return None
        return max(0.01, self._backoff[0][0] - self.clock())

    def _pop_backoff_early(self) -> None:
        """SchedulerPopFromBackoffQ: an idle activeQ takes a backoff pod that
        failed as unschedulable (pods that hit an error wait out their backoff)."""
        for i, (_, _, qp) in enumerate(sorted(self._backoff, key=lambda e: (e[0], e[1]))):
            if not qp.error_backoff:
                self._backoff = [e for e in self._backoff if e[2] is not qp]
                heapq.heapify(self._backoff)
                self._push_active(qp)
                metrics.incoming(POP_FROM_BACKOFF_Q, ACTIVE)
                return
            if i > 64:
                return

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        self._incoming_ready.set()

    # -- after a cycle ---------------------------------------------------------------

    def backoff_duration(self, qp: QueuedPod) -> float:
        """backoffQueue.calculateBackoffDuration."""
        count = qp.consecutive_errors or qp.unschedulable_count
        if count <= 0:
            return 0.0
        return float(min(self.initial_backoff * (2 ** (count - 1)), self.max_backoff))

    @staticmethod
    def _count(qp: QueuedPod, plugins: frozenset[str]) -> None:
        """``plugins`` count ``qp`` in scheduler_unschedulable_pods from now
        until it is popped or leaves (those already counting it are not
        counted twice, as runPreEnqueuePlugin checks)."""
        new = plugins - qp.counted
        if new:
            metrics.unschedulable_plugins(qp.profile, new, 1)
            qp.counted |= new

    def _take_update(self, qp: QueuedPod) -> bool:
        if qp.updated is not None:
            qp.pod, qp.updated = qp.updated, None
            return True
        return False

    def done_unschedulable(
        self, qp: QueuedPod, plugins: frozenset[str], pending: frozenset[str] = frozenset()
    ) -> None:
        """The cycle found no node, or a Reserve or Permit plugin rejected
        the pod (AddUnschedulableIfNotPresent): ``plugins`` rejected it
        (UnschedulablePlugins), ``pending`` of them with Pending
        (PendingPlugins). The events that arrived while it was in flight
        decide where it goes (determineSchedulingHintForInFlightPod): the
        unschedulable pool, the backoffQ, or the activeQ."""
        if qp.uid not in self._pods:
            return
        qp.unschedulable_count += 1
        qp.flushed = False
        qp.consecutive_errors = 0
        qp.error_backoff = False
        qp.unschedulable_plugins = plugins | pending
        qp.pending_plugins = pending
        qp.timestamp = self.clock()
        # AddUnschedulableIfNotPresent: every rejector counts the pod, wherever
        # it goes next.
        self._count(qp, qp.unschedulable_plugins)
        asks: list[tuple[_Move, Verdict]] = []
        if self._take_update(qp):
            strategy = Strategy.AFTER_BACKOFF
        else:
            strategy, asks = self._moved_since(qp)
        if strategy != Strategy.SKIP:
            self._requeue(qp, strategy, SCHEDULE_ATTEMPT_FAILURE)
            return
        self._set_where(qp, UNSCHEDULABLE)
        metrics.incoming(SCHEDULE_ATTEMPT_FAILURE, UNSCHEDULABLE)
        # The in-flight events only hinted plugins registered: their hints
        # decide, as for a pod that was in the pool when they came.
        for (_, event, _, old, new), verdict in asks:
            self._hint_jobs.append(_HintJob(event, old, new, [(qp, verdict, qp.parked)]))
        if asks:
            self._hints_ready.set()

    def _gating_event_since(self, profile: str, plugin: str, cycle: int) -> bool:
        """Has an event that may interest the PreEnqueue plugin ``plugin``
        (gating_matches) been moved on since move cycle ``cycle``?"""
        for move_cycle, event, _target, _old, _new in reversed(self._moves):
            if move_cycle <= cycle:
                return False
            if self.hints.gating_matches(profile, plugin, event):
                return True
        return False

    def _moved_since(self, qp: QueuedPod) -> tuple[Strategy, list[tuple[_Move, Verdict]]]:
        """Where the events that arrived while this pod was in flight send it
        (determineSchedulingHintForInFlightPod): a pod no plugin rejected is
        retried after its backoff; otherwise each remembered event is judged
        by the pod's rejecting plugins' registrations. Returns the strategy
        the registrations without hints decide, and the events whose hints
        are still to be asked (none when they could not change it)."""
        if not qp.unschedulable_plugins and not qp.pending_plugins:
            return Strategy.AFTER_BACKOFF, []
        if qp.popped_at_move >= self._move_cycle:
            return Strategy.SKIP, []
        if not self._moves or self._moves[0][0] > qp.popped_at_move + 1:
            return Strategy.AFTER_BACKOFF, []  # older than the record reaches
        best = Strategy.SKIP
        asks: list[tuple[_Move, Verdict]] = []
        for move in self._moves:
            cycle, event, target, _, _ = move
            if cycle <= qp.popped_at_move:
                continue
            verdict = self.hints.judge(
                qp.profile,
                qp.unschedulable_plugins,
                qp.pending_plugins,
                event,
                target_uid=target,
                pod_uid=qp.uid,
            )
            if verdict.decided:
                best = max(best, verdict.strategy)
            elif self._ask_hints is None:
                best = max(best, HintMap.assume_queue(verdict, qp.pending_plugins))
            else:
                best = max(best, verdict.strategy)
                asks.append((move, verdict))
            if best == Strategy.IMMEDIATELY:
                break
        return best, (asks if best == Strategy.SKIP else [])

    def done_error(self, qp: QueuedPod) -> None:
        """The cycle or the binding failed with an error: the error backoffQ."""
        if qp.uid not in self._pods:
            return
        qp.consecutive_errors += 1
        qp.flushed = False
        qp.error_backoff = True
        qp.unschedulable_plugins = frozenset()
        qp.pending_plugins = frozenset()
        qp.timestamp = self.clock()
        self._take_update(qp)
        self._to_backoff(qp, SCHEDULE_ATTEMPT_FAILURE)

    def done_retry(self, qp: QueuedPod) -> None:
        """The attempt did not happen (the call was refused before any cycle ran): back
        to the activeQ without a backoff, the attempt not counted."""
        if qp.uid not in self._pods:
            return
        qp.attempts = max(0, qp.attempts - 1)
        self._take_update(qp)
        self._push_active(qp)

    def done_bound(self, qp: QueuedPod) -> None:
        """Scheduled and bound (or handed to the binding cycle for good)."""
        self._pods.pop(qp.uid, None)
        self._set_where(qp, "bound")
        if self.on_leave is not None:
            self.on_leave(qp.uid)

    def _to_backoff(self, qp: QueuedPod, event: str) -> None:
        expiry = qp.timestamp + self.backoff_duration(qp)
        qp.backoff_expiry = expiry
        if expiry <= self.clock():
            self._push_active(qp)
            metrics.incoming(event, ACTIVE)
            return
        heapq.heappush(self._backoff, (expiry, next(self._seq), qp))
        self._set_where(qp, BACKOFF)
        metrics.incoming(event, BACKOFF)
        self._wakeup.set()

    def _requeue(self, qp: QueuedPod, strategy: Strategy, event: str) -> None:
        """requeuePodWithQueueingStrategy for a pod leaving the unschedulable
        pool or its cycle: after its backoff, or to the activeQ now. A gated
        pod goes through admission (PreEnqueue) again."""
        if qp.where == GATED or strategy == Strategy.IMMEDIATELY:
            self._push_active(qp)
            metrics.incoming(event, ACTIVE)
        elif strategy == Strategy.AFTER_BACKOFF:
            self._to_backoff(qp, event)

    def _push_active(self, qp: QueuedPod) -> None:
        """Towards the activeQ: through admission, which runs PreEnqueue again
        and takes a new sort key for the new timestamp (moveToActiveQ)."""
        self._set_where(qp, "")
        self._incoming.append(qp)
        self._incoming_ready.set()

    # -- moving ----------------------------------------------------------------------

    def flush_backoff_completed(self) -> int:
        """flushBackoffQCompleted: backoff over, into the activeQ."""
        now = self.clock()
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            _, _, qp = heapq.heappop(self._backoff)
            self._push_active(qp)
            metrics.incoming(BACKOFF_COMPLETE, ACTIVE)
            moved += 1
        return moved

    def move(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        *,
        pre_check: Callable[[QueuedPod], bool] | None = None,
    ) -> int:
        """A cluster event (MoveAllToActiveOrBackoffQueue): the unschedulable
        pods it may help leave the pool, and gated pods whose gating plugin
        registered it go through PreEnqueue again. ``old`` and ``new`` are
        the event's records (cpb.Node, cpb.Pod or cpb.ClusterObject; None
        for an add's old and a delete's new);
        ``pre_check`` narrows the pods (PreEnqueueCheck). Pods whose hints
        must be asked wait in the pool for ``run_hints``; pods in flight take
        note of the event. Returns how many pods moved now."""
        if not self.hints.interested(event):
            return 0
        pods = [qp for qp in self._unschedulable.values() if pre_check is None or pre_check(qp)]
        gated = [
            qp
            for qp in self._gated.values()
            if qp.gated_by
            and (pre_check is None or pre_check(qp))
            and self.hints.gating_matches(qp.profile, qp.gated_by, event)
        ]
        moved = self._judge_and_move(pods + gated, event, old, new)
        self._move_cycle += 1
        self._moves.append((self._move_cycle, event, "", old, new))
        if moved:
            log.debug("%s moved %d unschedulable pods", event.label, moved)
        return moved

    def _judge_and_move(
        self, pods: Sequence[QueuedPod], event: ClusterEvent, old: Any, new: Any
    ) -> int:
        """isPodWorthRequeuing for each pod: the decided ones move now, the
        others wait for one QueueingHints call for them all."""
        moved = 0
        asking: list[tuple[QueuedPod, Verdict, int]] = []
        # Pods rejected alike are judged alike: one verdict per kind of pod.
        verdicts: dict[tuple[str, frozenset[str], frozenset[str]], Verdict] = {}
        for qp in pods:
            rejectors = frozenset((qp.gated_by,)) if qp.where == GATED else qp.unschedulable_plugins
            key = (qp.profile, rejectors, qp.pending_plugins)
            verdict = verdicts.get(key)
            if verdict is None:
                verdict = verdicts[key] = self.hints.judge(
                    qp.profile, rejectors, qp.pending_plugins, event
                )
            if not verdict.decided:
                if self._ask_hints is not None:
                    asking.append((qp, verdict, qp.parked))
                    continue
                strategy = HintMap.assume_queue(verdict, qp.pending_plugins)
            else:
                strategy = verdict.strategy
            if strategy != Strategy.SKIP:
                self._requeue(qp, strategy, event.label)
                moved += 1
        if asking:
            self._hint_jobs.append(_HintJob(event, old, new, asking))
            self._hints_ready.set()
        return moved

    async def process_hints(self) -> int:
        """Asks the hints of the events waiting for them, one QueueingHints
        call per event for all its pods, and moves the pods whose hints
        answer Queue. A pod that left the pool meanwhile is left alone. When
        the plugin service cannot answer, every asked plugin counts as
        answering Queue (upstream takes a hint's error as Queue), so no pod
        is stranded. Returns how many pods moved."""
        moved = 0
        while self._hint_jobs:
            job = self._hint_jobs.popleft()
            live = [(qp, v, n) for qp, v, n in job.pods if self._parked_since(qp, n)]
            if not live:
                continue
            ask = self._ask_hints
            assert ask is not None
            try:
                answers = await ask(
                    job.event, job.old, job.new, [(qp.profile, qp.pod, v.ask) for qp, v, _ in live]
                )
            except Exception as exc:
                log.warning(
                    "queueing hints for event %s could not be asked (%s): %d pod(s) retried "
                    "as if their hints answered Queue",
                    job.event.label,
                    exc,
                    len(live),
                )
                answers = [v.ask for _, v, _ in live]
            for (qp, verdict, n), queueing in zip(live, answers, strict=True):
                if not self._parked_since(qp, n):
                    continue
                strategy = HintMap.settle(verdict, queueing, qp.pending_plugins)
                if strategy != Strategy.SKIP:
                    self._requeue(qp, strategy, job.event.label)
                    moved += 1
        return moved

    def _parked_since(self, qp: QueuedPod, parked: int) -> bool:
        """Is the pod still where it was when its hints were asked for?"""
        return (
            self._pods.get(qp.uid) is qp
            and qp.where in (UNSCHEDULABLE, GATED)
            and qp.parked == parked
        )

    async def run_hints(self) -> None:
        """Asks the queueing hints of each event as it comes (``move``)."""
        while not self._closed:
            await self._hints_ready.wait()
            self._hints_ready.clear()
            await self.process_hints()

    @property
    def hints_waiting(self) -> int:
        """Events whose hints are still to be asked."""
        return len(self._hint_jobs)

    def activate(self, uids: Sequence[str]) -> int:
        """PriorityQueue.Activate (scheduling_queue.go): the pods a plugin asked
        for (PodsToActivate) leave the backoffQ or the unschedulable pool for
        the activeQ now, whatever is left of their backoff (through admission,
        so PreEnqueue runs again: a gated pod stays gated unless its gate has
        lifted, as upstream's gated pods sit in unschedulablePods). A pod in
        flight takes note, so a failed cycle sends it to the backoffQ instead
        of the unschedulable pool (upstream's EventForceActivate for in-flight
        pods). Pods already active, or unknown here, are left alone. Returns
        how many were moved."""
        moved: list[QueuedPod] = []
        for uid in dict.fromkeys(uids):
            qp = self._pods.get(uid)
            if qp is None:
                continue
            if qp.where in (BACKOFF, UNSCHEDULABLE, GATED):
                moved.append(qp)
            elif qp.where == IN_FLIGHT:
                # EventForceActivate for this pod only.
                self._move_cycle += 1
                self._moves.append((self._move_cycle, EVENT_FORCE_ACTIVATE, qp.uid, None, None))
        if not moved:
            return 0
        if any(qp.where == BACKOFF for qp in moved):
            # One pass over the backoffQ for all of them.
            leaving = {id(qp) for qp in moved if qp.where == BACKOFF}
            self._backoff = [e for e in self._backoff if id(e[2]) not in leaving]
            heapq.heapify(self._backoff)
        for qp in moved:
            self._push_active(qp)
            metrics.incoming(FORCE_ACTIVATE, ACTIVE)
        log.debug("activated %d pod(s)", len(moved))
        return len(moved)

    def ungate(self, uid: str, plugin: str) -> bool:
        """A gate the shim itself holds was lifted without any change to the pod
        (the end of the pod's asynchronous preemption, which DefaultPreemption's
        PreEnqueue waits for: executor.go IsPodRunningPreemption). A pod gated
        there was on its way to the activeQ (an event, e.g. a victim's deletion,
        or the end of its backoff, sent it), so it carries on: to the backoffQ,
        or the activeQ once its backoff is over. Upstream reaches the same end
        with its last-victim check: a deletion that arrives before the
        preemption's goroutine returns is not lost. A pod not gated by
        ``plugin`` is left alone. Returns whether the pod moved."""
        qp = self._pods.get(uid)
        if qp is None or qp.where != GATED or qp.gated_by != plugin:
            return False
        qp.gated_by = ""
        self._to_backoff(qp, "PreemptionFinished")
        return True

    def flush_unschedulable_leftover(self) -> int:
        """flushUnschedulablePodsLeftover: pods unschedulable for longer than
        podMaxInUnschedulablePodsDuration are retried."""
        now = self.clock()
        moved = 0
        for qp in list(self._unschedulable.values()):
            if now - qp.timestamp > self.max_in_unschedulable:
                qp.flushed = True
                self._to_backoff(qp, UNSCHEDULABLE_TIMEOUT)
                moved += 1
        if moved:
            # movePodsToActiveOrBackoffQueue with EventUnschedulableTimeout:
            # pods in flight take note of the wildcard event too.
            self._move_cycle += 1
            self._moves.append((self._move_cycle, EVENT_UNSCHEDULABLE_TIMEOUT, "", None, None))
        return moved

    async def run_flushers(self) -> None:
        """The periodic flushes of PriorityQueue.Run."""
        last_leftover = self.clock()
        while not self._closed:
            await asyncio.sleep(BACKOFF_FLUSH_PERIOD)
            if self.flush_backoff_completed():
                self._wakeup.set()
            if self.clock() - last_leftover >= UNSCHEDULABLE_FLUSH_PERIOD:
                last_leftover = self.clock()
                self.flush_unschedulable_leftover()


def activate_pods(queue: SchedulingQueue, pod: cpb.Pod, point: str, uids: Iterable[str]) -> None:
    """PodsToActivate: the pods that ``point`` of ``pod``'s cycle asked for, if
    they wait in the backoffQ or the unschedulable pool, go to the activeQ now
    (``SchedulingQueue.activate``); logged when any were asked for."""
    wanted = list(uids)
    if not wanted:
        return
    moved = queue.activate(wanted)
    log.info(
        "%s of %s/%s asked to activate %d pod(s); %d moved to the active queue",
        point,
        pod.namespace,
        pod.name,
        len(wanted),
        moved,
    )


def spec_changed(old: cpb.Pod, new: cpb.Pod) -> bool:
    """Whether a pod changed beyond its status (pod_update.go isPodUpdated
    ignores status and resourceVersion)."""
    if old.phase == new.phase and old.nominated_node_name == new.nominated_node_name:
        return old != new
    a = cpb.Pod()
    a.CopyFrom(old)
    b = cpb.Pod()
    b.CopyFrom(new)
    for p in (a, b):
        p.phase = ""
        p.nominated_node_name = ""
    return a != b


__all__ = [
    "ACTIVE",
    "BACKOFF",
    "GATED",
    "IN_FLIGHT",
    "UNSCHEDULABLE",
    "QueuedPod",
    "SchedulingQueue",
    "activate_pods",
    "spec_changed",
]
