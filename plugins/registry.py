"""The in-tree plugins by the name configuration files use, like upstream's
pkg/scheduler/framework/plugins/registry.go (NewInTreeRegistry). Names are
upstream's (pkg/scheduler/framework/plugins/names/names.go)."""

from __future__ import annotations

from plugins.defaultbinder import DefaultBinder
from plugins.framework.interfaces import Plugin
from plugins.nodename import NodeName
from plugins.noderesources import Fit
from plugins.nodeunschedulable import NodeUnschedulable
from plugins.queuesort import PrioritySort

__all__ = ["REGISTRY"]

REGISTRY: dict[str, type[Plugin]] = {
    "PrioritySort": PrioritySort,
    "NodeResourcesFit": Fit,
    "NodeName": NodeName,
    "NodeUnschedulable": NodeUnschedulable,
    "DefaultBinder": DefaultBinder,
}
