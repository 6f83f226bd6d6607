"""Plugins that look at node resources (upstream
pkg/scheduler/framework/plugins/noderesources): NodeResourcesFit today,
NodeResourcesBalancedAllocation to come, sharing resource_allocation.py."""

from plugins.noderesources.args import NodeResourcesFitArgs
from plugins.noderesources.fit import Fit

__all__ = ["Fit", "NodeResourcesFitArgs"]
