"""Which DeviceClass backs an extended resource (DRAExtendedResource).

A pod may ask for an extended resource that no node advertises in its
allocatable; when a DeviceClass names that resource (``spec.extendedResourceName``),
or the resource is the class's implicit name
``deviceclass.resource.kubernetes.io/<class>``, DynamicResources allocates
devices of the class for it and NodeResourcesFit leaves it out on nodes
without it. This is upstream's extended resource cache
(k8s.io/dynamic-resource-allocation deviceclass/extendedresourcecache,
ExtendedResourceCache.GetDeviceClass), computed from the DeviceClasses a
plugin reads instead of kept up to date by informer events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from berth.framework.objects import ClusterObject
from berth.framework.resourceapi import DEVICE_CLASSES

__all__ = [
    "DEVICE_CLASSES",
    "DEVICE_CLASS_PREFIX",
    "DeviceClassResolver",
]

# resource/v1 types.go, ResourceDeviceClassPrefix: every class backs the
# extended resource of this prefix and its own name.
DEVICE_CLASS_PREFIX: Final = "deviceclass.resource.kubernetes.io/"


def _created(obj: ClusterObject) -> float:
    """metadata.creationTimestamp in seconds; 0 when missing or malformed."""
    value = obj.metadata.get("creationTimestamp")
    if not isinstance(value, str) or len(value) > 64:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class DeviceClassResolver:
    """Extended resource name to the DeviceClass (decoded JSON) backing it.

    Several classes may name the same extended resource: the newest by
    creationTimestamp wins, and of classes created in the same second the one
    whose name sorts first (updateResourceName2class)."""

    __slots__ = ("_by_resource",)

    def __init__(self, classes: Iterable[ClusterObject]) -> None:
        by_resource: dict[str, Mapping[str, Any]] = {}
        # (creationTimestamp, name) of the class holding each explicit name.
        holder: dict[str, tuple[float, str]] = {}
        for obj in classes:
            data = obj.data
            by_resource[DEVICE_CLASS_PREFIX + obj.name] = data
            spec = data.get("spec")
            name = spec.get("extendedResourceName") if isinstance(spec, dict) else None
            if not isinstance(name, str) or not name:
                continue
            created = _created(obj)
            have = holder.get(name)
            if have is not None and (
                created < have[0] or (created == have[0] and obj.name >= have[1])
            ):
                continue
            holder[name] = (created, obj.name)
            by_resource[name] = data
        self._by_resource = by_resource

    @classmethod
    def of(cls, objects: Mapping[tuple[str, str], ClusterObject]) -> DeviceClassResolver:
        """The resolver over a snapshot's DeviceClasses
        (``snapshot.objects(DEVICE_CLASSES.group, DEVICE_CLASSES.resource)``)."""
        return cls(objects.values())

    def get(self, resource_name: str) -> Mapping[str, Any] | None:
        """GetDeviceClass: the class backing ``resource_name``, or None."""
        return self._by_resource.get(resource_name)

    def __bool__(self) -> bool:
        return bool(self._by_resource)
