"""Coscheduling: a PodGroup's pods are bound all together or not at all.

A port of kubernetes-sigs/scheduler-plugins' Coscheduling
(pkg/coscheduling/coscheduling.go, core/core.go): pods join a group with the
label ``scheduling.x-k8s.io/pod-group: <name>``; the group is a PodGroup
object (scheduling.x-k8s.io/v1alpha1) whose ``spec.minMember`` pods must all
be placed before any is bound.

- QueueSort (``Less``): higher priority first; then the PodGroup's creation
  time (a pod without a group: when it entered the queue); then the group's
  name; so the members of a group leave the queue one after the other.
- PreFilter: a group with fewer than minMember pods in all, or whose
  scheduling-gated pods would leave it short, or (with spec.minResources)
  for which the cluster lacks room, is rejected UnschedulableAndUnresolvable
  with upstream's messages.
- PostFilter: a member that fits no node rejects its group's waiting pods
  (unless enough are assigned, or the gap is within podGroupRejectPercentage).
- Permit: Wait until minMember members are assigned (bound, or assumed on a
  node by the caller: the ones waiting here), then Success, allowing the
  waiting ones. The wait is spec.scheduleTimeoutSeconds, else
  permitWaitingTimeSeconds, at most 15 minutes. The first member to wait
  asks the caller to activate its siblings (ActivateSiblings).
- Unreserve (a member timed out, was rejected or failed to bind): every other
  waiting member is rejected, so none is left assumed.

Upstream keeps caches in the plugin (assigned pods per group, groups that
passed the resource check, failed groups); Berth's server keeps nothing
between requests, so each answer is derived from the snapshot (core.py).
What that changes is listed in README.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    kind_event_resource,
)
from berth.framework.interfaces import (
    PermitPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreFilterResult,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    SortKey,
)
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Code, Status
from berth.plugins.coscheduling.args import MAX_PERMIT_WAITING_TIME_SECONDS, CoschedulingArgs
from berth.plugins.coscheduling.core import (
    GROUPED_PODS,
    PODGROUP,
    Member,
    PodGroup,
    PodGroupError,
    format_gap,
    group_members,
    group_name,
    lookup_pod_group,
    resource_gap,
    signal_waiting,
)

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "NAME",
    "Coscheduling",
    "gated_message",
    "not_enough_message",
    "post_filter_message",
]

NAME = "Coscheduling"

log = logging.getLogger(__name__)

# Upstream's messages (core.go PreFilter, coscheduling.go Permit, PostFilter,
# Unreserve).
POD_GROUP_NOT_FOUND = "PodGroup not found"
CANNOT_FIND_POD_GROUP = "can not find pod group"
REJECTED_IN_UNRESERVE = "rejection in Unreserve"
REJECTED_IN_POST_FILTER = "optimistic rejection in PostFilter"


def not_enough_message(pod: str, total: int, min_member: int) -> str:
    return (
        f"pre-filter pod {pod} cannot find enough sibling pods, current pods number: "
        f"{total}, minMember of group: {min_member}"
    )


def gated_message(pod: str) -> str:
    return f"pre-filter pod {pod} cannot proceed due to gated pods in the same PodGroup"


def post_filter_message(group: str, pod: str) -> str:
    return f"PodGroup {group} gets rejected due to Pod {pod} is unschedulable even after PostFilter"


class Coscheduling(
    QueueSortPlugin[CoschedulingArgs],
    PreFilterPlugin[CoschedulingArgs],
    PostFilterPlugin[CoschedulingArgs],
    ReservePlugin[CoschedulingArgs],
    PermitPlugin[CoschedulingArgs],
):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = CoschedulingArgs

    def __init__(self, args: CoschedulingArgs | None = None, handle: Handle | None = None) -> None:
        co_args = CoschedulingArgs() if args is None else args
        # Checked here too, so a plugin built in code is checked like one
        # built from a configuration file.
        co_args.validate()
        super().__init__(co_args, handle)
        self.default_timeout = co_args.default_timeout
        self.reject_threshold = co_args.pod_group_reject_percentage / 100.0

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """PodGroups, and every pod that carries the group label."""
        return (PODGROUP, GROUPED_PODS)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """scheduler-plugins coscheduling.go, EventsToRegister: a pod added
        (a member bound), a PodGroup added or changed; and, beyond upstream,
        a node added or its allocatable grown: a member rejected at Permit
        (the group fell short) is Unschedulable by Coscheduling alone, and
        only room lets the group through, which upstream leaves to the
        5-minute flush when no other pod is bound meanwhile. No hints."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.ADD)),
            ClusterEventWithHint(
                ClusterEvent(kind_event_resource(PODGROUP), ActionType.ADD | ActionType.UPDATE)
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
                )
            ),
        ]

    # -- QueueSort -------------------------------------------------------------

    def sort_key(self, pod: QueuedPodInfo) -> SortKey:
        """coscheduling.go Less as a key: (-priority, PodGroup creation time or
        the pod's queue time, group key, pod key). Upstream breaks a tie of
        times with the pod's <namespace>/<name> only; the group's name comes
        first here, so two groups created in the same second do not
        interleave. A pod without a group uses its own key for both."""
        p = pod.pod
        when = pod.enqueued_unix_micros
        group = group_name(p)
        if not group:
            return (-p.priority, when, p.key, p.key)
        snapshot = self._snapshot()
        if snapshot is not None:
            try:
                pg = lookup_pod_group(snapshot, p.namespace, group)
            except PodGroupError as exc:
                log.warning("queue sort of pod %s: %s", p.key, exc)
                pg = None
            if pg is not None and pg.creation_unix_micros is not None:
                when = pg.creation_unix_micros
        return (-p.priority, when, f"{p.namespace}/{group}", p.key)

    def _snapshot(self) -> Snapshot | None:
        try:
            return self.handle.snapshot
        except RuntimeError:
            return None

    def _pod_group(self, pod: PodInfo, group: str) -> PodGroup | None:
        return lookup_pod_group(self.handle.snapshot, pod.namespace, group)

    # -- PreFilter -------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """core.go PodGroupManager.PreFilter (without the backoff cache)."""
        group = group_name(pod)
        if not group:
            return None, SUCCESS
        try:
            pg = self._pod_group(pod, group)
            if pg is None:
                # Permit turns it away; PreFilter lets it through, as upstream.
                return None, SUCCESS
            snapshot = self.handle.snapshot
            members = group_members(snapshot, pod.namespace, group, pod)
            total = len(members)
            if pg.min_member > total:
                msg = not_enough_message(pod.name, total, pg.min_member)
                log.info("pod %s: %s", pod.key, msg)
                return None, Status.unresolvable(msg)
            gated = sum(1 for m in members if m.gated)
            if pg.min_member - total + gated > 0:
                msg = gated_message(pod.name)
                log.info("pod %s: %s", pod.key, msg)
                return None, Status.unresolvable(msg)
            if pg.min_resources:
                gap = resource_gap(snapshot, pg, (m.uid for m in members))
                if gap:
                    msg = format_gap(gap)
                    log.info("pod %s: PodGroup %s: %s", pod.key, pg.full_name, msg)
                    return None, Status.unresolvable(msg)
        except PodGroupError as exc:
            # coscheduling.go PreFilter turns every PodGroupManager.PreFilter
            # error into an unschedulable status: a PodGroup its users wrote
            # wrong keeps the pod pending with the reason, not in error backoff.
            return None, Status.unresolvable(str(exc))
        return None, SUCCESS

    # -- PostFilter ------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """coscheduling.go PostFilter: reject the group's waiting pods when
        this member cannot be placed, unless enough members are assigned or
        the gap is small (podGroupRejectPercentage)."""
        group = group_name(pod)
        if not group:
            # Upstream says "can not find pod group" for any pod without a
            # group; that would end every FitError of such pods: say nothing.
            return None, Status(Code.UNSCHEDULABLE)
        try:
            pg = self._pod_group(pod, group)
        except PodGroupError as exc:
            # Upstream's GetPodGroup yields no group: "can not find pod group".
            return None, Status.unschedulable(str(exc))
        if pg is None:
            return None, Status.unschedulable(CANNOT_FIND_POD_GROUP)
        members = group_members(self.handle.snapshot, pod.namespace, group)
        others = [m for m in members if m.uid != pod.uid]
        assigned = sum(1 for m in others if m.assigned)
        if assigned >= pg.min_member:
            return None, Status(Code.UNSCHEDULABLE)
        not_assigned = (pg.min_member - assigned) / pg.min_member
        if not_assigned <= self.reject_threshold:
            return None, Status(Code.UNSCHEDULABLE)
        waiting = signal_waiting(state, others, False, REJECTED_IN_POST_FILTER)
        msg = post_filter_message(pg.full_name, pod.name)
        log.info("pod %s: %s; rejecting %d waiting member(s)", pod.key, msg, waiting)
        return None, Status.unschedulable(msg)

    # -- Reserve / Unreserve ---------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """coscheduling.go Unreserve: a member that does not make it takes
        the group's waiting members down with it."""
        group = group_name(pod)
        if not group:
            return
        try:
            pg = self._pod_group(pod, group)
        except PodGroupError as exc:
            log.warning("unreserve of pod %s: %s", pod.key, exc)
            return
        if pg is None:
            return
        members = group_members(self.handle.snapshot, pod.namespace, group)
        others = [m for m in members if m.uid != pod.uid]
        waiting = signal_waiting(state, others, False, REJECTED_IN_UNRESERVE)
        if waiting:
            log.info(
                "pod %s of PodGroup %s unreserved: rejecting %d waiting member(s)",
                pod.key,
                pg.full_name,
                waiting,
            )

    # -- Permit ----------------------------------------------------------------

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """coscheduling.go Permit and core.go PodGroupManager.Permit."""
        group = group_name(pod)
        if not group:
            return SUCCESS, 0.0
        try:
            pg = self._pod_group(pod, group)
        except PodGroupError as exc:
            # Upstream's Permit finds no group: UnschedulableAndUnresolvable.
            return Status.unresolvable(str(exc)), 0.0
        if pg is None:
            return Status.unschedulable(POD_GROUP_NOT_FOUND), 0.0
        members = group_members(self.handle.snapshot, pod.namespace, group)
        others = [m for m in members if m.uid != pod.uid]
        # This pod is not in the snapshot yet: it counts itself.
        assigned = 1 + sum(1 for m in others if m.assigned)
        if assigned >= pg.min_member:
            allowed = signal_waiting(state, others, True)
            log.info(
                "pod %s on %s: PodGroup %s has %d/%d members assigned; allowing it and %d "
                "waiting member(s)",
                pod.key,
                node_name,
                pg.full_name,
                assigned,
                pg.min_member,
                allowed,
            )
            return SUCCESS, 0.0
        timeout = self._timeout(pg)
        activated = self._activate_siblings(state, pod, others) if assigned == 1 else 0
        log.info(
            "pod %s on %s waits up to %gs: PodGroup %s has %d/%d members assigned%s",
            pod.key,
            node_name,
            timeout,
            pg.full_name,
            assigned,
            pg.min_member,
            f"; activating {activated} sibling(s)" if activated else "",
        )
        reason = f"PodGroup {pg.full_name} has {assigned}/{pg.min_member} members assigned"
        return Status(Code.WAIT, (reason,)), timeout

    @staticmethod
    def _activate_siblings(state: CycleState, pod: PodInfo, others: list[Member]) -> int:
        """core.go PodGroupManager.ActivateSiblings, which Permit calls when
        the first member of a group starts to wait (PermitState.Activate is
        set only when it is the group's one assigned pod): the group's other
        pods go to the caller's active queue, out of backoff or the
        unschedulable pool, so the rest of the gang is tried now rather than
        when their backoff ends. Only pods not yet assigned are named (the
        others are not queued). Returns how many were named."""
        uids = [m.uid for m in others if not m.assigned and m.uid and m.uid != pod.uid]
        if uids:
            state.activate_pods(uids)
        return len(uids)

    def _timeout(self, pg: PodGroup) -> float:
        """util.GetWaitTimeDuration: the PodGroup's scheduleTimeoutSeconds
        when above 0, else the args' (60s by default), at most 15 minutes."""
        seconds = self.default_timeout
        if pg.schedule_timeout_seconds is not None and pg.schedule_timeout_seconds > 0:
            seconds = float(pg.schedule_timeout_seconds)
        return min(seconds, float(MAX_PERMIT_WAITING_TIME_SECONDS))
