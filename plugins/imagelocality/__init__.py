"""ImageLocality (upstream pkg/scheduler/framework/plugins/imagelocality):
prefer nodes that already hold the pod's container images."""

from berth.plugins.imagelocality.image_locality import ImageLocality

__all__ = ["ImageLocality"]
