"""The ``pluginConfig`` args of NodeResourcesFit (NodeResourcesFitArgs) and
NodeResourcesBalancedAllocation (NodeResourcesBalancedAllocationArgs).

Field names, defaults and checks are upstream's:

* types: staging/src/k8s.io/kube-scheduler/config/v1/types_pluginargs.go
  (NodeResourcesFitArgs, ScoringStrategy, ResourceSpec,
  RequestedToCapacityRatioParam, UtilizationShapePoint,
  NodeResourcesBalancedAllocationArgs);
* defaults: pkg/scheduler/apis/config/v1/defaults.go
  (SetDefaults_NodeResourcesFitArgs,
  SetDefaults_NodeResourcesBalancedAllocationArgs), applied in
  ``__post_init__``;
* checks: pkg/scheduler/apis/config/validation/validation_pluginargs.go
  (ValidateNodeResourcesFitArgs, validateResources, validateFunctionShape,
  ValidateNodeResourcesBalancedAllocationArgs), in ``validate()``.
"""

from __future__ import annotations

from typing import Final

import msgspec

from berth.plugins.noderesources.resource_names import CPU, MEMORY, qualified_name_errors

__all__ = [
    "LEAST_ALLOCATED",
    "MAX_CUSTOM_PRIORITY_SCORE",
    "MOST_ALLOCATED",
    "REQUESTED_TO_CAPACITY_RATIO",
    "BalancedAllocationArgs",
    "NodeResourcesBalancedAllocationArgs",
    "NodeResourcesFitArgs",
    "RequestedToCapacityRatioParam",
    "ResourceSpec",
    "ScoringStrategy",
    "UtilizationShapePoint",
]

# config.ScoringStrategyType values.
LEAST_ALLOCATED: Final = "LeastAllocated"
MOST_ALLOCATED: Final = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO: Final = "RequestedToCapacityRatio"
_SUPPORTED_TYPES: Final = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

# config.MaxCustomPriorityScore: shape scores are 0..10.
MAX_CUSTOM_PRIORITY_SCORE: Final = 10
_MAX_UTILIZATION: Final = 100
_MAX_WEIGHT: Final = 100


class ResourceSpec(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A resource the score looks at, and its weight (0 defaults to 1)."""

    name: str
    weight: int = 0


class UtilizationShapePoint(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """A point of the RequestedToCapacityRatio curve: utilization 0..100
    maps to score 0..10. A missing field is 0, as upstream decodes its
    non-pointer int32 fields."""

    utilization: int = 0
    score: int = 0


class RequestedToCapacityRatioParam(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    shape: list[UtilizationShapePoint] = msgspec.field(default_factory=list)


def _default_resources() -> list[ResourceSpec]:
    # defaults.go, defaultResourceSpec.
    return [ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1)]


class ScoringStrategy(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    # No default upstream either: a strategy without a type is refused.
    type: str = ""
    resources: list[ResourceSpec] = msgspec.field(default_factory=list)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None


class NodeResourcesFitArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of NodeResourcesFit. Constructing or decoding applies upstream's
    defaults; ``validate()`` applies upstream's checks."""

    # Extended resources Filter does not check (e.g. "example.com/foo").
    ignored_resources: list[str] = msgspec.field(default_factory=list)
    # Extended resource groups Filter does not check: "example.com" ignores
    # every "example.com/<name>".
    ignored_resource_groups: list[str] = msgspec.field(default_factory=list)
    scoring_strategy: ScoringStrategy | None = None

    def __post_init__(self) -> None:
        # SetDefaults_NodeResourcesFitArgs.
        if self.scoring_strategy is None:
            self.scoring_strategy = ScoringStrategy(LEAST_ALLOCATED, _default_resources())
        strategy = self.scoring_strategy
        if not strategy.resources:
            strategy.resources = _default_resources()
        for spec in strategy.resources:
            if spec.weight == 0:
                spec.weight = 1

    @property
    def strategy(self) -> ScoringStrategy:
        """The scoring strategy, never None once defaults are applied."""
        assert self.scoring_strategy is not None
        return self.scoring_strategy

    def validate(self) -> None:
        """ValidateNodeResourcesFitArgs. Raises ValueError naming every bad
        field as ``<field.path>: <reason>``, joined with "; "."""
        errors: list[str] = []
        for i, res in enumerate(self.ignored_resources):
            errors += [
                f"ignoredResources[{i}]: invalid value {res!r}: {e}"
                for e in qualified_name_errors(res)
            ]
        for i, group in enumerate(self.ignored_resource_groups):
            path = f"ignoredResourceGroups[{i}]"
            if "/" in group:
                errors.append(
                    f"{path}: invalid value {group!r}: resource group name can't contain '/'"
                )
            errors += [
                f"{path}: invalid value {group!r}: {e}" for e in qualified_name_errors(group)
            ]

        strategy = self.strategy
        if strategy.type not in _SUPPORTED_TYPES:
            supported = ", ".join(f'"{t}"' for t in _SUPPORTED_TYPES)
            errors.append(
                f'scoringStrategy.type: unsupported value "{strategy.type}": '
                f"supported values: {supported}"
            )
        for i, spec in enumerate(strategy.resources):
            if not 0 < spec.weight <= _MAX_WEIGHT:
                errors.append(
                    f"scoringStrategy.resources[{i}].weight: invalid value {spec.weight}: "
                    f"resource weight of {spec.name} not in valid range (0, {_MAX_WEIGHT}]"
                )
        # The param belongs to its type: required with it (its shape then
        # checked), refused with any other.
        ratio = strategy.requested_to_capacity_ratio
        ratio_path = "scoringStrategy.requestedToCapacityRatio"
        if strategy.type == REQUESTED_TO_CAPACITY_RATIO:
            if ratio is None:
                errors.append(f"{ratio_path}: required when type is {REQUESTED_TO_CAPACITY_RATIO}")
            else:
                errors += _shape_errors(ratio.shape, f"{ratio_path}.shape")
        elif ratio is not None:
            errors.append(
                f"{ratio_path}: must be nil when type is not {REQUESTED_TO_CAPACITY_RATIO}"
            )
        if errors:
            raise ValueError("; ".join(errors))


def _shape_errors(shape: list[UtilizationShapePoint], path: str) -> list[str]:
    """validateFunctionShape."""
    if not shape:
        return [f"{path}: at least one point must be specified"]
    errors: list[str] = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errors.append(
                f"{path}[{i}].utilization: invalid value {shape[i].utilization}: "
                "values must be sorted in increasing order"
            )
            break
    for i, point in enumerate(shape):
        if not 0 <= point.utilization <= _MAX_UTILIZATION:
            errors.append(
                f"{path}[{i}].utilization: invalid value {point.utilization}: "
                f"not in valid range [0, {_MAX_UTILIZATION}]"
            )
        if not 0 <= point.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errors.append(
                f"{path}[{i}].score: invalid value {point.score}: "
                f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"
            )
    return errors


class NodeResourcesBalancedAllocationArgs(
    msgspec.Struct, rename="camel", forbid_unknown_fields=True
):
    """Args of NodeResourcesBalancedAllocation. Constructing or decoding
    applies upstream's defaults (SetDefaults_NodeResourcesBalancedAllocationArgs:
    no resources means cpu and memory with weight 1; a weight left out or 0
    becomes 1); ``validate()`` applies upstream's checks."""

    # The resources whose requested fractions are balanced. Weights take no
    # part in the score; upstream accepts only 1.
    resources: list[ResourceSpec] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.resources:
            self.resources = _default_resources()
            return
        for spec in self.resources:
            if spec.weight == 0:
                spec.weight = 1

    def validate(self) -> None:
        """ValidateNodeResourcesBalancedAllocationArgs: every resource named
        once, every weight exactly 1. Raises ValueError naming every bad field
        as ``<field.path>: <reason>``, joined with "; "."""
        errors: list[str] = []
        seen: set[str] = set()
        for i, spec in enumerate(self.resources):
            if spec.name in seen:
                errors.append(f"resources[{i}].name: duplicate value {spec.name!r}")
            else:
                seen.add(spec.name)
            if spec.weight != 1:
                errors.append(f"resources[{i}].weight: invalid value {spec.weight}: must be 1")
        if errors:
            raise ValueError("; ".join(errors))


# The name the plugin's docs use; upstream's type is the longer one.
BalancedAllocationArgs = NodeResourcesBalancedAllocationArgs
