"""DefaultPreemptionArgs: the ``pluginConfig`` args of DefaultPreemption.

Field names and defaults are upstream's (staging/src/k8s.io/kube-scheduler/
config/v1/types_pluginargs.go, DefaultPreemptionArgs; v1/defaults.go,
SetDefaults_DefaultPreemptionArgs: 10 and 100). ``validate()`` is
ValidateDefaultPreemptionArgs (pkg/scheduler/apis/config/validation/
validation_pluginargs.go), with its field paths and wording.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = [
    "DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE",
    "DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE",
    "DefaultPreemptionArgs",
]

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]

DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE: Final = 10
DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE: Final = 100


class DefaultPreemptionArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of DefaultPreemption: how many preemption candidates a dry run
    looks for, ``max(nodes * minCandidateNodesPercentage / 100,
    minCandidateNodesAbsolute)`` capped at the nodes where preemption might
    help (default_preemption.go, calculateNumCandidates)."""

    # Percentage of the nodes, 0..100.
    min_candidate_nodes_percentage: Int32 = DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE
    # Absolute number of nodes, at least 0.
    min_candidate_nodes_absolute: Int32 = DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE

    def validate(self) -> None:
        """ValidateDefaultPreemptionArgs. Raises ValueError naming every bad
        field as ``<field>: Invalid value: <value>: <reason>``, joined with
        "; "."""
        errors: list[str] = []
        pct = self.min_candidate_nodes_percentage
        absolute = self.min_candidate_nodes_absolute
        if pct < 0 or pct > 100:
            errors.append(
                f"minCandidateNodesPercentage: Invalid value: {pct}: not in valid range [0, 100]"
            )
        if absolute < 0:
            errors.append(
                f"minCandidateNodesAbsolute: Invalid value: {absolute}: not in valid range [0, inf)"
            )
        if pct == 0 and absolute == 0:
            errors.append(
                "minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time "
                "as minCandidateNodesAbsolute"
            )
            errors.append(
                "minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time "
                "as minCandidateNodesPercentage"
            )
        if errors:
            raise ValueError("; ".join(errors))
