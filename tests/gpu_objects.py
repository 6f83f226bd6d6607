"""ResourceSlices and ResourceClaims as GPU drivers and the scheduler write
them, for the GPU source tests (framework/gpus.py, GPUCardFit,
GPUPriorityPlugin, the integration test)."""

from __future__ import annotations

import json
from typing import Any

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.gpus import RESOURCE_CLAIMS, RESOURCE_SLICES
from berth.framework.testing import make_object

DRIVER = "gpu.nvidia.com"


def device(
    name: str,
    memory: str = "80Gi",
    *,
    kind: str | None = "gpu",
    shared: bool = False,
    policy: dict[str, Any] | None = None,
    counters: list[dict[str, Any]] | None = None,
    taints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A device as NVIDIA's DRA driver publishes one (k8s-dra-driver-gpu:
    attributes type, uuid, productName; capacity memory)."""
    attrs: dict[str, Any] = {
        "uuid": {"string": f"GPU-{name}"},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
    }
    if kind is not None:
        attrs["type"] = {"string": kind}
    capacity: dict[str, Any] = {"value": memory}
    if policy is not None:
        capacity["requestPolicy"] = policy
    out: dict[str, Any] = {"name": name, "attributes": attrs, "capacity": {"memory": capacity}}
    if shared:
        out["allowMultipleAllocations"] = True
    if counters is not None:
        out["consumesCounters"] = counters
    if taints is not None:
        out["taints"] = taints
    return out


def resource_slice(
    name: str,
    node: str,
    devices: list[dict[str, Any]],
    *,
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    counters: list[dict[str, Any]] | None = None,
) -> pb.ClusterObject:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
        "nodeName": node,
    }
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices
    return make_object(RESOURCE_SLICES, name, spec=spec)


def slice_json(name: str, node: str, devices: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    """The ResourceSlice as the API takes it."""
    obj = resource_slice(name, node, devices, **kw)
    return dict(json.loads(obj.json))


def claim(
    name: str, node: str, dev: str, *, pod_uid: str = "", consumed: str | None = None
) -> pb.ClusterObject:
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": node, "device": dev}
    if consumed is not None:
        result["shareID"] = f"share-{name}"
        result["consumedCapacity"] = {"memory": consumed}
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if pod_uid:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": pod_uid}]
    return make_object(RESOURCE_CLAIMS, name, spec={"devices": {"requests": []}}, status=status)
