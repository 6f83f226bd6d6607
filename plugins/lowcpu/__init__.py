"""Filter + Score plugin LowCpuScheduler: keep pods off nodes whose CPU usage
(metrics.k8s.io NodeMetrics) is above a threshold, prefer the idlest (Berth's
own plugin, not upstream's; never in the default profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.lowcpu.args import LowCpuSchedulerArgs
    from berth.plugins.lowcpu.low_cpu import (
        METRICS_GROUP,
        METRICS_KIND,
        METRICS_RESOURCE,
        METRICS_VERSION,
        NAME,
        REASON_CPU,
        REASON_MEMORY,
        REASON_MISSING,
        REASON_STALE,
        REASON_UNUSABLE,
        LowCpu,
        NodeUsage,
        dimension_score,
        node_metrics_kind,
        node_usage,
    )

__all__ = [
    "METRICS_GROUP",
    "METRICS_KIND",
    "METRICS_RESOURCE",
    "METRICS_VERSION",
    "NAME",
    "REASON_CPU",
    "REASON_MEMORY",
    "REASON_MISSING",
    "REASON_STALE",
    "REASON_UNUSABLE",
    "LowCpu",
    "LowCpuSchedulerArgs",
    "NodeUsage",
    "dimension_score",
    "node_metrics_kind",
    "node_usage",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
