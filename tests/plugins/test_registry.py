"""The in-tree registry (upstream registry.go) and a whole scheduling cycle run
with only the plugins it holds."""

from __future__ import annotations

import random

import pytest

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import Plugin
from berth.framework.profile import PluginRef, ProfileConfig
from berth.framework.runtime import Framework
from berth.framework.schedule_one import schedule_pod
from berth.framework.status import Code
from berth.framework.testing import make_node, make_pod, snapshot_of
from berth.plugins.registry import REGISTRY


def test_registry_holds_upstream_names() -> None:
    # names.go spellings; configuration files use these.
    assert set(REGISTRY) == {
        "PrioritySort",
        "NodeResourcesFit",
        "NodeName",
        "NodeUnschedulable",
        "DefaultBinder",
        "DefaultPreemption",
        "SchedulingGates",
        "GangScheduling",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
        "InterPodAffinity",
        "PodTopologySpread",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeZone",
        "VolumeBinding",
        "NodeDeclaredFeatures",
        "DynamicResources",
        # The seed documents' plugins (not upstream's).
        "AvoidNodePlugin",
        "GPUPriorityPlugin",
        "SameLabelSpread",
        "LowCpuScheduler",
        "GPUCardFit",
        "StickyNode",
        "StickyVM",
        "Coscheduling",
    }


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_plugin_is_registered_under_its_own_name_and_builds_with_default_args(
    name: str,
) -> None:
    cls = REGISTRY[name]
    assert cls.name == name
    plugin = cls()
    assert isinstance(plugin, Plugin)


def profile() -> ProfileConfig:
    def refs(*names: str, weight: int = 0) -> tuple[PluginRef, ...]:
        return tuple(PluginRef(n, weight) for n in names)

    return ProfileConfig(
        "berth",
        {
            "queueSort": refs("PrioritySort"),
            "preFilter": refs("NodeResourcesFit"),
            "filter": refs("NodeUnschedulable", "NodeName", "NodeResourcesFit"),
            "preScore": refs("NodeResourcesFit"),
            "score": refs("NodeResourcesFit", weight=1),
            "bind": refs("DefaultBinder"),
        },
    )


def cluster() -> list[pb.Node]:
    return [
        make_node("small").capacity(cpu="1", memory="2Gi").obj(),
        make_node("big").capacity(cpu="8", memory="32Gi").obj(),
        make_node("cordoned").capacity(cpu="64", memory="256Gi").unschedulable().obj(),
    ]


def test_a_cycle_with_registry_plugins_picks_the_least_allocated_node() -> None:
    fw = Framework(profile(), REGISTRY)
    snap = snapshot_of(cluster())
    pod = make_pod("web").req(cpu="500m", memory="1Gi").info()
    result = schedule_pod(fw, snap, CycleState(), pod, rng=random.Random(1))
    assert result.status.is_success, result.message
    assert result.node == "big"
    st, binder = fw.run_bind(CycleState(), pod, result.node)
    assert st.is_success and binder is not None and binder.caller_binds


def test_a_pod_that_fits_nowhere_gets_an_upstream_style_message() -> None:
    fw = Framework(profile(), REGISTRY)
    snap = snapshot_of(cluster())
    pod = make_pod("huge").req(cpu="16", memory="1Gi").info()
    result = schedule_pod(fw, snap, CycleState(), pod)
    # schedulingCycle: a FitError is Unschedulable even when every node is
    # unresolvable; the per-node codes stay in the diagnosis.
    assert result.status.code is Code.UNSCHEDULABLE
    assert {s.code for s in result.rejected.values()} == {Code.UNSCHEDULABLE_AND_UNRESOLVABLE}
    assert result.message == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu."
    )


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_in_tree_spec_says_what_its_class_does(name: str) -> None:
    """plugins/registry.py declares each plugin's extension points, Args type and
    writes beside its class's path (framework/registry.py PluginSpec), so the
    configuration is checked without importing plugins: each must be its class's."""
    from berth.framework.registry import extension_points

    spec = REGISTRY.spec(name)
    assert spec is not None, f"{name} is registered by its class, not by a PluginSpec"
    cls = spec.load()
    assert cls.name == name
    assert spec.points == tuple(extension_points(cls))
    args_type = getattr(cls, "Args", None)
    if spec.args is None:
        assert args_type is None
    else:
        module, _, attr = spec.args.partition(":")
        assert args_type is not None
        assert (args_type.__module__, args_type.__qualname__) == (module, attr)
    if spec.writes is not None:
        default_args = args_type() if args_type is not None else None
        assert spec.writes == tuple(cls.writes(default_args))
        assert spec.writes == tuple(cls.writes(None))
    else:
        # Only a plugin whose writes follow its args says so.
        assert cls.writes.__func__ is not Plugin.writes.__func__  # type: ignore[attr-defined]
