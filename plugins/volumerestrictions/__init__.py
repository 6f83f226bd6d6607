"""PreFilter/Filter plugin VolumeRestrictions (upstream
pkg/scheduler/framework/plugins/volumerestrictions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.volumerestrictions.volume_restrictions import (
        ERR_REASON_DISK_CONFLICT,
        ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT,
        PRE_FILTER_STATE_KEY,
        PreFilterState,
        VolumeRestrictions,
    )

__all__ = [
    "ERR_REASON_DISK_CONFLICT",
    "ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT",
    "PRE_FILTER_STATE_KEY",
    "PreFilterState",
    "VolumeRestrictions",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
