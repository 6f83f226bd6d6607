"""Extended resources backed by DRA (DRAExtendedResource, beta and on in v1.36).

Port of pkg/scheduler/framework/plugins/dynamicresources/
extendeddynamicresources.go (kube-scheduler v1.36.3). A pod that asks for an
extended resource a DeviceClass backs (framework/deviceclasses.py) gets, on a
node that does not advertise the resource in its allocatable, devices of that
class through one ResourceClaim the scheduler makes for the pod: PreFilter
finds the claim an earlier cycle made, or starts an in-memory one without
requests; Filter gives it the node's requests (createRequestsAndMappings) and
allocates it with the pod's own claims; PreBind creates it, writes its
allocation and reservation, and records in the pod's
status.extendedResourceClaimStatus which container's resource maps to which
request. Berth's writes are ObjectWrites the caller performs (a create, then
merge patches), under a name the plugin generates as the API server would for
upstream's generateName, so the later writes can name the claim.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from berth.api.v1 import cluster_pb2 as cpb
from berth.framework.deviceclasses import DEVICE_CLASS_PREFIX, DeviceClassResolver
from berth.framework.objects import ClusterObject
from berth.plugins.dynamicresources.claims import (
    EXTENDED_CLAIM_ANNOTATION,
    GENERATED_BASE,
    GENERATED_RANDOM,
    as_list,
    as_map,
)
from berth.plugins.noderesources.resource_names import is_extended_resource_name

__all__ = [
    "EXTENDED_CLAIM_ANNOTATION",
    "SPECIAL_CLAIM_NAME",
    "NodeClaim",
    "claim_object",
    "create_requests_and_mappings",
    "extended_requests",
    "find_extended_resource_claim",
    "generate_claim_name",
    "is_dra_extended_resource_name",
    "node_extended_resources",
]

# specialClaimInMemName: the in-memory claim's name until PreBind names it;
# not a valid object name, so no real claim has it.
SPECIAL_CLAIM_NAME: Final = "<extended-resources>"

# utilrand's alphabet, of which generated names take their random characters.
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def is_dra_extended_resource_name(name: str) -> bool:
    """util.IsDRAExtendedResourceName: an extended resource name, or a
    class's implicit one (deviceclass.resource.kubernetes.io/<class>)."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def extended_requests(
    scalar: Mapping[str, int], resolver: DeviceClassResolver
) -> dict[str, int] | None:
    """preFilterExtendedResources' test (hasDeviceClassMappedExtendedResource):
    the pod's scalar requests when some non-zero one is a DRA extended
    resource a class backs; None when the pod needs nothing of DRA."""
    for name, quantity in scalar.items():
        if quantity != 0 and is_dra_extended_resource_name(name) and resolver.get(name):
            return dict(scalar)
    return None


def find_extended_resource_claim(
    pod: cpb.Pod, claims: Mapping[tuple[str, str], ClusterObject]
) -> ClusterObject | None:
    """findExtendedResourceClaim: the claim annotated as the scheduler's,
    controlled by the pod (name and uid)."""
    for obj in claims.values():
        if obj.namespace != pod.namespace or obj.annotations.get(EXTENDED_CLAIM_ANNOTATION) != (
            "true"
        ):
            continue
        for ref in as_list(obj.metadata, "ownerReferences"):
            if (
                isinstance(ref, dict)
                and ref.get("controller") is True
                and ref.get("name") == pod.name
                and ref.get("uid") == pod.uid
            ):
                return obj
    return None


def node_extended_resources(
    scalar: Mapping[str, int], allocatable: Mapping[str, int], resolver: DeviceClassResolver
) -> tuple[dict[str, int], str]:
    """filterExtendedResources' split for one node: (the resources DRA must
    provide there, i.e. backed by a class and not in the node's allocatable;
    the first resource, by name, neither the node nor a class provides, or
    "" when none)."""
    out: dict[str, int] = {}
    for name, quantity in sorted(scalar.items()):
        if quantity == 0 or not is_dra_extended_resource_name(name):
            continue
        have = allocatable.get(name)
        if resolver.get(name) is not None and not have:
            out[name] = quantity
        elif have is None:
            return {}, name
    return out, ""


def _container_request_names(c: cpb.Container) -> list[str]:
    """The names in the container's resources.requests, sorted (the record
    keeps cpu and memory apart, with presence, and the rest by name)."""
    r = c.requests
    names = list(r.scalar)
    if r.HasField("milli_cpu"):
        names.append("cpu")
    if r.HasField("memory"):
        names.append("memory")
    if r.ephemeral_storage:
        names.append("ephemeral-storage")
    return sorted(names)


def _request_and_mappings(
    index: int,
    container: cpb.Container,
    resource: str,
    class_name: str,
    reusable: Sequence[dict[str, Any] | None],
) -> tuple[dict[str, Any] | None, list[dict[str, str]]]:
    """createResourceRequestAndMappings: the container's request for
    ``resource`` beyond what ``reusable`` (later long-lived containers'
    requests) covers, and its mappings."""
    wanted = container.requests.scalar.get(resource)
    if not wanted:
        return None, []
    mappings: list[dict[str, str]] = []
    total = 0
    for request in reusable:
        if request is None:
            continue
        total += int(request["exactly"]["count"])
        mappings.append(
            {
                "containerName": container.name,
                "resourceName": resource,
                "requestName": request["name"],
            }
        )
        if total >= wanted:
            return None, mappings
    names = _container_request_names(container)
    position = names.index(resource) if resource in names else 0
    name = f"container-{index}-request-{position}"
    mappings.append(
        {"containerName": container.name, "resourceName": resource, "requestName": name}
    )
    request = {
        "name": name,
        "exactly": {
            "deviceClassName": class_name,
            "allocationMode": "ExactCount",
            "count": wanted - total,
        },
    }
    return request, mappings


def create_requests_and_mappings(
    pod: cpb.Pod, extended: Mapping[str, int], resolver: DeviceClassResolver
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """createRequestsAndMappings: the device requests (sorted by name) of the
    node's claim and the container/resource/request mappings for the pod's
    status. Init containers (not sidecars) run one after another, so they
    share the largest of their requests and may reuse the devices of
    long-lived containers after them."""
    containers = [*pod.init_containers, *pod.containers]
    n_init = len(pod.init_containers)
    long_lived = [i for i, c in enumerate(containers) if i >= n_init or c.restartable]
    short_lived = [i for i, c in enumerate(containers) if i < n_init and not c.restartable]
    requests: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(extended):
        cls = resolver.get(resource)
        if cls is None:
            continue
        class_name = str(as_map(cls, "metadata").get("name") or "")
        long_requests: list[dict[str, Any] | None] = [None] * len(containers)
        long_mappings: list[dict[str, str]] = []
        for i in long_lived:
            req, got = _request_and_mappings(i, containers[i], resource, class_name, [])
            long_requests[i] = req
            long_mappings += got
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for i in short_lived:
            req, got = _request_and_mappings(
                i, containers[i], resource, class_name, long_requests[i:]
            )
            if req is not None:
                short_names.add(req["name"])
                if largest is None or largest["exactly"]["count"] < req["exactly"]["count"]:
                    largest = req
            short_mappings += got
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest["name"])
            for m in short_mappings:
                if m["requestName"] in short_names:
                    m["requestName"] = largest["name"]
        if largest is not None:
            requests.append(largest)
        requests += [r for r in long_requests if r is not None]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


def generate_claim_name(pod_name: str) -> str:
    """The name the API server would give for generateName
    ``<pod>-extended-resources-`` (SimpleNameGenerator.GenerateName)."""
    base = f"{pod_name}-extended-resources-"
    base = base[:GENERATED_BASE]
    return base + "".join(secrets.choice(_ALPHABET) for _ in range(GENERATED_RANDOM))


def claim_object(
    pod: cpb.Pod, name: str, requests: Sequence[Mapping[str, Any]], finalizers: Sequence[str] = ()
) -> dict[str, Any]:
    """The claim preFilterExtendedResources builds (owned by the pod as its
    controller, annotated as the scheduler's), with the node's requests."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": pod.namespace,
        "generateName": f"{pod.name}-extended-resources-",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "uid": pod.uid,
                "controller": True,
            }
        ],
        "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
    }
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [dict(r) for r in requests]}},
    }


@dataclass(frozen=True, slots=True)
class NodeClaim:
    """Filter's outcome for one node: the claim's requests there and the
    mappings for the pod's status; ``requests`` empty: the node's device
    plugins provide everything."""

    requests: list[dict[str, Any]]
    mappings: list[dict[str, str]]
