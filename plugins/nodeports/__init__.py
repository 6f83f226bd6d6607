"""PreFilter/Filter plugin NodePorts (upstream
pkg/scheduler/framework/plugins/nodeports)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.nodeports.node_ports import (
        ERR_REASON,
        PRE_FILTER_STATE_KEY,
        NodePorts,
    )

__all__ = ["ERR_REASON", "PRE_FILTER_STATE_KEY", "NodePorts"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
