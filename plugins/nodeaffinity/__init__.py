"""PreFilter/Filter/PreScore/Score plugin NodeAffinity (upstream
pkg/scheduler/framework/plugins/nodeaffinity), with the node selector
semantics of k8s.io/component-helpers/scheduling/corev1/nodeaffinity in
framework/nodeaffinity.py (shared with PodTopologySpread and VolumeBinding)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.nodeaffinity.args import NodeAffinityArgs
    from berth.plugins.nodeaffinity.node_affinity import (
        ERR_REASON_CONFLICT,
        ERR_REASON_ENFORCED,
        ERR_REASON_POD,
        PRE_FILTER_STATE_KEY,
        PRE_SCORE_STATE_KEY,
        NodeAffinity,
    )

__all__ = [
    "ERR_REASON_CONFLICT",
    "ERR_REASON_ENFORCED",
    "ERR_REASON_POD",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "NodeAffinity",
    "NodeAffinityArgs",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
