"""NodeName: a pod that names a node (spec.nodeName) fits only that node.

Port of pkg/scheduler/framework/plugins/nodename/node_name.go (Filter, Fits).
Its EventsToRegister is upstream's (queueing hints on): a node added.
"""

from __future__ import annotations

from typing import ClassVar

from berth.framework import signers
from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
)
from berth.framework.interfaces import FilterPlugin, NodeVerdicts, SignFragment, SignPlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status

__all__ = ["ERR_REASON", "NodeName", "fits"]

# node_name.go, ErrReason.
ERR_REASON = "node(s) didn't match the requested node name"

# One shared rejection: preemption cannot move a pod to another node name.
_REJECTED = Status.unresolvable(ERR_REASON)


def fits(pod: PodInfo, node: NodeInfo) -> bool:
    """node_name.go, Fits: no node name asked for, or this node's."""
    return not pod.node_name or pod.node_name == node.name


class NodeName(FilterPlugin, SignPlugin):
    name: ClassVar[str] = "NodeName"

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: spec.nodeName."""
        return [(signers.NODE_NAME, pod.proto.node_name)]

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """node_name.go, EventsToRegister (queueing hints on): a node added,
        without a hint (the caller also registers UpdateNodeTaint for it, as
        upstream's buildQueueingHintMap does)."""
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS if fits(pod, node) else _REJECTED

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        wanted = pod.node_name
        if not wanted:
            return NodeVerdicts.all_pass(len(nodes))
        target = nodes.snapshot.nodes.get(wanted)
        if target is None:
            return NodeVerdicts.uniform(len(nodes), _REJECTED)
        # Compare slots, not names: one integer comparison per candidate.
        return NodeVerdicts.from_mask(nodes.idx != target.index, _REJECTED)
