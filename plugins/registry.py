"""The in-tree plugins by the name configuration files use, like upstream's
pkg/scheduler/framework/plugins/registry.go (NewInTreeRegistry). Names are
upstream's (pkg/scheduler/framework/plugins/names/names.go)."""

from __future__ import annotations

from berth.framework.discovery import PluginRegistry, RegistryError, discover
from berth.framework.registry import Registry
from berth.plugins.avoidnode import AvoidNode
from berth.plugins.coscheduling import Coscheduling
from berth.plugins.defaultbinder import DefaultBinder
from berth.plugins.defaultpreemption import DefaultPreemption
from berth.plugins.dynamicresources import DynamicResources
from berth.plugins.gangscheduling import GangScheduling
from berth.plugins.gpucard import GPUCardFit
from berth.plugins.gpupriority import GPUPriority
from berth.plugins.imagelocality import ImageLocality
from berth.plugins.interpodaffinity import InterPodAffinity
from berth.plugins.lowcpu import LowCpu
from berth.plugins.nodeaffinity import NodeAffinity
from berth.plugins.nodedeclaredfeatures import NodeDeclaredFeatures
from berth.plugins.nodename import NodeName
from berth.plugins.nodeports import NodePorts
from berth.plugins.noderesources import BalancedAllocation, Fit
from berth.plugins.nodeunschedulable import NodeUnschedulable
from berth.plugins.nodevolumelimits import CSILimits
from berth.plugins.podtopologyspread import PodTopologySpread
from berth.plugins.queuesort import PrioritySort
from berth.plugins.samelabelspread import SameLabelSpread
from berth.plugins.schedulinggates import SchedulingGates
from berth.plugins.stickynode import StickyNode, StickyVM
from berth.plugins.tainttoleration import TaintToleration
from berth.plugins.volumebinding import VolumeBinding
from berth.plugins.volumerestrictions import VolumeRestrictions
from berth.plugins.volumezone import VolumeZone

__all__ = ["REGISTRY", "PluginRegistry", "RegistryError", "load_registry"]

REGISTRY: Registry = Registry(
    {
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
        "DynamicResources": DynamicResources,
        "NodeDeclaredFeatures": NodeDeclaredFeatures,
        # Alpha upstream (feature gates GangScheduling, GenericWorkload), off
        # by default: a profile enables it by name.
        "GangScheduling": GangScheduling,
        # Berth's own plugins, not upstream's (never in the default profile).
        "AvoidNodePlugin": AvoidNode,
        "GPUPriorityPlugin": GPUPriority,
        "SameLabelSpread": SameLabelSpread,
        "LowCpuScheduler": LowCpu,
        "GPUCardFit": GPUCardFit,
        "StickyNode": StickyNode,
        "StickyVM": StickyVM,
        "Coscheduling": Coscheduling,
    }
)


def load_registry(*, strict: bool = True) -> PluginRegistry:
    """REGISTRY and the plugins installed distributions declare in the
    ``berth.plugins`` entry-point group (upstream's app.WithPlugin), each
    with where it came from (framework/discovery.py). With
    ``strict``, a name provided twice raises RegistryError and entry points
    that failed to load are logged; otherwise both are only recorded."""
    return discover(REGISTRY, strict=strict)
