"""The structured parameters allocator of k8s.io/dynamic-resource-allocation
(structured/) and its CEL device selectors (cel/)."""

from berth.plugins.dynamicresources.structured.allocator import (
    AllocationError,
    AllocationTimeoutError,
    Allocator,
    Features,
    NodeAllocationError,
)
from berth.plugins.dynamicresources.structured.cel import (
    CelCache,
    CelCompileError,
    CelError,
    CelEvaluationError,
    CompiledSelector,
)
from berth.plugins.dynamicresources.structured.state import (
    AllocatedState,
    DeviceID,
    SharedDeviceID,
)

__all__ = [
    "AllocatedState",
    "AllocationError",
    "AllocationTimeoutError",
    "Allocator",
    "CelCache",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CompiledSelector",
    "DeviceID",
    "Features",
    "NodeAllocationError",
    "SharedDeviceID",
]
