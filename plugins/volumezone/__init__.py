"""PreFilter/Filter plugin VolumeZone (upstream
pkg/scheduler/framework/plugins/volumezone)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.volumezone.volume_zone import (
        ERR_REASON_CONFLICT,
        PRE_FILTER_STATE_KEY,
        PVTopology,
        VolumeZone,
    )

__all__ = ["ERR_REASON_CONFLICT", "PRE_FILTER_STATE_KEY", "PVTopology", "VolumeZone"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
