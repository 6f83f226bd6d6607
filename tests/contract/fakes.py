"""A profile of small plugins whose behaviour the contract tests can see."""

from __future__ import annotations

import msgspec

from berth.framework import (
    CycleState,
    FilterPlugin,
    NodeBatch,
    NodeInfo,
    PodInfo,
    PreFilterPlugin,
    PreFilterResult,
    StateKey,
    Status,
)
from berth.framework.profile import PluginRef, ProfileConfig, SchedulerConfig
from tests.unit.framework.fakes import REGISTRY as BASE


class Wanted(msgspec.Struct):
    zone: str


WANTED = StateKey("ZoneFromPreFilter/wanted", Wanted)


class ZoneFromPreFilter(PreFilterPlugin, FilterPlugin):
    """PreFilter stores the pod's ``zone`` label in CycleState; Filter reads
    it back (and fails with Error if CycleState did not travel)."""

    name = "ZoneFromPreFilter"

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        state.write(WANTED, Wanted(pod.proto.labels.get("zone", "")))
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        want = state.read(WANTED).zone
        if want and node.node.labels.get("zone") != want:
            return Status.unschedulable(f"node(s) not in zone {want}")
        return Status.success()


REGISTRY = {**BASE, ZoneFromPreFilter.name: ZoneFromPreFilter}

PROFILE = ProfileConfig(
    scheduler_name="contract",
    plugins={
        "queueSort": (PluginRef("Sort"),),
        "preFilter": (PluginRef("ZoneFromPreFilter"),),
        "filter": (PluginRef("ZoneFromPreFilter"), PluginRef("RejectLabel")),
        "score": (PluginRef("LabelScore", 2),),
        "bind": (PluginRef("Binder"),),
    },
)
CONFIG = SchedulerConfig(profiles=(PROFILE,), source="<contract>")
