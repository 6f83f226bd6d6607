"""Filter plugin NodeUnschedulable (upstream pkg/scheduler/framework/plugins/nodeunschedulable)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.nodeunschedulable.node_unschedulable import (
        ERR_REASON_UNSCHEDULABLE,
        NodeUnschedulable,
    )

__all__ = ["ERR_REASON_UNSCHEDULABLE", "NodeUnschedulable"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
