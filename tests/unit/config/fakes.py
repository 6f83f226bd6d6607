"""Fake plugin classes for config tests.

They only declare names, extension points and Args types: the config loader
never calls a plugin. Some borrow upstream names (PrioritySort, DefaultBinder,
TaintToleration, ...) so that upstream's default set applies to them; the
others stand for custom plugins such as the seeds' AvoidNodePlugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from berth.framework.interfaces import (
    BindPlugin,
    FilterPlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)


class ResourceSpec(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    weight: int = 1


class ScoringStrategy(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    resources: list[ResourceSpec] = msgspec.field(
        default_factory=lambda: [ResourceSpec("cpu"), ResourceSpec("memory")]
    )


class FitArgs(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """Shaped like upstream's NodeResourcesFitArgs."""

    ignored_resources: list[str] = msgspec.field(default_factory=list)
    scoring_strategy: ScoringStrategy = msgspec.field(default_factory=ScoringStrategy)

    def validate(self) -> None:
        problems = [
            f"scoringStrategy.resources[{k}].weight: must be in the range [1, 100]"
            for k, r in enumerate(self.scoring_strategy.resources)
            if not 1 <= r.weight <= 100
        ]
        problems += [
            f"ignoredResources[{k}]: must not be empty"
            for k, name in enumerate(self.ignored_resources)
            if not name
        ]
        if problems:
            raise ValueError("; ".join(problems))


class SortArgs(msgspec.Struct, forbid_unknown_fields=True):
    reverse: bool = False
    tie_breaker: str = "creation"

    def validate(self) -> None:
        if self.tie_breaker not in ("creation", "name"):
            raise ValueError(f"unsupported tie breaker {self.tie_breaker!r}")


class TokenArgs(msgspec.Struct, forbid_unknown_fields=True):
    """Args with a required field: no defaults to fall back on."""

    token: str


class PrioritySort(QueueSortPlugin):
    name = "PrioritySort"


class OtherSort(QueueSortPlugin):
    name = "OtherSort"
    Args = SortArgs


class DefaultBinder(BindPlugin):
    name = "DefaultBinder"


class OtherBinder(BindPlugin):
    name = "OtherBinder"


class SchedulingGates(PreEnqueuePlugin):
    name = "SchedulingGates"


class NodeUnschedulable(FilterPlugin):
    name = "NodeUnschedulable"


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin):
    name = "TaintToleration"


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    name = "NodeResourcesFit"
    Args = FitArgs


class ImageLocality(ScorePlugin):
    name = "ImageLocality"


class DefaultPreemption(PostFilterPlugin):
    name = "DefaultPreemption"


class AvoidNodePlugin(FilterPlugin):
    name = "AvoidNodePlugin"


class LowCpuScheduler(FilterPlugin, ScorePlugin):
    name = "LowCpuScheduler"


class GpuScore(ScorePlugin):
    name = "GpuScore"


class Tokenized(FilterPlugin):
    name = "Tokenized"
    Args = TokenArgs


class Gang(PreEnqueuePlugin, PreFilterPlugin, ReservePlugin, PermitPlugin, PostBindPlugin):
    name = "Gang"


class Everywhere(
    PreEnqueuePlugin,
    QueueSortPlugin,
    PreFilterPlugin,
    FilterPlugin,
    PostFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ReservePlugin,
    PermitPlugin,
    PreBindPlugin,
    BindPlugin,
    PostBindPlugin,
):
    """Serves every extension point, like upstream's test plugin in
    TestNewFrameworkMultiPointExpansion."""

    name = "Everywhere"


def _registry(*classes: type[Plugin]) -> dict[str, type[Plugin]]:
    return {cls.name: cls for cls in classes}


# Upstream defaults that exist in this registry, in getDefaultPlugins order:
# SchedulingGates, PrioritySort, NodeUnschedulable, TaintToleration(3),
# NodeResourcesFit(1), DefaultPreemption, ImageLocality(1), DefaultBinder.
REGISTRY: Mapping[str, type[Plugin]] = _registry(
    PrioritySort,
    OtherSort,
    DefaultBinder,
    OtherBinder,
    SchedulingGates,
    NodeUnschedulable,
    TaintToleration,
    NodeResourcesFit,
    ImageLocality,
    DefaultPreemption,
    AvoidNodePlugin,
    LowCpuScheduler,
    GpuScore,
    Tokenized,
    Gang,
    Everywhere,
)
