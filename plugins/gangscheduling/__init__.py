"""GangScheduling (PreEnqueue + Permit): all-or-nothing scheduling of a
scheduling.k8s.io/v1alpha2 PodGroup's pods, Kubernetes v1.36's alpha plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.gangscheduling.core import (
        ALL_PODS,
        PODGROUP,
        WorkloadPodGroup,
        lookup_workload_pod_group,
        scheduling_group_of,
    )
    from berth.plugins.gangscheduling.gangscheduling import (
        NAME,
        PERMIT_TIMEOUT_SECONDS,
        QUORUM_NOT_MET,
        WAITING_AT_PERMIT,
        GangScheduling,
        not_found_message,
    )

__all__ = [
    "ALL_PODS",
    "NAME",
    "PERMIT_TIMEOUT_SECONDS",
    "PODGROUP",
    "QUORUM_NOT_MET",
    "WAITING_AT_PERMIT",
    "GangScheduling",
    "WorkloadPodGroup",
    "lookup_workload_pod_group",
    "not_found_message",
    "scheduling_group_of",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
