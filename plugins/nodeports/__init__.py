"""PreFilter/Filter plugin NodePorts (upstream
pkg/scheduler/framework/plugins/nodeports)."""

from berth.plugins.nodeports.node_ports import ERR_REASON, PRE_FILTER_STATE_KEY, NodePorts

__all__ = ["ERR_REASON", "PRE_FILTER_STATE_KEY", "NodePorts"]
