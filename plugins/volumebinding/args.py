"""VolumeBindingArgs: the ``pluginConfig`` args of VolumeBinding.

Field names and defaults are upstream's (staging/src/k8s.io/kube-scheduler/
config/v1/types_pluginargs.go, VolumeBindingArgs, UtilizationShapePoint;
pkg/scheduler/apis/config/v1/defaults.go, SetDefaults_VolumeBindingArgs:
``bindTimeoutSeconds`` 600, and, only with the StorageCapacityScoring feature
gate on, a ``shape`` of (0, 10), (100, 0)). ``validate()`` is
ValidateVolumeBindingArgsWithOptions and validateFunctionShape
(pkg/scheduler/apis/config/validation/validation_pluginargs.go).

StorageCapacityScoring is alpha and off by default in v1.36
(pkg/features/kube_features.go), so, as upstream with its default gates, a
configuration that sets ``shape`` is refused.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = [
    "DEFAULT_BIND_TIMEOUT_SECONDS",
    "DEFAULT_SHAPE",
    "MAX_CUSTOM_PRIORITY_SCORE",
    "UtilizationShapePoint",
    "VolumeBindingArgs",
]

DEFAULT_BIND_TIMEOUT_SECONDS: Final = 600
# config.MaxCustomPriorityScore: shape scores are 0..10.
MAX_CUSTOM_PRIORITY_SCORE: Final = 10
_MAX_UTILIZATION: Final = 100

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class UtilizationShapePoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A point of the scoring function: utilization 0..100 (percent of the
    storage a class offers on the node that the pod's claims would use) to a
    score 0..10."""

    utilization: Int32
    score: Int32


# SetDefaults_VolumeBindingArgs with StorageCapacityScoring on: prefer the
# node with the most free storage.
DEFAULT_SHAPE: Final = (
    UtilizationShapePoint(utilization=0, score=MAX_CUSTOM_PRIORITY_SCORE),
    UtilizationShapePoint(utilization=_MAX_UTILIZATION, score=0),
)


class VolumeBindingArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of VolumeBinding (all optional)."""

    # How long upstream's PreBind waits for the PV controller to finish the
    # binding. Berth's PreBind does not wait (see the plugin's docstring), so
    # the value is checked and reported but changes nothing.
    bind_timeout_seconds: Int64 = DEFAULT_BIND_TIMEOUT_SECONDS
    # The scoring function of StorageCapacityScoring; None when not set.
    shape: list[UtilizationShapePoint] | None = None

    def validate(self, *, allow_storage_capacity_scoring: bool = False) -> None:
        """ValidateVolumeBindingArgsWithOptions: raises ValueError as
        ``<field>: <reason>`` (several joined by "; ")."""
        errors: list[str] = []
        if self.bind_timeout_seconds < 0:
            errors.append(
                f"bindTimeoutSeconds: Invalid value: {self.bind_timeout_seconds}: "
                "invalid BindTimeoutSeconds, should not be a negative value"
            )
        if allow_storage_capacity_scoring:
            errors += shape_errors(self.shape or [], "shape")
        elif self.shape is not None:
            errors.append(
                "shape: Invalid value: "
                + _render_shape(self.shape)
                + ": unexpected field `shape`, remove it or turn on the feature gate "
                "StorageCapacityScoring"
            )
        if errors:
            raise ValueError("; ".join(errors))


def _render_shape(shape: list[UtilizationShapePoint]) -> str:
    points = ", ".join(f"{{utilization: {p.utilization}, score: {p.score}}}" for p in shape)
    return f"[{points}]"


def shape_errors(shape: list[UtilizationShapePoint], path: str) -> list[str]:
    """validateFunctionShape: at least one point, utilizations increasing,
    each utilization in 0..100 and each score in 0..10."""
    if not shape:
        return [f"{path}: Required value: at least one point must be specified"]
    errors: list[str] = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errors.append(
                f"{path}[{i}].utilization: Invalid value: {shape[i].utilization}: "
                "values must be sorted in increasing order"
            )
            break
    for i, point in enumerate(shape):
        if not 0 <= point.utilization <= _MAX_UTILIZATION:
            errors.append(
                f"{path}[{i}].utilization: Invalid value: {point.utilization}: "
                f"not in valid range [0, {_MAX_UTILIZATION}]"
            )
        if not 0 <= point.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errors.append(
                f"{path}[{i}].score: Invalid value: {point.score}: "
                f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"
            )
    return errors
