"""The in-tree plugins by the name configuration files use, like upstream's
pkg/scheduler/framework/plugins/registry.go (NewInTreeRegistry). Names are
upstream's (pkg/scheduler/framework/plugins/names/names.go)."""

from __future__ import annotations

from plugins.defaultbinder import DefaultBinder
from plugins.framework.interfaces import Plugin
from plugins.imagelocality import ImageLocality
from plugins.nodeaffinity import NodeAffinity
from plugins.nodename import NodeName
from plugins.nodeports import NodePorts
from plugins.noderesources import BalancedAllocation, Fit
from plugins.nodeunschedulable import NodeUnschedulable
from plugins.queuesort import PrioritySort
from plugins.schedulinggates import SchedulingGates
from plugins.tainttoleration import TaintToleration

__all__ = ["REGISTRY"]

REGISTRY: dict[str, type[Plugin]] = {
    "SchedulingGates": SchedulingGates,
    "PrioritySort": PrioritySort,
    "NodeResourcesFit": Fit,
    "NodeName": NodeName,
    "NodeUnschedulable": NodeUnschedulable,
    "TaintToleration": TaintToleration,
    "NodeAffinity": NodeAffinity,
    "NodePorts": NodePorts,
    "NodeResourcesBalancedAllocation": BalancedAllocation,
    "ImageLocality": ImageLocality,
    "DefaultBinder": DefaultBinder,
}
