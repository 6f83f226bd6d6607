"""AvoidNodePlugin: a node labelled ``avoid=true`` is rejected.

The label's value must be exactly ``true``; the rejection is ``Unschedulable``
(the node may become usable when the label changes) with the reason
``node <name> is labeled avoid=true``. Labels are not snapshot columns, so the
batch form is the framework's loop over ``filter``; the reason names the node,
so every rejected node has a Status of its own anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from berth.framework.cycle_state import CycleState
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import FilterPlugin
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.status import SUCCESS, Status
from berth.plugins.avoidnode.args import AvoidNodePluginArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = ["AVOID_LABEL", "AVOID_VALUE", "NAME", "AvoidNode", "reason_for"]

NAME = "AvoidNodePlugin"
AVOID_LABEL = "avoid"
AVOID_VALUE = "true"


def reason_for(node_name: str) -> str:
    """The rejection's reason: ``node <name> is labeled avoid=true``."""
    return f"node {node_name} is labeled {AVOID_LABEL}={AVOID_VALUE}"


class AvoidNode(FilterPlugin[AvoidNodePluginArgs]):
    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = AvoidNodePluginArgs

    def __init__(
        self, args: AvoidNodePluginArgs | None = None, handle: Handle | None = None
    ) -> None:
        super().__init__(AvoidNodePluginArgs() if args is None else args, handle)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added, or its labels changed, with a hint: only a node not
        labelled avoid=true can take a pod this plugin turned away."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        if new.node.labels.get(AVOID_LABEL) == AVOID_VALUE:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        # A proto map's get does not insert the key.
        if node.node.labels.get(AVOID_LABEL) == AVOID_VALUE:
            return Status.unschedulable(reason_for(node.name))
        return SUCCESS
