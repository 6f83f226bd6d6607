"""The in-tree plugins by the name configuration files use, like upstream's
pkg/scheduler/framework/plugins/registry.go (NewInTreeRegistry). Names are
upstream's (pkg/scheduler/framework/plugins/names/names.go)."""

from __future__ import annotations

from plugins.avoidnode import AvoidNode
from plugins.coscheduling import Coscheduling
from plugins.defaultbinder import DefaultBinder
from plugins.defaultpreemption import DefaultPreemption
from plugins.framework.discovery import PluginRegistry, RegistryError, discover
from plugins.framework.interfaces import Plugin
from plugins.gpucard import GPUCardFit
from plugins.gpupriority import GPUPriority
from plugins.imagelocality import ImageLocality
from plugins.interpodaffinity import InterPodAffinity
from plugins.lowcpu import LowCpu
from plugins.nodeaffinity import NodeAffinity
from plugins.nodedeclaredfeatures import NodeDeclaredFeatures
from plugins.nodename import NodeName
from plugins.nodeports import NodePorts
from plugins.noderesources import BalancedAllocation, Fit
from plugins.nodeunschedulable import NodeUnschedulable
from plugins.nodevolumelimits import CSILimits
from plugins.podtopologyspread import PodTopologySpread
from plugins.queuesort import PrioritySort
from plugins.samelabelspread import SameLabelSpread
from plugins.schedulinggates import SchedulingGates
from plugins.stickynode import StickyNode, StickyVM
from plugins.tainttoleration import TaintToleration
from plugins.volumebinding import VolumeBinding
from plugins.volumerestrictions import VolumeRestrictions
from plugins.volumezone import VolumeZone

__all__ = ["REGISTRY", "PluginRegistry", "RegistryError", "load_registry"]

REGISTRY: dict[str, type[Plugin]] = {
    "SchedulingGates": SchedulingGates,
    "PrioritySort": PrioritySort,
    "NodeResourcesFit": Fit,
    "NodeName": NodeName,
    "NodeUnschedulable": NodeUnschedulable,
    "TaintToleration": TaintToleration,
    "NodeAffinity": NodeAffinity,
    "NodePorts": NodePorts,
    "VolumeRestrictions": VolumeRestrictions,
    "NodeVolumeLimits": CSILimits,
    "VolumeBinding": VolumeBinding,
    "VolumeZone": VolumeZone,
    "NodeResourcesBalancedAllocation": BalancedAllocation,
    "ImageLocality": ImageLocality,
    "PodTopologySpread": PodTopologySpread,
    "InterPodAffinity": InterPodAffinity,
    "DefaultBinder": DefaultBinder,
    "DefaultPreemption": DefaultPreemption,
    "NodeDeclaredFeatures": NodeDeclaredFeatures,
    # Not upstream plugins: the seed documents' examples (never in the default profile).
    "AvoidNodePlugin": AvoidNode,
    "GPUPriorityPlugin": GPUPriority,
    "SameLabelSpread": SameLabelSpread,
    "LowCpuScheduler": LowCpu,
    "GPUCardFit": GPUCardFit,
    "StickyNode": StickyNode,
    "StickyVM": StickyVM,
    "Coscheduling": Coscheduling,
}


def load_registry(*, strict: bool = True) -> PluginRegistry:
    """REGISTRY and the plugins installed distributions declare in the
    ``berth.plugins`` entry-point group (upstream's app.WithPlugin), each
    with where it came from (plugins/framework/discovery.py). With
    ``strict``, a name provided twice raises RegistryError and entry points
    that failed to load are logged; otherwise both are only recorded."""
    return discover(REGISTRY, strict=strict)
