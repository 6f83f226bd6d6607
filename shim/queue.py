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
- **unschedulable**: pods no node fits. A cluster event that may help them
  (node added or changed, an assigned pod deleted, ...) moves them to the
  backoffQ or, when their backoff is over, to the activeQ
  (movePodsToActiveOrBackoffQueue); any left for 5 minutes are moved anyway
  (flushUnschedulablePodsLeftover, checked every 30 s).
- **gated**: pods a PreEnqueue plugin turned away (e.g. scheduling gates);
  they are checked again when the pod is updated.
- **in flight**: popped and not yet done. An event that arrives while a pod
  is in flight sends it to the backoffQ instead of the unschedulable pool if
  its cycle fails (upstream's moveRequestCycle / in-flight events), so an
  event is never missed between a pod's cycle and its requeue.

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

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.shim import metrics
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
    unschedulable_plugins: frozenset[str] = frozenset()
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

    @property
    def uid(self) -> str:
        return self.pod.uid


SortKeys = Callable[[str, Sequence[pb.QueuedPod]], Awaitable[list[SortKey]]]
PreEnqueue = Callable[[str, cpb.Pod], Awaitable[pb.Status]]


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
    ) -> None:
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
        self._move_cycle = 0
        # Recent moves and whom they help, for pods in flight meanwhile.
        self._moves: deque[tuple[int, Callable[[QueuedPod], bool] | None]] = deque(maxlen=4096)
        self._wakeup = asyncio.Event()
        self._incoming_ready = asyncio.Event()
        self._closed = False

    # -- introspection ----------------------------------------------------------

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def get(self, uid: str) -> QueuedPod | None:
        return self._pods.get(uid)

    def counts(self) -> dict[str, int]:
        out = {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 0, IN_FLIGHT: 0, "incoming": 0}
        for qp in self._pods.values():
            out[qp.where or "incoming"] = out.get(qp.where or "incoming", 0) + 1
        return out

    def _set_where(self, qp: QueuedPod, where: str) -> None:
        metrics.pending_moved(qp.where, where)
        if qp.where == UNSCHEDULABLE:
            self._unschedulable.pop(qp.uid, None)
        if where == UNSCHEDULABLE:
            self._unschedulable[qp.uid] = qp
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
        metrics.incoming("PodAdd", ACTIVE)

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
        qp.pod = pod
        if qp.where == GATED:
            # An update may lift a gate: PreEnqueue again.
            self._incoming.append(qp)
            self._set_where(qp, "")
            self._incoming_ready.set()
            metrics.incoming("PodUpdate", ACTIVE)
        elif qp.where == UNSCHEDULABLE:
            # An update may fix what made the pod unschedulable (Update: to the
            # backoffQ while isPodBackingoff, else to the activeQ).
            self._to_backoff(qp, "PodUpdate")

    def delete(self, uid: str) -> QueuedPod | None:
        """The pod is gone or was bound by someone: forget it."""
        qp = self._pods.pop(uid, None)
        if qp is not None:
            self._remove_from_heaps(qp)
            self._set_where(qp, "deleted")
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
                    st = await self._pre_enqueue(profile, sent)
                    if self._pods.get(qp.uid) is not qp or qp.where != "":
                        continue  # deleted while PreEnqueue ran
                    if qp.pod is not sent and spec_changed(sent, qp.pod):
                        # Updated while PreEnqueue ran (a gate lifted, say):
                        # judge the new spec in the next round.
                        self._incoming.append(qp)
                        self._incoming_ready.set()
                        continue
                    if st.code != 0:
                        qp.gated_by = st.plugin or "PreEnqueue"
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

    def _take_update(self, qp: QueuedPod) -> bool:
        if qp.updated is not None:
            qp.pod, qp.updated = qp.updated, None
            return True
        return False

    def done_unschedulable(self, qp: QueuedPod, plugins: frozenset[str]) -> None:
        """The cycle found no node (AddUnschedulableIfNotPresent)."""
        if qp.uid not in self._pods:
            return
        qp.unschedulable_count += 1
        qp.consecutive_errors = 0
        qp.error_backoff = False
        qp.unschedulable_plugins = plugins
        qp.timestamp = self.clock()
        if self._take_update(qp) or self._moved_since(qp):
            # Something changed while the pod was in its cycle: try again
            # after the backoff rather than wait for another event.
            self._to_backoff(qp, "ScheduleAttemptFailure")
        else:
            self._set_where(qp, UNSCHEDULABLE)
            metrics.incoming("ScheduleAttemptFailure", UNSCHEDULABLE)

    def _moved_since(self, qp: QueuedPod) -> bool:
        """Did an event that may help this pod arrive while it was in flight
        (upstream's in-flight events, checked against the pod's rejectors)?"""
        if qp.popped_at_move >= self._move_cycle:
            return False
        if not self._moves or self._moves[0][0] > qp.popped_at_move + 1:
            return True  # older than the record reaches: assume it may help
        return any(
            cycle > qp.popped_at_move and (helps is None or helps(qp))
            for cycle, helps in self._moves
        )

    def done_error(self, qp: QueuedPod) -> None:
        """The cycle or the binding failed with an error: the error backoffQ."""
        if qp.uid not in self._pods:
            return
        qp.consecutive_errors += 1
        qp.error_backoff = True
        qp.timestamp = self.clock()
        self._take_update(qp)
        self._to_backoff(qp, "ScheduleAttemptFailure")

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
            metrics.incoming("BackoffComplete", ACTIVE)
            moved += 1
        return moved

    def move_all(self, event: str, helps: Callable[[QueuedPod], bool] | None = None) -> int:
        """A cluster event that may make unschedulable pods schedulable
        (MoveAllToActiveOrBackoffQueue): each pod the event may help (``helps``,
        from the plugins that rejected it) goes to the backoffQ, or to the
        activeQ if its backoff is already over. Pods in flight take note."""
        self._move_cycle += 1
        self._moves.append((self._move_cycle, helps))
        moved = 0
        for qp in list(self._unschedulable.values()):
            if helps is None or helps(qp):
                self._to_backoff(qp, event)
                moved += 1
        if moved:
            log.debug("%s moved %d unschedulable pods", event, moved)
        return moved

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
                self._move_cycle += 1
                self._moves.append((self._move_cycle, _only(qp.uid)))
        if not moved:
            return 0
        if any(qp.where == BACKOFF for qp in moved):
            # One pass over the backoffQ for all of them.
            leaving = {id(qp) for qp in moved if qp.where == BACKOFF}
            self._backoff = [e for e in self._backoff if id(e[2]) not in leaving]
            heapq.heapify(self._backoff)
        for qp in moved:
            self._push_active(qp)
            metrics.incoming("ForceActivate", ACTIVE)
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
                self._to_backoff(qp, "UnschedulableTimeout")
                moved += 1
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


def _only(uid: str) -> Callable[[QueuedPod], bool]:
    """A move that helps one pod only (an activation of a pod in flight)."""

    def helps(qp: QueuedPod) -> bool:
        return qp.uid == uid

    return helps


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
