"""PreFilter/Filter plugin VolumeRestrictions (upstream
pkg/scheduler/framework/plugins/volumerestrictions)."""

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
