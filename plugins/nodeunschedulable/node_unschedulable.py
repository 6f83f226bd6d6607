"""NodeUnschedulable: keep pods off cordoned nodes (``spec.unschedulable``).

Port of pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go
(Filter). A pod that tolerates the ``node.kubernetes.io/unschedulable:NoSchedule``
taint also tolerates ``spec.unschedulable`` (DaemonSet pods do). Its
EventsToRegister and queueing hints are upstream's (queueing hints on).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import signers
from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import FilterPlugin, NodeVerdicts, SignFragment, SignPlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.framework.tolerations import (
    EFFECT_NO_SCHEDULE,
    TAINT_NODE_UNSCHEDULABLE,
    tolerations_tolerate_taint,
)

__all__ = ["ERR_REASON_UNSCHEDULABLE", "NodeUnschedulable", "tolerates_unschedulable"]

# node_unschedulable.go, ErrReasonUnschedulable.
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"

_REJECTED = Status.unresolvable(ERR_REASON_UNSCHEDULABLE)
_UNSCHEDULABLE_TAINT = pb.Taint(key=TAINT_NODE_UNSCHEDULABLE, effect=EFFECT_NO_SCHEDULE)


def tolerates_unschedulable(pod: PodInfo) -> bool:
    """Does the pod tolerate ``node.kubernetes.io/unschedulable:NoSchedule``?"""
    return tolerations_tolerate_taint(pod.proto.tolerations, _UNSCHEDULABLE_TAINT)


class NodeUnschedulable(FilterPlugin, SignPlugin):
    name: ClassVar[str] = "NodeUnschedulable"

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's tolerations (signers.go TolerationsSigner)."""
        return [(signers.TOLERATIONS, signers.tolerations(pod.proto))]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """node_unschedulable.go, EventsToRegister (queueing hints on): a
        node added or made schedulable (UpdateNodeTaint covers
        spec.unschedulable turned off); a toleration added to the pod."""
        node_added_or_uncordoned = ClusterEvent(
            EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT
        )
        toleration_added = ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION)
        return [
            ClusterEventWithHint(node_added_or_uncordoned, self.is_schedulable_after_node_change),
            ClusterEventWithHint(toleration_added, self.is_schedulable_after_pod_toleration_change),
        ]

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        """isSchedulableAfterNodeChange: a schedulable node added, or a node
        that was unschedulable and is not any more."""
        if new.node.unschedulable:
            return QueueingHint.QUEUE_SKIP
        if old is None or old.node.unschedulable:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_toleration_change(
        self, pod: PodInfo, old: PodInfo | None, new: PodInfo
    ) -> QueueingHint:
        """isSchedulableAfterPodTolerationChange: the rejected pod itself now
        tolerates ``node.kubernetes.io/unschedulable:NoSchedule``."""
        if new.uid == pod.uid and tolerates_unschedulable(new):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.node.unschedulable and not tolerates_unschedulable(pod):
            return _REJECTED
        return SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        # The toleration is a property of the pod: decide it once per call.
        if tolerates_unschedulable(pod):
            return NodeVerdicts.all_pass(len(nodes))
        cordoned = nodes.columns.unschedulable[nodes.idx]
        if not np.count_nonzero(cordoned):
            return NodeVerdicts.all_pass(len(nodes))
        return NodeVerdicts.from_mask(cordoned, _REJECTED)
