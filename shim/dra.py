"""Pods that ask for dynamic resource allocation (DRA, spec.resourceClaims).

Upstream's DynamicResources plugin (pkg/scheduler/framework/plugins/
dynamicresources/dynamicresources.go) allocates a pod's ResourceClaims to
devices on the chosen node; its PreFilter refuses the pod when a claim cannot
be had. Berth has not ported it, and a pod bound without it lands on a node
that need not have the claimed devices, with its claims never allocated. So
whatever profile the plugin server runs, the shim answers such a pod as that
PreFilter answers a claim it cannot satisfy: Unschedulable, with a
FailedScheduling event and PodScheduled=False saying why, never bound.
"""

from __future__ import annotations

from typing import Final

from berth.kube import DEFAULT_SCHEDULER
from berth_api.v1 import cluster_pb2 as cpb
from plugins.framework.units import shorten

__all__ = ["PLUGIN", "refusal"]

# The plugin whose absence rejects the pod (upstream's names.DynamicResources).
PLUGIN: Final = "DynamicResources"
# How many claim names a message lists before it says "and N more".
_LISTED: Final = 4


def refusal(pod: cpb.Pod, nodes: int) -> str | None:
    """The FailedScheduling message for a pod with resource claims (upstream's
    FitError form for a PreFilter rejection: "0/N nodes are available:
    <reason>."), None for a pod without any."""
    names = list(pod.resource_claim_names)
    if not names:
        return None
    listed = ", ".join(shorten(n, 63) for n in names[:_LISTED])
    if len(names) > _LISTED:
        listed += f" and {len(names) - _LISTED} more"
    return (
        f"0/{nodes} nodes are available: pod has resource claims (spec.resourceClaims: "
        f"{listed}), which need the {PLUGIN} plugin to be allocated; this Berth version "
        f"does not run it, so the pod is not scheduled (schedule it with {DEFAULT_SCHEDULER!r}, "
        "or remove the claims)."
    )
