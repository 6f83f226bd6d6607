"""PreFilter/Filter plugin VolumeZone (upstream
pkg/scheduler/framework/plugins/volumezone)."""

from berth.plugins.volumezone.volume_zone import (
    ERR_REASON_CONFLICT,
    PRE_FILTER_STATE_KEY,
    PVTopology,
    VolumeZone,
)

__all__ = ["ERR_REASON_CONFLICT", "PRE_FILTER_STATE_KEY", "PVTopology", "VolumeZone"]
