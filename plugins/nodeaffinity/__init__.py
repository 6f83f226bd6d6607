"""PreFilter/Filter/PreScore/Score plugin NodeAffinity (upstream
pkg/scheduler/framework/plugins/nodeaffinity), with the node selector
semantics of k8s.io/component-helpers/scheduling/corev1/nodeaffinity in
framework/nodeaffinity.py (shared with PodTopologySpread and VolumeBinding)."""

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
