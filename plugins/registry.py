"""The in-tree plugins by the name configuration files use, like upstream's
pkg/scheduler/framework/plugins/registry.go (NewInTreeRegistry). Names are
upstream's (pkg/scheduler/framework/plugins/names/names.go).

Each plugin is registered by the path of its class with what the configuration
loader reads from it (framework/registry.py, PluginSpec): the extension points it
implements, its Args type and the kinds it writes. The class is imported when a
framework is built from it, so ``berth shim`` calling a plugin server checks its
configuration without loading any plugin's code (or numpy).
tests/unit/plugins/test_registry.py checks every spec against its class.
"""

from __future__ import annotations

from berth.framework.discovery import PluginRegistry, RegistryError, discover
from berth.framework.registry import PluginSpec, Registry
from berth.framework.resourceapi import RESOURCE_CLAIMS
from berth.framework.storage import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES

__all__ = ["REGISTRY", "PluginRegistry", "RegistryError", "load_registry"]

_P = "berth.plugins"
# The extension points of the plugins that implement each group (EXTENSION_POINTS' order).
_FILTER_AND_SCORE = ("preFilter", "filter", "preScore", "score")
_PRE_FILTER_AND_FILTER = ("preFilter", "filter")

REGISTRY: Registry = Registry(
    {
        "SchedulingGates": PluginSpec(
            f"{_P}.schedulinggates.scheduling_gates:SchedulingGates", ("preEnqueue",)
        ),
        "PrioritySort": PluginSpec(f"{_P}.queuesort.priority_sort:PrioritySort", ("queueSort",)),
        "NodeResourcesFit": PluginSpec(
            f"{_P}.noderesources.fit:Fit",
            _FILTER_AND_SCORE,
            f"{_P}.noderesources.args:NodeResourcesFitArgs",
        ),
        "NodeName": PluginSpec(f"{_P}.nodename.node_name:NodeName", ("filter",)),
        "NodeUnschedulable": PluginSpec(
            f"{_P}.nodeunschedulable.node_unschedulable:NodeUnschedulable", ("filter",)
        ),
        "TaintToleration": PluginSpec(
            f"{_P}.tainttoleration.taint_toleration:TaintToleration",
            ("filter", "preScore", "score"),
        ),
        "NodeAffinity": PluginSpec(
            f"{_P}.nodeaffinity.node_affinity:NodeAffinity",
            _FILTER_AND_SCORE,
            f"{_P}.nodeaffinity.args:NodeAffinityArgs",
        ),
        "NodePorts": PluginSpec(f"{_P}.nodeports.node_ports:NodePorts", _PRE_FILTER_AND_FILTER),
        "VolumeRestrictions": PluginSpec(
            f"{_P}.volumerestrictions.volume_restrictions:VolumeRestrictions",
            _PRE_FILTER_AND_FILTER,
        ),
        "NodeVolumeLimits": PluginSpec(
            f"{_P}.nodevolumelimits.csi:CSILimits", _PRE_FILTER_AND_FILTER
        ),
        "VolumeBinding": PluginSpec(
            f"{_P}.volumebinding.volume_binding:VolumeBinding",
            (*_FILTER_AND_SCORE, "reserve", "preBind"),
            f"{_P}.volumebinding.args:VolumeBindingArgs",
            (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS),
        ),
        "VolumeZone": PluginSpec(f"{_P}.volumezone.volume_zone:VolumeZone", _PRE_FILTER_AND_FILTER),
        "NodeResourcesBalancedAllocation": PluginSpec(
            f"{_P}.noderesources.balanced_allocation:BalancedAllocation",
            ("preScore", "score"),
            f"{_P}.noderesources.args:NodeResourcesBalancedAllocationArgs",
        ),
        "ImageLocality": PluginSpec(f"{_P}.imagelocality.image_locality:ImageLocality", ("score",)),
        "PodTopologySpread": PluginSpec(
            f"{_P}.podtopologyspread.pod_topology_spread:PodTopologySpread",
            _FILTER_AND_SCORE,
            f"{_P}.podtopologyspread.args:PodTopologySpreadArgs",
        ),
        "InterPodAffinity": PluginSpec(
            f"{_P}.interpodaffinity.inter_pod_affinity:InterPodAffinity",
            _FILTER_AND_SCORE,
            f"{_P}.interpodaffinity.args:InterPodAffinityArgs",
        ),
        "DefaultBinder": PluginSpec(f"{_P}.defaultbinder.default_binder:DefaultBinder", ("bind",)),
        "DefaultPreemption": PluginSpec(
            f"{_P}.defaultpreemption.default_preemption:DefaultPreemption",
            ("postFilter",),
            f"{_P}.defaultpreemption.args:DefaultPreemptionArgs",
        ),
        "DynamicResources": PluginSpec(
            f"{_P}.dynamicresources.dynamicresources:DynamicResources",
            ("preEnqueue", "preFilter", "filter", "postFilter", "score", "reserve", "preBind"),
            f"{_P}.dynamicresources.args:DynamicResourcesArgs",
            (RESOURCE_CLAIMS,),
        ),
        "NodeDeclaredFeatures": PluginSpec(
            f"{_P}.nodedeclaredfeatures.node_declared_features:NodeDeclaredFeatures",
            _PRE_FILTER_AND_FILTER,
        ),
        # Alpha upstream (feature gates GangScheduling, GenericWorkload), off
        # by default: a profile enables it by name.
        "GangScheduling": PluginSpec(
            f"{_P}.gangscheduling.gangscheduling:GangScheduling", ("preEnqueue", "permit")
        ),
        # Berth's own plugins, not upstream's (never in the default profile).
        "AvoidNodePlugin": PluginSpec(
            f"{_P}.avoidnode.avoid_node:AvoidNode",
            ("filter",),
            f"{_P}.avoidnode.args:AvoidNodePluginArgs",
        ),
        "GPUPriorityPlugin": PluginSpec(
            f"{_P}.gpupriority.gpu_priority:GPUPriority",
            ("score",),
            f"{_P}.gpupriority.args:GPUPriorityPluginArgs",
        ),
        "SameLabelSpread": PluginSpec(
            f"{_P}.samelabelspread.same_label_spread:SameLabelSpread",
            ("score",),
            f"{_P}.samelabelspread.args:SameLabelSpreadArgs",
        ),
        "LowCpuScheduler": PluginSpec(
            f"{_P}.lowcpu.low_cpu:LowCpu",
            ("filter", "score"),
            f"{_P}.lowcpu.args:LowCpuSchedulerArgs",
        ),
        "GPUCardFit": PluginSpec(
            f"{_P}.gpucard.gpu_card:GPUCardFit",
            ("preFilter", "filter", "reserve", "preBind"),
            f"{_P}.gpucard.args:GPUCardFitArgs",
        ),
        # The kinds the sticky plugins write follow their args (stickyOwner).
        "StickyNode": PluginSpec(
            f"{_P}.stickynode.sticky_node:StickyNode",
            ("preFilter", "filter", "postBind"),
            f"{_P}.stickynode.args:StickyNodeArgs",
            None,
        ),
        "StickyVM": PluginSpec(
            f"{_P}.stickynode.sticky_node:StickyVM",
            ("preFilter", "filter", "postBind"),
            f"{_P}.stickynode.args:StickyNodeArgs",
            None,
        ),
        "Coscheduling": PluginSpec(
            f"{_P}.coscheduling.coscheduling:Coscheduling",
            ("queueSort", "preFilter", "postFilter", "reserve", "permit"),
            f"{_P}.coscheduling.args:CoschedulingArgs",
        ),
    }
)


def load_registry(*, strict: bool = True) -> PluginRegistry:
    """REGISTRY and the plugins installed distributions declare in the
    ``berth.plugins`` entry-point group (upstream's app.WithPlugin), each
    with where it came from (framework/discovery.py). With
    ``strict``, a name provided twice raises RegistryError and entry points
    that failed to load are logged; otherwise both are only recorded."""
    return discover(REGISTRY, strict=strict)
