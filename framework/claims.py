"""Pods with dynamic resource claims (DRA, ``spec.resourceClaims``).

Upstream's DynamicResources plugin (pkg/scheduler/framework/plugins/
dynamicresources/dynamicresources.go) allocates a pod's ResourceClaims to
devices on the chosen node; its PreFilter rejects the pod when a claim cannot
be had. Berth has not ported it, and a pod placed without it lands on a node
that need not have the claimed devices, its claims never allocated. So every
profile's PreFilter (framework/runtime.py) and the Berth shim before
any call (shim/dra.py) answer such a pod as that PreFilter answers a claim it
cannot satisfy: UnschedulableAndUnresolvable, with the reason below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from berth.framework.units import shorten

__all__ = ["PLUGIN", "unsupported_claims_reason"]

# The plugin whose absence rejects the pod (upstream's names.DynamicResources).
PLUGIN: Final = "DynamicResources"
# How many claim names a reason lists before it says "and N more".
_LISTED: Final = 4


def unsupported_claims_reason(names: Sequence[str]) -> str | None:
    """Why a pod with these spec.resourceClaims names is not scheduled (no
    final period: it goes into upstream's FitError text), None without any."""
    if not names:
        return None
    listed = ", ".join(shorten(n, 63) for n in names[:_LISTED])
    if len(names) > _LISTED:
        listed += f" and {len(names) - _LISTED} more"
    return (
        f"pod has resource claims (spec.resourceClaims: {listed}), which need the {PLUGIN} "
        "plugin to be allocated; this Berth version does not run it, so the pod is not "
        "scheduled (schedule it with 'default-scheduler', or remove the claims)"
    )
