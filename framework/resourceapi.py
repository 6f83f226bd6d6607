"""The resource.k8s.io/v1 kinds (dynamic resource allocation) plugins read.

One definition for every plugin that reads them (DynamicResources,
NodeResourcesFit's DRA-backed extended resources, the GPU plugins), so each
declares the same ``ObjectKind`` and the caller watches each kind once.
Upstream: k8s.io/api/resource/v1 (register.go, types.go).
"""

from __future__ import annotations

from typing import Final

from berth.framework.objects import ObjectKind

__all__ = ["DEVICE_CLASSES", "GROUP", "RESOURCE_CLAIMS", "RESOURCE_SLICES", "VERSION"]

GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
RESOURCE_CLAIMS: Final = ObjectKind(GROUP, VERSION, "resourceclaims", "ResourceClaim")
DEVICE_CLASSES: Final = ObjectKind(GROUP, VERSION, "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_SLICES: Final = ObjectKind(
    GROUP, VERSION, "resourceslices", "ResourceSlice", namespaced=False
)
