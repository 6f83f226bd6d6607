"""PreFilter/Filter plugin NodeVolumeLimits (upstream
pkg/scheduler/framework/plugins/nodevolumelimits, CSILimits)."""

from berth.plugins.nodevolumelimits.csi import ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, CSILimits

__all__ = ["ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED", "CSILimits"]
