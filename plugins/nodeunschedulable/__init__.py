"""Filter plugin NodeUnschedulable (upstream pkg/scheduler/framework/plugins/nodeunschedulable)."""

from berth.plugins.nodeunschedulable.node_unschedulable import (
    ERR_REASON_UNSCHEDULABLE,
    NodeUnschedulable,
)

__all__ = ["ERR_REASON_UNSCHEDULABLE", "NodeUnschedulable"]
