"""Score plugin GPUPriorityPlugin: prefer nodes with more free GPUs (Berth's own
plugin, not upstream's; never in the default profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.gpupriority.args import (
        DEFAULT_RESOURCE_NAME,
        GPUPriorityPluginArgs,
    )
    from berth.plugins.gpupriority.gpu_priority import (
        GPUPriority,
        free_on_node,
        normalize_free,
    )

__all__ = [
    "DEFAULT_RESOURCE_NAME",
    "GPUPriority",
    "GPUPriorityPluginArgs",
    "free_on_node",
    "normalize_free",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
