"""Pods that ask for dynamic resource allocation (DRA, spec.resourceClaims).

DynamicResources is not ported (framework/claims.py says why that
matters), so whatever profile the plugin server runs, and whichever server
answers, the shim reports such a pod as upstream's dynamicresources.go
PreFilter reports a claim it cannot satisfy: Unschedulable, with a
FailedScheduling event and PodScheduled=False saying why, never bound. The
pod is not sent to the plugin server.
"""

from __future__ import annotations

from typing import Final

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework import claims

__all__ = ["PLUGIN", "refusal"]

PLUGIN: Final = claims.PLUGIN


def refusal(pod: cpb.Pod, nodes: int) -> str | None:
    """The FailedScheduling message for a pod with resource claims (upstream's
    FitError form for a PreFilter rejection: "0/N nodes are available:
    <reason>."), None for a pod without any."""
    reason = claims.unsupported_claims_reason([c.name for c in pod.resource_claims])
    return None if reason is None else f"0/{nodes} nodes are available: {reason}."
