"""Filter plugin NodeName (upstream pkg/scheduler/framework/plugins/nodename)."""

from berth.plugins.nodename.node_name import ERR_REASON, NodeName

__all__ = ["ERR_REASON", "NodeName"]
