"""PreFilter/Filter/PreScore/Score plugin InterPodAffinity (upstream
pkg/scheduler/framework/plugins/interpodaffinity), with the term semantics of
kube-scheduler's framework types in terms.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.interpodaffinity.args import InterPodAffinityArgs
    from berth.plugins.interpodaffinity.inter_pod_affinity import (
        ERR_REASON_AFFINITY,
        ERR_REASON_ANTI_AFFINITY,
        ERR_REASON_EXISTING_ANTI_AFFINITY,
        NAMESPACES,
        PRE_FILTER_STATE_KEY,
        PRE_SCORE_STATE_KEY,
        InterPodAffinity,
    )

__all__ = [
    "ERR_REASON_AFFINITY",
    "ERR_REASON_ANTI_AFFINITY",
    "ERR_REASON_EXISTING_ANTI_AFFINITY",
    "NAMESPACES",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "InterPodAffinity",
    "InterPodAffinityArgs",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
