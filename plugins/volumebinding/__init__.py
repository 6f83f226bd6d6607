"""PreFilter + Filter + Reserve + PreBind (+ Score behind the
StorageCapacityScoring gate) plugin VolumeBinding: upstream's
pkg/scheduler/framework/plugins/volumebinding."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.volumebinding.args import (
        DEFAULT_BIND_TIMEOUT_SECONDS,
        DEFAULT_SHAPE,
        UtilizationShapePoint,
        VolumeBindingArgs,
    )
    from berth.plugins.volumebinding.binder import (
        ASSUMED_ANNOTATION,
        CSI_DRIVERS,
        CSI_STORAGE_CAPACITIES,
        ERR_REASON_BIND_CONFLICT,
        ERR_REASON_NODE_CONFLICT,
        ERR_REASON_NOT_ENOUGH_SPACE,
        ERR_REASON_PV_NOT_EXIST,
    )
    from berth.plugins.volumebinding.volume_binding import (
        CHOSEN,
        CLAIMS,
        NAME,
        REASON_UNBOUND_IMMEDIATE,
        PodClaims,
        VolumeBinding,
        build_scorer,
    )

__all__ = [
    "ASSUMED_ANNOTATION",
    "CHOSEN",
    "CLAIMS",
    "CSI_DRIVERS",
    "CSI_STORAGE_CAPACITIES",
    "DEFAULT_BIND_TIMEOUT_SECONDS",
    "DEFAULT_SHAPE",
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_NOT_ENOUGH_SPACE",
    "ERR_REASON_PV_NOT_EXIST",
    "NAME",
    "REASON_UNBOUND_IMMEDIATE",
    "PodClaims",
    "UtilizationShapePoint",
    "VolumeBinding",
    "VolumeBindingArgs",
    "build_scorer",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
