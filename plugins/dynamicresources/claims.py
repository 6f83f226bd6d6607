"""A pod's ResourceClaims, read from the pod record and the cycle's snapshot.

Ports k8s.io/dynamic-resource-allocation@v0.36.3/resourceclaim/resourceclaim.go
(Name, IsForPod, IsReservedForPod, BindTo for a pod without a PodGroup) and
dynamicresources.go's foreachPodResourceClaim, with upstream's messages.
Claims are the JSON the caller shipped (resource.k8s.io/v1, as the API server
serves it); every field is read defensively, since a claim is user input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.objects import ClusterObject
from berth.framework.resourceapi import (
    DEVICE_CLASSES,
    GROUP,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    VERSION,
)
from berth.framework.snapshot import Snapshot

__all__ = [
    "DEVICE_CLASSES",
    "EXTENDED_CLAIM_ANNOTATION",
    "FINALIZER",
    "GENERATED_BASE",
    "GENERATED_RANDOM",
    "GROUP",
    "RESOURCE_CLAIMS",
    "RESOURCE_SLICES",
    "VERSION",
    "Claim",
    "ClaimProblem",
    "as_list",
    "as_map",
    "claim_names",
    "pod_claims",
    "quote",
]

# resource/v1 types.go, ExtendedResourceClaimAnnotation: marks the claim the
# scheduler made for a pod's DRA-backed extended resources (extended.py).
EXTENDED_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"
# apiserver names.SimpleNameGenerator: a generateName base is cut to 58
# characters and gets 5 random characters.
GENERATED_BASE: Final = 58
GENERATED_RANDOM: Final = 5
# resource/v1 types.go, Finalizer: set on a claim the scheduler allocates, so
# the resource claim controller deallocates it before it goes.
FINALIZER: Final = "resource.kubernetes.io/delete-protection"

_EMPTY_MAP: Final[Mapping[str, Any]] = {}


def as_map(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """``obj[key]`` when it is a JSON object, else an empty mapping."""
    if obj is None:
        return _EMPTY_MAP
    v = obj.get(key)
    return v if isinstance(v, dict) else _EMPTY_MAP


def as_list(obj: Mapping[str, Any] | None, key: str) -> list[Any]:
    """``obj[key]`` when it is a JSON array, else an empty list."""
    if obj is None:
        return []
    v = obj.get(key)
    return v if isinstance(v, list) else []


def quote(text: str) -> str:
    """Go's %q for the names that reach a message (valid UTF-8: JSON's
    quoting, which Go's agrees with for printable text)."""
    return json.dumps(text, ensure_ascii=False)


class ClaimProblem(Exception):
    """Why the pod cannot be scheduled now because of its claims; the message
    is upstream's (an UnschedulableAndUnresolvable reason)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """One of the pod's claims as the snapshot holds it."""

    obj: ClusterObject

    @property
    def data(self) -> Mapping[str, Any]:
        return self.obj.data

    @property
    def namespace(self) -> str:
        return self.obj.namespace

    @property
    def name(self) -> str:
        return self.obj.name

    @property
    def key(self) -> str:
        """klog.KObj: ``namespace/name``."""
        return f"{self.obj.namespace}/{self.obj.name}"

    @property
    def uid(self) -> str:
        return str(self.obj.metadata.get("uid") or "")

    @property
    def resource_version(self) -> str:
        return str(self.obj.metadata.get("resourceVersion") or "")

    @property
    def deleting(self) -> bool:
        return bool(self.obj.metadata.get("deletionTimestamp"))

    @property
    def finalizers(self) -> list[str]:
        return [str(f) for f in as_list(self.obj.metadata, "finalizers")]

    @property
    def status(self) -> Mapping[str, Any]:
        return as_map(self.data, "status")

    @property
    def allocation(self) -> Mapping[str, Any] | None:
        """status.allocation, None when the claim is not allocated."""
        v = self.status.get("allocation")
        return v if isinstance(v, dict) else None

    @property
    def reserved_for(self) -> list[Mapping[str, Any]]:
        return [r for r in as_list(self.status, "reservedFor") if isinstance(r, dict)]

    @property
    def requests(self) -> list[Mapping[str, Any]]:
        """spec.devices.requests."""
        devices = as_map(as_map(self.data, "spec"), "devices")
        return [r for r in as_list(devices, "requests") if isinstance(r, dict)]

    def is_reserved_for(self, pod_uid: str) -> bool:
        """IsReservedForPod (no PodGroup reservations: DRAWorkloadResourceClaims
        is alpha and off in v1.36)."""
        return any(str(r.get("uid") or "") == pod_uid for r in self.reserved_for)

    def is_controlled_by(self, uid: str) -> bool:
        """metav1.IsControlledBy: the controller owner reference names ``uid``."""
        for ref in as_list(self.obj.metadata, "ownerReferences"):
            if isinstance(ref, dict) and ref.get("controller") is True:
                return str(ref.get("uid") or "") == uid
        return False


def claim_names(pod: cpb.Pod) -> list[tuple[str, str | None, bool]]:
    """resourceclaim.Name for each of ``pod.resource_claims``: (entry name,
    claim name, must the owner be checked). The claim name is None for a
    template entry whose status says no claim was needed (skipped upstream).
    Raises ClaimProblem for a template entry without a status yet
    (ErrClaimNotFound) or an entry with neither name (ErrAPIUnsupported)."""
    out: list[tuple[str, str | None, bool]] = []
    statuses: dict[str, cpb.PodResourceClaimStatus] | None = None
    for entry in pod.resource_claims:
        if entry.HasField("resource_claim_name"):
            out.append((entry.name, entry.resource_claim_name, False))
        elif entry.HasField("resource_claim_template_name"):
            if statuses is None:
                statuses = {}
                for st in pod.resource_claim_statuses:
                    statuses.setdefault(st.name, st)
            found = statuses.get(entry.name)
            if found is None:
                raise ClaimProblem(
                    f"pod {quote(f'{pod.namespace}/{pod.name}')}: ResourceClaim not created yet"
                )
            name = found.resource_claim_name if found.HasField("resource_claim_name") else None
            out.append((entry.name, name, True))
        else:
            raise ClaimProblem(
                f"pod {quote(f'{pod.namespace}/{pod.name}')}, spec.resourceClaim "
                f"{quote(entry.name)}: none of the supported fields are set"
            )
    return out


def pod_claims(snapshot: Snapshot, pod: cpb.Pod) -> list[tuple[str, Claim]]:
    """foreachPodResourceClaim: the pod's claims in spec order (entries whose
    generated claim is not needed left out), as (entry name, claim). Raises
    ClaimProblem with upstream's message when one is missing, being deleted,
    or (for a template entry) not owned by the pod."""
    out: list[tuple[str, Claim]] = []
    kind = RESOURCE_CLAIMS
    for entry, name, must_check_owner in claim_names(pod):
        if name is None:
            continue
        obj = snapshot.object(kind.group, kind.resource, pod.namespace, name)
        if obj is None:
            # The assume cache's NotFoundError (assumecache.go), with the
            # description scheduler.go gives the claims' cache.
            raise ClaimProblem(f"could not find ResourceClaim {quote(f'{pod.namespace}/{name}')}")
        claim = Claim(obj)
        if claim.deleting:
            raise ClaimProblem(f"resourceclaim {quote(name)} is being deleted")
        if must_check_owner and not claim.is_controlled_by(pod.uid):
            raise ClaimProblem(
                f"ResourceClaim {claim.key} was not created for Pod "
                f"{pod.namespace}/{pod.name} (Pod is not owner)"
            )
        out.append((entry, claim))
    return out


def pod_consumer(pod: cpb.Pod) -> dict[str, str]:
    """BindTo for a pod outside a PodGroup: the reservedFor entry of the pod
    (the core group's apiGroup is empty and left out, as the API omits it)."""
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def subrequest_names(requests: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(request, subrequest) names of every firstAvailable entry."""
    out: list[tuple[str, str]] = []
    for req in requests:
        for sub in as_list(req, "firstAvailable"):
            if isinstance(sub, dict):
                out.append((str(req.get("name") or ""), str(sub.get("name") or "")))
    return out
