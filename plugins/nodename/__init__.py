"""Filter plugin NodeName (upstream pkg/scheduler/framework/plugins/nodename)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.nodename.node_name import (
        ERR_REASON,
        NodeName,
    )

__all__ = ["ERR_REASON", "NodeName"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
