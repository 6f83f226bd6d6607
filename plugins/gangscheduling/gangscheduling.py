"""GangScheduling: the pods of a scheduling.k8s.io/v1alpha2 PodGroup with a
gang policy are bound all together or not at all.

A port of pkg/scheduler/framework/plugins/gangscheduling/gangscheduling.go
(v1.36.3; alpha, feature gates GangScheduling and GenericWorkload): a pod joins
a group with ``spec.schedulingGroup.podGroupName``; the PodGroup's
``spec.schedulingPolicy.gang.minCount`` pods must all be placed before any is
bound.

- PreEnqueue: a member waits outside the active queue until its PodGroup
  exists and the group has minCount pods.
- Permit: Wait (up to 5 minutes) until minCount members are scheduled
  (assumed or bound), activating the group's unscheduled pods; the one that
  completes the quorum allows every waiting member.
- EventsToRegister: a pod of the same group added; the PodGroup added.

Upstream counts pods with the scheduler's PodGroupManager; this plugin counts
them from the snapshot the caller sends (core.py). Upstream also runs a whole
group in one scheduling cycle (schedule_one_podgroup.go); Berth schedules the
members one by one (README.md says what that changes).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.goquote import go_quote
from berth.framework.interfaces import PermitPlugin, PreEnqueuePlugin
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject, ObjectKind
from berth.framework.status import SUCCESS, Status
from berth.plugins.coscheduling.core import (
    Member,
    PodGroupError,
    group_members,
    signal_waiting,
)
from berth.plugins.gangscheduling.core import (
    ALL_PODS,
    PODGROUP,
    WorkloadPodGroup,
    lookup_workload_pod_group,
    scheduling_group_of,
)

__all__ = [
    "NAME",
    "PERMIT_TIMEOUT_SECONDS",
    "QUORUM_NOT_MET",
    "WAITING_AT_PERMIT",
    "GangScheduling",
    "not_found_message",
]

NAME = "GangScheduling"

log = logging.getLogger(__name__)

# gangscheduling.go: permitTimeoutDuration.
PERMIT_TIMEOUT_SECONDS = 300.0

# gangscheduling.go, PreEnqueue and Permit: upstream's messages.
QUORUM_NOT_MET = "waiting for minCount pods from a gang to appear in scheduling queue"
WAITING_AT_PERMIT = "waiting for minCount pods from a gang to be scheduled"


def not_found_message(group: str) -> str:
    """PreEnqueue, the PodGroup not found (upstream's typo "pods's" kept)."""
    return f"waiting for pods's pod group {go_quote(group)} to appear in scheduling queue"


def _permit_lookup_error(namespace: str, group: str, cause: str) -> str:
    """Permit: fmt.Errorf("failed to get podGroup %s/%s: %w") around the
    lister's error."""
    return f"failed to get podGroup {namespace}/{group}: {cause}"


def _pod_group_name(obj: Any) -> str:
    """The scheduling group of a pod event's object (PodInfo or record)."""
    if isinstance(obj, PodInfo):
        return obj.proto.scheduling_group
    if isinstance(obj, cpb.Pod):
        return obj.scheduling_group
    return ""


class GangScheduling(PreEnqueuePlugin, PermitPlugin):
    name: ClassVar[str] = NAME

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """v1alpha2 PodGroups where the API server serves them, and every pod
        (a group's pending members have no label to select them by)."""
        return (PODGROUP, ALL_PODS)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """gangscheduling.go, EventsToRegister: a pod added (the schedulingGroup
        is immutable, so no update), a PodGroup added (immutable too)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.ADD), self.is_schedulable_after_pod_added
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD_GROUP, ActionType.ADD),
                self.is_schedulable_after_pod_group_added,
            ),
        ]

    def is_schedulable_after_pod_added(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """isSchedulableAfterPodAdded (helper.MatchingSchedulingGroup): the added
        pod is in the same namespace and names the same group."""
        group = pod.proto.scheduling_group
        added = _pod_group_name(new)
        namespace = new.namespace if isinstance(new, PodInfo | cpb.Pod) else None
        if group and added == group and namespace == pod.namespace:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_group_added(
        self, pod: PodInfo, old: Any, new: Any
    ) -> QueueingHint:
        """isSchedulableAfterPodGroupAdded: the pod's own PodGroup."""
        group = pod.proto.scheduling_group
        if not isinstance(new, ClusterObject):
            return QueueingHint.QUEUE
        if group and new.namespace == pod.namespace and new.name == group:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    # -- PreEnqueue ----------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """gangscheduling.go PreEnqueue: UnschedulableAndUnresolvable until the
        PodGroup exists and the group has minCount pods (AllPodsCount: the
        group's pods, pending, assumed or bound, this one included)."""
        group = pod.proto.scheduling_group
        if not group:
            return SUCCESS
        handle = self._handle
        if handle is None or not handle.has_snapshot:
            # Without the cluster state nothing can be counted; Permit still
            # holds the gang together.
            return SUCCESS
        snapshot = handle.snapshot
        try:
            pg = lookup_workload_pod_group(snapshot, pod.namespace, group)
        except PodGroupError as exc:
            return Status.unresolvable(str(exc))
        if pg is None:
            return Status.unresolvable(not_found_message(group))
        if pg.min_count is None:
            return SUCCESS
        members = group_members(snapshot, pod.namespace, group, pod, group_of=scheduling_group_of)
        if len(members) < pg.min_count:
            return Status.unresolvable(QUORUM_NOT_MET)
        return SUCCESS

    # -- Permit --------------------------------------------------------------------

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """gangscheduling.go Permit, the per-pod path (the pod group cycle's
        snapshot lister is not used): ScheduledPodsCount is the group's
        members bound or assumed by the caller, plus this pod, which the
        caller assumes before Permit but the snapshot does not hold yet."""
        group = pod.proto.scheduling_group
        if not group:
            return SUCCESS, 0.0
        try:
            pg = self._pod_group(pod, group)
        except PodGroupError as exc:
            return Status.error(_permit_lookup_error(pod.namespace, group, str(exc))), 0.0
        if pg is None:
            cause = f"podgroup.scheduling.k8s.io {go_quote(group)} not found"
            return Status.error(_permit_lookup_error(pod.namespace, group, cause)), 0.0
        if pg.min_count is None:
            return SUCCESS, 0.0
        members = group_members(
            self.handle.snapshot, pod.namespace, group, group_of=scheduling_group_of
        )
        others = [m for m in members if m.uid != pod.uid]
        scheduled = 1 + sum(1 for m in others if m.assigned)
        if scheduled < pg.min_count:
            activated = _activate_unscheduled(state, others)
            log.info(
                "pod %s on %s waits up to %gs: PodGroup %s has %d/%d members scheduled; "
                "activated %d unscheduled member(s)",
                pod.key,
                node_name,
                PERMIT_TIMEOUT_SECONDS,
                pg.full_name,
                scheduled,
                pg.min_count,
                activated,
            )
            return Status.wait(WAITING_AT_PERMIT), PERMIT_TIMEOUT_SECONDS
        allowed = signal_waiting(state, others, True)
        log.info(
            "pod %s on %s: PodGroup %s has %d/%d members scheduled; allowing it and %d "
            "waiting member(s)",
            pod.key,
            node_name,
            pg.full_name,
            scheduled,
            pg.min_count,
            allowed,
        )
        return SUCCESS, 0.0

    def _pod_group(self, pod: PodInfo, group: str) -> WorkloadPodGroup | None:
        return lookup_workload_pod_group(self.handle.snapshot, pod.namespace, group)


def _activate_unscheduled(state: CycleState, others: list[Member]) -> int:
    """handle.Activate(podGroupState.UnscheduledPods()): the group's pods
    neither assumed nor bound go to the caller's active queue, in case they
    waited for this one. Returns how many were named."""
    uids = [m.uid for m in others if not m.assigned and m.uid]
    if uids:
        state.activate_pods(uids)
    return len(uids)
