"""Plugins that look at node resources (upstream
pkg/scheduler/framework/plugins/noderesources): NodeResourcesFit and
NodeResourcesBalancedAllocation, sharing resource_allocation.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
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

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
