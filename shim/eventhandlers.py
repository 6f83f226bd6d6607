"""Reactions to cluster events (pkg/scheduler/eventhandlers.go): what the
informers report goes into the scheduler cache and the scheduling queue, and
an event that may help pods no node fitted moves them.

- Nodes: added, updated or deleted in the cache (addNodeToCache,
  updateNodeInCache, deleteNodeFromCache); an added node, or an update of
  what scheduling reads (nodeSchedulingPropertiesChange), moves the
  unschedulable pods.
- Pods bound to a node, by this scheduler or any other, count on their node
  (addPodToCache, updatePodInCache) and leave the queue; pending pods of this
  scheduler's profiles are queued or updated in the queue
  (addPodToSchedulingQueue, updatePodInSchedulingQueue), with their
  nominations (the nominator); deleted pods leave both
  (deletePodFromCache, deletePodFromSchedulingQueue), rejecting the pod if
  it waits at Permit and ending its binding cycle's wait between PreBind
  calls (also when it is being deleted).
- Objects a plugin reads changed (shim/objects.py): each change is a
  cluster event on the kind's EventResource.

Which unschedulable pods an event moves is the queue's to decide
(shim/queue.py ``move``): the plugins that rejected each pod, the events
they registered and their hints (DescribeProfiles, QueueingHints). Each
event carries its old and new record, as upstream's handlers pass the
objects to MoveAllToActiveOrBackoffQueue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence, Set

import orjson

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_ASSIGNED_POD_UPDATE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD,
    EVENT_UNSCHEDULED_POD_DELETE,
    EVENT_UNSCHEDULED_POD_UPDATE,
    ActionType,
    ClusterEvent,
    EventResource,
    event_resource,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
)
from berth.kube.records import ObjectError, pod_record
from berth.shim import metrics
from berth.shim.binding import WaitingPods
from berth.shim.cache import SchedulerCache
from berth.shim.informer import ADDED, DELETED, Event
from berth.shim.objects import ObjectChange, Source
from berth.shim.podstatus import PodStatusWriter
from berth.shim.queue import QueuedPod, SchedulingQueue

log = logging.getLogger(__name__)


class EventHandlers:
    """The informers' callbacks (addAllEventHandlers)."""

    def __init__(
        self,
        *,
        profiles: Set[str],
        cache: SchedulerCache,
        queue: SchedulingQueue,
        waiting: WaitingPods,
        status: PodStatusWriter,
        binding_nominations: dict[str, str],
    ) -> None:
        """``profiles``: the schedulerNames this scheduler answers for
        (responsibleForPod). ``binding_nominations``: the pods whose
        status.nominatedNodeName a binding cycle set, to that node
        (shim/binding.py)."""
        self._profiles = profiles
        self._cache = cache
        self._queue = queue
        self._waiting = waiting
        self._status = status
        self._binding_nominations = binding_nominations
        # A profile runs GangScheduling: an unscheduled pod's arrival moves the
        # pods it may complete a gang for (addPodToSchedulingQueue, with the
        # GangScheduling feature gate on). Set when the profiles are known;
        # done when the pod reaches the plugin's pod objects (on_object_change),
        # so PreEnqueue counts it.
        self.move_on_unscheduled_add = False

    def on_node_events(self, events: list[Event[cpb.Node]]) -> None:
        cache, queue = self._cache, self._queue
        for ev in events:
            start = time.perf_counter()
            if ev.type == DELETED:
                # deleteNodeFromCache: the event first, then the cache.
                gone = cache.nodes.get(ev.key, ev.record)
                queue.move(EVENT_NODE_DELETE, gone, None)
                cache.delete_node(ev.key)
                _handled(EVENT_NODE_DELETE.label, start)
                continue
            old = cache.nodes.get(ev.key)
            cache.upsert_node(ev.record)
            if ev.type == ADDED or old is None:
                queue.move(EVENT_NODE_ADD, None, ev.record)
                _handled(EVENT_NODE_ADD.label, start)
                continue
            # updateNodeInCache: one event per part of the node that changed,
            # each observed with the cache update and its own move.
            updating = time.perf_counter() - start
            for evt in node_scheduling_properties_change(ev.record, old):
                moving = time.perf_counter()
                queue.move(evt, old, ev.record)
                _handled(evt.label, moving - updating)

    def on_pod_events(self, events: list[Event[cpb.Pod]]) -> None:
        cache, queue = self._cache, self._queue
        for ev in events:
            start = time.perf_counter()
            pod = ev.record
            uid = ev.key
            if ev.type == DELETED:
                was_placed = cache.holds(uid)
                placed = cache.state.pods.get(uid)
                was_nominated = bool(cache.nominated_to(uid)) or (
                    bool(pod.nominated_node_name) and pod.scheduler_name in self._profiles
                )
                cache.remove_pod(uid)
                queue.delete(uid)
                self._status.forget(uid)
                self._binding_nominations.pop(uid, None)
                self._waiting.pod_deleted(uid)
                if was_placed:
                    queue.move(EVENT_ASSIGNED_POD_DELETE, placed or pod, None)
                    _handled(EVENT_ASSIGNED_POD_DELETE.label, start)
                    continue
                if was_nominated and not pod.node_name:
                    # deletePodFromSchedulingQueue: pods of lower or equal
                    # priority counted the nominated pod as if it were assigned.
                    queue.move(
                        EVENT_ASSIGNED_POD_DELETE, pod, None, pre_check=le_priority(pod.priority)
                    )
                if pod.scheduler_name in self._profiles:
                    _handled(EVENT_UNSCHEDULED_POD_DELETE.label, start)
                continue
            if pod.node_name:
                # Bound (by us or anyone): it occupies its node; stop queueing it.
                qp = queue.get(uid)
                if qp is not None and qp.where != "in_flight":
                    queue.delete(uid)
                before = cache.state.pods.get(uid) if cache.holds(uid) else None
                confirmed = cache.is_assumed(uid)
                cache.add_or_update_pod(pod)
                if before is None or confirmed:
                    # addAssignedPodToCache, for a pod the informer reports
                    # bound for the first time (its binding confirmed too).
                    queue.move(EVENT_ASSIGNED_POD_ADD, None, pod)
                    _handled(EVENT_ASSIGNED_POD_ADD.label, start)
                else:
                    # updateAssignedPodInCache: one event per part of the pod
                    # that changed, each observed with the cache update and its
                    # own move, and the whole as AssignedPodUpdate.
                    updating = time.perf_counter() - start
                    for evt in pod_scheduling_properties_change(pod, before):
                        moving = time.perf_counter()
                        queue.move(evt, before, pod)
                        _handled(evt.label, moving - updating)
                    _handled(EVENT_ASSIGNED_POD_UPDATE.label, start)
                continue
            if pod.scheduler_name not in self._profiles:
                continue
            if pod.terminating:
                # skipPodSchedule: a pod being deleted is not scheduled; a
                # binding cycle waiting between PreBind calls stops waiting.
                if uid in self._waiting.pre_bind:
                    self._waiting.pre_bind[uid].set()
                queue.delete(uid)
                cache.clear_nomination(uid)
                continue
            if cache.is_assumed(uid):
                # Being bound: the unbound copy is older news (skipPodUpdate).
                continue
            qp = queue.get(uid)
            old = None
            if qp is not None:
                old = qp.updated if qp.updated is not None else qp.pod
                queue.update(pod)
            else:
                queue.add(pod, pod.scheduler_name)
            if (
                pod.nominated_node_name
                or uid in cache.nominated
                or (old is not None and old.nominated_node_name)
            ):
                self._nomination_update(old, pod)
            # addPodToSchedulingQueue, updatePodInSchedulingQueue.
            evt = EVENT_UNSCHEDULED_POD_ADD if old is None else EVENT_UNSCHEDULED_POD_UPDATE
            _handled(evt.label, start)

    def _nomination_update(self, old: cpb.Pod | None, pod: cpb.Pod) -> None:
        """A pending pod of ours arrived or changed with a nomination, or lost
        one: the nominator follows (AddNominatedPod, UpdateNominatedPod), and a
        nomination that moved away from a node may let lower or equal priority
        pods fit there (updatePodInSchedulingQueue, hasNominatedNodeNameChanged)."""
        old_node = old.nominated_node_name if old is not None else ""
        self._cache.update_nominated(old_node, pod)
        expected = self._binding_nominations.get(pod.uid)
        if expected is not None and pod.nominated_node_name != expected:
            self._binding_nominations.pop(pod.uid, None)
            if old_node == expected:
                # The binding cycle's nomination, cleared after that cycle failed:
                # the node got back what the assumed pod held when it was
                # forgotten, which moves pods only after a preemption
                # (assumed_pod_forgotten), and its nomination leaving moves none
                # either, or a gang rejected at Permit would bring its
                # unschedulable member straight back to reject it again.
                return
        if old is not None and old_node and old_node != pod.nominated_node_name:
            self._queue.move(
                EVENT_ASSIGNED_POD_DELETE, old, None, pre_check=le_priority(old.priority)
            )

    def on_object_change(self, source: Source, changes: Sequence[ObjectChange]) -> None:
        """Objects a plugin reads changed: each change is an event on the
        kind's EventResource (upstream's buildEvtResHandler), with the old
        and new object."""
        resource = event_resource(source.group, source.version, source.resource)
        if resource == EventResource.POD and self.move_on_unscheduled_add:
            self._unscheduled_pods_added(changes)
            return
        if resource in (EventResource.POD, EventResource.NODE):
            # Pods and nodes a plugin reads as objects (a label-selected set
            # of pods, say) are the pod and node informers' events already.
            return
        for kind, old, new in changes:
            start = time.perf_counter()
            if kind == DELETED:
                action = ActionType.DELETE
            elif old is None:
                action = ActionType.ADD
            else:
                action = ActionType.UPDATE
            evt = ClusterEvent(resource, action)
            self._queue.move(evt, old, new)
            _handled(evt.label, start)

    def _unscheduled_pods_added(self, changes: Sequence[ObjectChange]) -> None:
        """addPodToSchedulingQueue's MoveAllToActiveOrBackoffQueue(
        EventUnscheduledPodAdd) under the GangScheduling gate: each pod added
        unbound, once the cluster state holds its object (which the plugin
        counts), moves the pods whose rejecting or gating plugin registered
        a pod add (GangScheduling's hint keeps it to the same group)."""
        for kind, old, new in changes:
            if kind == DELETED or old is not None or new is None:
                continue
            start = time.perf_counter()
            try:
                pod = pod_record(orjson.loads(new.json))
            except (ObjectError, ValueError, TypeError) as exc:
                log.debug("pod object %s/%s: %s", new.ref.namespace, new.ref.name, exc)
                continue
            if pod.node_name:
                continue
            self._queue.move(EVENT_UNSCHEDULED_POD_ADD, None, pod)
            _handled(EVENT_UNSCHEDULED_POD_ADD.label, start)

    def assumed_pod_forgotten(self, pod: cpb.Pod) -> None:
        """handleBindingCycleError: an assumed pod forgotten frees what it held
        on its node, like an assigned pod's deletion; the forgotten pod itself
        is left alone (its own failure decides where it goes)."""

        def others(qp: QueuedPod) -> bool:
            return qp.uid != pod.uid

        self._queue.move(EVENT_ASSIGNED_POD_DELETE, pod, None, pre_check=others)


def _handled(label: str, start: float) -> None:
    """scheduler_event_handling_duration_seconds: the event ``label`` took
    from ``start`` (time.perf_counter) until now to handle."""
    metrics.event_handled(label, time.perf_counter() - start)


def le_priority(priority: int) -> Callable[[QueuedPod], bool]:
    """getLEPriorityPreCheck: pods of lower or equal priority, for the event
    of a nominated pod leaving a node."""

    def helps(qp: QueuedPod) -> bool:
        return qp.pod.priority <= priority

    return helps


__all__ = [
    "EventHandlers",
    "ObjectChange",
    "le_priority",
]
