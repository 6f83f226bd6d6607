"""PreEnqueue + PreFilter + Filter + PostFilter + Score + Reserve + PreBind
plugin DynamicResources: upstream's pkg/scheduler/framework/plugins/
dynamicresources with the structured allocator of k8s.io/dynamic-resource-
allocation (``structured/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.dynamicresources.args import (
        DEFAULT_BINDING_TIMEOUT,
        DEFAULT_FILTER_TIMEOUT,
        DynamicResourcesArgs,
    )
    from berth.plugins.dynamicresources.claims import (
        DEVICE_CLASSES,
        FINALIZER,
        RESOURCE_CLAIMS,
        RESOURCE_SLICES,
    )
    from berth.plugins.dynamicresources.dynamicresources import (
        NAME,
        STATE,
        AllocationFailed,
        AllocatorFactory,
        AllocatorLike,
        DraState,
        DynamicResources,
    )
    from berth.plugins.dynamicresources.inflight import IN_FLIGHT_ANNOTATION

__all__ = [
    "DEFAULT_BINDING_TIMEOUT",
    "DEFAULT_FILTER_TIMEOUT",
    "DEVICE_CLASSES",
    "FINALIZER",
    "IN_FLIGHT_ANNOTATION",
    "NAME",
    "RESOURCE_CLAIMS",
    "RESOURCE_SLICES",
    "STATE",
    "AllocationFailed",
    "AllocatorFactory",
    "AllocatorLike",
    "DraState",
    "DynamicResources",
    "DynamicResourcesArgs",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
