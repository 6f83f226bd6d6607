"""PreFilter/Filter plugin NodeVolumeLimits (upstream
pkg/scheduler/framework/plugins/nodevolumelimits, CSILimits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.nodevolumelimits.csi import (
        ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
        CSILimits,
    )

__all__ = ["ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED", "CSILimits"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
