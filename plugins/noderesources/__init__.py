"""Plugins that look at node resources (upstream
pkg/scheduler/framework/plugins/noderesources): NodeResourcesFit and
NodeResourcesBalancedAllocation, sharing resource_allocation.py."""

from berth.plugins.noderesources.args import (
    BalancedAllocationArgs,
    NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs,
)
from berth.plugins.noderesources.balanced_allocation import BalancedAllocation
from berth.plugins.noderesources.fit import Fit

__all__ = [
    "BalancedAllocation",
    "BalancedAllocationArgs",
    "Fit",
    "NodeResourcesBalancedAllocationArgs",
    "NodeResourcesFitArgs",
]
