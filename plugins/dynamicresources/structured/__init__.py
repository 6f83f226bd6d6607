"""The structured parameters allocator of k8s.io/dynamic-resource-allocation
(structured/) and its CEL device selectors (cel/)."""

from berth.plugins.dynamicresources.structured.cel import (
    CelCache,
    CelCompileError,
    CelError,
    CelEvaluationError,
    CompiledSelector,
)

__all__ = [
    "CelCache",
    "CelCompileError",
    "CelError",
    "CelEvaluationError",
    "CompiledSelector",
]
