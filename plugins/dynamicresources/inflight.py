"""Allocations in flight: what a pod's Reserve allocated, until its PreBind's
write of the claim's status reaches the cluster state.

Upstream keeps them in memory (dra_manager.go, claimTracker's
inFlightAllocations: SignalClaimPendingAllocation in Reserve,
MaybeRemoveClaimPendingAllocation once PreBind wrote the claim or Unreserve
ran), and counts them as allocated for every later pod
(GatherAllocatedState, ListAllAllocatedDevices). Berth's plugin server keeps
nothing between calls, so Reserve puts them on the caller's assumed copy of
the pod as an assume annotation (``IN_FLIGHT_ANNOTATION``), and later cycles
read them back from the snapshot's pods.

An entry counts only when the framework can vouch for it:

* the pod is the caller's assumed copy (``Pod.assumed``, cluster.proto): an
  annotation a user wrote on a pod the API server shows counts for nothing;
* it names one of that pod's own claims (by its claims' names, in its
  namespace, and the claim's uid as the snapshot has it), or it is the claim
  for the pod's DRA-backed extended resources (``extended``, extended.py):
  named as Reserve names it for that pod, and either not created yet or
  created for that pod (its annotation and controller);
* that claim is still unallocated in the snapshot: once the allocation is
  written, the claim itself is the truth (upstream's assume cache takes over
  from the in-flight map the same way);
* one entry per claim: pods are read in uid order and the first wins.

A value longer than ``MAX_VALUE_CHARS`` is ignored, and each distinct value is
decoded once per snapshot scan, so a pod annotated by hand costs other cycles
next to nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.model import PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.snapshot import Snapshot
from berth.plugins.dynamicresources.claims import (
    EXTENDED_CLAIM_ANNOTATION,
    RESOURCE_CLAIMS,
    Claim,
    ClaimProblem,
    claim_names,
)
from berth.plugins.dynamicresources.claims import (
    GENERATED_BASE as _GENERATED_BASE,
)
from berth.plugins.dynamicresources.claims import (
    GENERATED_RANDOM as _GENERATED_RANDOM,
)

__all__ = [
    "IN_FLIGHT_ANNOTATION",
    "MAX_VALUE_CHARS",
    "InFlight",
    "InFlightClaim",
    "decode",
    "encode",
    "in_flight",
]

log = logging.getLogger(__name__)

IN_FLIGHT_ANNOTATION: Final = "dynamicresources.berth.dev/in-flight"
# The API server's limit on all of a pod's annotations together
# (apimachinery ValidateAnnotationsSize, 256 KiB): no Reserve writes more.
MAX_VALUE_CHARS: Final = 256 * 1024


class InFlightClaim(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """One claim Reserve allocated: its name (in the pod's namespace), uid and
    AllocationResult (resource.k8s.io/v1 JSON); ``extended``: the claim for
    the pod's extended resources, which PreBind creates (its uid is Reserve's
    temporary one)."""

    name: str
    uid: str
    allocation: dict[str, Any]
    extended: bool = False


class _Value(msgspec.Struct, frozen=True):
    claims: list[InFlightClaim] = []


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Value)


def encode(claims: Iterable[InFlightClaim]) -> str:
    return _ENCODER.encode(_Value(list(claims))).decode()


def decode(raw: str) -> list[InFlightClaim] | None:
    """The entries of an annotation value; None when it is not one (too long,
    not this JSON)."""
    if len(raw) > MAX_VALUE_CHARS:
        return None
    try:
        return _DECODER.decode(raw).claims
    except msgspec.DecodeError:
        return None


class InFlight(msgspec.Struct, frozen=True):
    """What the assumed pods of the snapshot hold in flight: for each claim
    (namespace, name), the pod that holds it and the allocation."""

    by_claim: dict[str, tuple[str, dict[str, Any]]] = {}

    def holder(self, namespace: str, name: str) -> str | None:
        """The uid of the pod whose Reserve allocated the claim, if any."""
        got = self.by_claim.get(f"{namespace}/{name}")
        return None if got is None else got[0]

    def allocations(self, exclude_pod: str = "") -> list[dict[str, Any]]:
        """The allocations in flight, but those of ``exclude_pod``."""
        return [alloc for uid, alloc in self.by_claim.values() if uid != exclude_pod]


def in_flight(snapshot: Snapshot) -> InFlight:
    """The allocations in flight in ``snapshot``, as the module docstring
    says which count."""
    claims = snapshot.objects(RESOURCE_CLAIMS.group, RESOURCE_CLAIMS.resource)
    candidates: list[PodInfo] = [
        p
        for p in snapshot.pods.values()
        if p.proto.assumed and IN_FLIGHT_ANNOTATION in p.proto.annotations
    ]
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    decoded: dict[str, list[InFlightClaim] | None] = {}
    for p in sorted(candidates, key=lambda p: p.proto.uid):
        pod = p.proto
        raw = pod.annotations[IN_FLIGHT_ANNOTATION]
        if raw not in decoded:
            decoded[raw] = decode(raw)
        entries = decoded[raw]
        if not entries:
            continue
        try:
            own = {name for _, name, _ in claim_names(pod) if name is not None}
        except ClaimProblem:
            continue
        ignored = 0
        for entry in entries:
            key = f"{pod.namespace}/{entry.name}"
            obj = claims.get((pod.namespace, entry.name))
            if entry.extended:
                counts = _extended_counts(pod, entry.name, obj)
            else:
                counts = (
                    entry.name in own
                    and obj is not None
                    and str(obj.metadata.get("uid") or "") == entry.uid
                    and not _allocated(obj.data)
                )
            if key in out or not counts:
                ignored += 1
                continue
            out[key] = (pod.uid, entry.allocation)
        if ignored:
            log.debug(
                "DynamicResources: %d entries of pod %s/%s's annotation %s ignored (not its "
                "claims, allocated already, or held by another pod)",
                ignored,
                pod.namespace,
                pod.name,
                IN_FLIGHT_ANNOTATION,
            )
    return InFlight(out)


def _extended_counts(pod: cpb.Pod, name: str, obj: ClusterObject | None) -> bool:
    """Does an ``extended`` entry count: a name Reserve gives the pod's claim
    (extended.generate_claim_name), for a claim not created yet, or created
    for this pod and not allocated yet."""
    prefix = f"{pod.name}-extended-resources-"[:_GENERATED_BASE]
    if not name.startswith(prefix) or len(name) != len(prefix) + _GENERATED_RANDOM:
        return False
    if obj is None:
        return True
    if obj.annotations.get(EXTENDED_CLAIM_ANNOTATION) != "true" or _allocated(obj.data):
        return False
    return Claim(obj).is_controlled_by(pod.uid)


def _allocated(data: Mapping[str, Any]) -> bool:
    status = data.get("status")
    return isinstance(status, dict) and isinstance(status.get("allocation"), dict)
