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
  it waits at Permit.
- Objects a plugin reads changed (shim/objects.py): the pods its plugins
  rejected are moved.

Which unschedulable pods an event moves is decided from the plugins that
rejected them, with a table of the in-tree plugins' events (their
EventsToRegister); a plugin not in the table is moved by every event.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from berth.api.v1 import cluster_pb2 as cpb
from berth.shim.binding import WaitingPods
from berth.shim.cache import SchedulerCache
from berth.shim.informer import ADDED, DELETED, Event
from berth.shim.objects import Source
from berth.shim.podstatus import PodStatusWriter
from berth.shim.queue import QueuedPod, SchedulingQueue

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

    def on_node_events(self, events: list[Event[cpb.Node]]) -> None:
        cache, queue = self._cache, self._queue
        for ev in events:
            if ev.type == DELETED:
                cache.delete_node(ev.key)
                continue
            old = cache.nodes.get(ev.key)
            cache.upsert_node(ev.record)
            if ev.type == ADDED or old is None:
                queue.move_all("NodeAdd")
            elif node_changed_for_scheduling(old, ev.record):
                queue.move_all("NodeUpdate")

    def on_pod_events(self, events: list[Event[cpb.Pod]]) -> None:
        cache, queue = self._cache, self._queue
        for ev in events:
            pod = ev.record
            uid = ev.key
            if ev.type == DELETED:
                was_placed = cache.holds(uid)
                was_nominated = bool(cache.nominated_to(uid)) or (
                    bool(pod.nominated_node_name) and pod.scheduler_name in self._profiles
                )
                cache.remove_pod(uid)
                queue.delete(uid)
                self._status.forget(uid)
                self._binding_nominations.pop(uid, None)
                w = self._waiting.get(uid)
                if w is not None:
                    w.reject("", "pod deleted while waiting at Permit")
                if was_placed:
                    queue.move_all("AssignedPodDelete", pod_delete_helps)
                elif was_nominated and not pod.node_name:
                    # deletePodFromSchedulingQueue: pods of lower or equal
                    # priority counted the nominated pod as if it were assigned.
                    queue.move_all("AssignedPodDelete", le_priority(pod.priority))
                continue
            if pod.node_name:
                # Bound (by us or anyone): it occupies its node; stop queueing it.
                qp = queue.get(uid)
                if qp is not None and qp.where != "in_flight":
                    queue.delete(uid)
                existed = cache.holds(uid)
                cache.add_or_update_pod(pod)
                if not existed:
                    queue.move_all("AssignedPodAdd", pod_add_helps)
                continue
            if pod.scheduler_name not in self._profiles:
                continue
            if pod.terminating:
                # skipPodSchedule: a pod being deleted is not scheduled.
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
            self._queue.move_all("AssignedPodDelete", le_priority(old.priority))

    def on_object_change(self, source: Source) -> None:
        """Objects a plugin reads changed: pods its plugins rejected may fit
        now (a plugin's EventsToRegister on that kind)."""
        readers = source.plugins

        def helps(qp: QueuedPod) -> bool:
            return not qp.unschedulable_plugins or bool(qp.unschedulable_plugins & readers)

        self._queue.move_all(f"{source.kind or source.name}Change", helps)

    def assumed_pod_forgotten(self, uid: str) -> None:
        """handleBindingCycleError: an assumed pod forgotten frees what it held
        on its node, like an assigned pod's deletion: the pods that may help
        move, the forgotten pod aside."""

        def helps(qp: QueuedPod) -> bool:
            return qp.uid != uid and pod_delete_helps(qp)

        self._queue.move_all("AssignedPodDelete", helps)


def pod_delete_helps(qp: QueuedPod) -> bool:
    """An assigned pod's deletion may help a pod that no plugin is recorded
    as rejecting, or that a plugin other than those only node events help
    rejected."""
    return not qp.unschedulable_plugins or not qp.unschedulable_plugins <= NODE_EVENTS_ONLY


def le_priority(priority: int) -> Callable[[QueuedPod], bool]:
    """getLEPriorityPreCheck: pods of lower or equal priority, for the event
    of a nominated pod leaving a node (checked against their rejectors as an
    assigned pod's deletion is)."""

    def helps(qp: QueuedPod) -> bool:
        return qp.pod.priority <= priority and pod_delete_helps(qp)

    return helps


def pod_add_helps(qp: QueuedPod) -> bool:
    """An assigned pod's arrival may help a pod that a plugin other than
    those only node events or pod deletions help rejected (inter-pod
    affinity, topology spread, a plugin not in the table)."""
    return not qp.unschedulable_plugins <= (NODE_EVENTS_ONLY | POD_DELETE_HELPS)


def node_changed_for_scheduling(old: cpb.Node, new: cpb.Node) -> bool:
    """Node updates that can change a placement (upstream's nodeSchedulingPropertiesChange):
    allocatable, labels, taints, unschedulable, annotations."""
    return (
        old.allocatable != new.allocatable
        or old.labels != new.labels
        or list(old.taints) != list(new.taints)
        or old.unschedulable != new.unschedulable
        or old.annotations != new.annotations
    )


__all__ = [
    "NODE_EVENTS_ONLY",
    "POD_DELETE_HELPS",
    "EventHandlers",
    "le_priority",
    "node_changed_for_scheduling",
    "pod_add_helps",
    "pod_delete_helps",
]
