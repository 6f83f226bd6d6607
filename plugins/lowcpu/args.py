"""LowCpuSchedulerArgs: thresholds, score weights and how LowCpuScheduler
treats nodes without fresh metrics.

Every field has a default, so a configuration without a ``pluginConfig``
entry gets ``cpuThreshold: 0.8``, the CPU alone in the score, metrics polled
every 15 s and considered stale after 120 s, and nodes without fresh metrics
allowed with a neutral score of 50. ``validate()`` raises ValueError as
``<field>: <reason>`` (several joined by ``"; "``), which the configuration
loader reports under ``profiles[i].pluginConfig[j].args.<field>``.
"""

from __future__ import annotations

import math
from typing import Final, Literal

import msgspec

__all__ = [
    "ALLOW",
    "DEFAULT_CPU_THRESHOLD",
    "DEFAULT_MAX_AGE_SECONDS",
    "DEFAULT_MISSING_SCORE",
    "DEFAULT_POLL_SECONDS",
    "REJECT",
    "LowCpuSchedulerArgs",
]

DEFAULT_CPU_THRESHOLD: Final = 0.8
DEFAULT_POLL_SECONDS: Final = 15
DEFAULT_MAX_AGE_SECONDS: Final = 120
DEFAULT_MISSING_SCORE: Final = 50
MAX_WEIGHT: Final = 100
ALLOW: Final = "Allow"
REJECT: Final = "Reject"


def _ratio_errors(field: str, value: float) -> list[str]:
    # NaN fails every comparison, so it lands here too.
    if not (isinstance(value, float | int) and math.isfinite(value) and 0 < value <= 1):
        return [
            f"{field}: must be a fraction of allocatable in (0, 1], e.g. 0.8 for 80%, got {value!r}"
        ]
    return []


class LowCpuSchedulerArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of LowCpuScheduler (all optional)."""

    # Filter rejects a node whose CPU usage / allocatable CPU is above this.
    cpu_threshold: float = DEFAULT_CPU_THRESHOLD
    # Filter also rejects a node whose memory usage / allocatable memory is
    # above this; null (the default) does not filter on memory.
    memory_threshold: float | None = None
    # Score = (cpuWeight * cpuScore + memoryWeight * memoryScore) //
    # (cpuWeight + memoryWeight), each dimension's score floor(100 * (1 - usage)).
    # memoryWeight 0 (the default) scores the CPU alone.
    cpu_weight: int = 1
    memory_weight: int = 0
    # How often the caller lists NodeMetrics (metrics.k8s.io has no watch).
    metrics_poll_seconds: int = DEFAULT_POLL_SECONDS
    # A NodeMetrics whose timestamp (the end of its window) is older than
    # this is stale, and treated like a missing one.
    metrics_max_age_seconds: int = DEFAULT_MAX_AGE_SECONDS
    # A node without fresh, usable metrics: Allow passes Filter and scores
    # missingMetricsScore; Reject fails Filter with the reason.
    missing_metrics: Literal["Allow", "Reject"] = "Allow"
    missing_metrics_score: int = DEFAULT_MISSING_SCORE

    @property
    def uses_memory(self) -> bool:
        """Whether memory usage is read at all (filtered or scored)."""
        return self.memory_threshold is not None or self.memory_weight > 0

    def validate(self) -> None:
        errors: list[str] = []
        errors += _ratio_errors("cpuThreshold", self.cpu_threshold)
        if self.memory_threshold is not None:
            errors += _ratio_errors("memoryThreshold", self.memory_threshold)
        for field, weight in (("cpuWeight", self.cpu_weight), ("memoryWeight", self.memory_weight)):
            if not 0 <= weight <= MAX_WEIGHT:
                errors.append(f"{field}: must be in the range [0, {MAX_WEIGHT}], got {weight}")
        if self.cpu_weight == 0 and self.memory_weight == 0:
            errors.append(
                "cpuWeight: cpuWeight and memoryWeight are both 0; at least one must be "
                "positive for the score to mean anything"
            )
        if self.metrics_poll_seconds < 1:
            errors.append(
                f"metricsPollSeconds: must be at least 1 (metrics.k8s.io is polled, it has no "
                f"watch), got {self.metrics_poll_seconds}"
            )
        elif self.metrics_max_age_seconds < self.metrics_poll_seconds:
            errors.append(
                f"metricsMaxAgeSeconds: must be at least metricsPollSeconds "
                f"({self.metrics_poll_seconds}), or metrics would go stale between two polls; "
                f"got {self.metrics_max_age_seconds}"
            )
        if not 0 <= self.missing_metrics_score <= 100:
            errors.append(
                f"missingMetricsScore: must be a score in the range [0, 100], "
                f"got {self.missing_metrics_score}"
            )
        if errors:
            raise ValueError("; ".join(errors))
