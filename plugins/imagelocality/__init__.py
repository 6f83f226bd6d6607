"""ImageLocality (upstream pkg/scheduler/framework/plugins/imagelocality):
prefer nodes that already hold the pod's container images."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.imagelocality.image_locality import ImageLocality

__all__ = ["ImageLocality"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
