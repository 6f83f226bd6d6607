"""PodTopologySpreadArgs: the ``pluginConfig`` args of PodTopologySpread.

Field names are upstream's (staging/src/k8s.io/kube-scheduler/config/v1/
types_pluginargs.go, PodTopologySpreadArgs; ``defaultConstraints`` entries
are core/v1 TopologySpreadConstraint). ``defaultingType`` defaults to
``System`` (v1/defaults.go, SetDefaults_PodTopologySpreadArgs).
``validate()`` is upstream's ValidatePodTopologySpreadArgs
(pkg/scheduler/apis/config/validation/validation_pluginargs.go).
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from berth.framework.goquote import go_quote
from berth.framework.labels import label_key_errors

__all__ = [
    "DO_NOT_SCHEDULE",
    "LIST_DEFAULTING",
    "SCHEDULE_ANYWAY",
    "SYSTEM_DEFAULTING",
    "DefaultConstraint",
    "PodTopologySpreadArgs",
]

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]

SYSTEM_DEFAULTING: Final = "System"
LIST_DEFAULTING: Final = "List"
DO_NOT_SCHEDULE: Final = "DoNotSchedule"
SCHEDULE_ANYWAY: Final = "ScheduleAnyway"


class DefaultConstraint(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """core/v1 TopologySpreadConstraint as a default constraint. The
    selector of a default constraint is built per pod, so ``labelSelector``
    is refused by validation."""

    max_skew: Int32 = 0
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: dict[str, Any] | None = None
    min_domains: Int32 | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = msgspec.field(default_factory=list)


class PodTopologySpreadArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Args of PodTopologySpread."""

    default_constraints: list[DefaultConstraint] = msgspec.field(default_factory=list)
    defaulting_type: str = SYSTEM_DEFAULTING

    def validate(self) -> None:
        """ValidatePodTopologySpreadArgs. Raises ValueError naming every bad
        field as ``<field.path>: <reason>``, joined with "; "."""
        errors: list[str] = []
        dt = self.defaulting_type
        if dt not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
            errors.append(
                f"defaultingType: Unsupported value: {go_quote(dt)}: supported values: "
                f'"{SYSTEM_DEFAULTING}", "{LIST_DEFAULTING}"'
            )
        elif dt == SYSTEM_DEFAULTING and self.default_constraints:
            errors.append(
                f"defaultingType: Invalid value: {go_quote(dt)}: "
                "when .defaultConstraints are not empty"
            )
        for i, c in enumerate(self.default_constraints):
            p = f"defaultConstraints[{i}]"
            if c.max_skew <= 0:
                errors.append(
                    f"{p}.maxSkew: Invalid value: {c.max_skew}: not in valid range (0, inf)"
                )
            if not c.topology_key:
                errors.append(f"{p}.topologyKey: Required value: can not be empty")
            else:
                for e in label_key_errors(c.topology_key):
                    errors.append(
                        f"{p}.topologyKey: Invalid value: {go_quote(c.topology_key)}: {e}"
                    )
            if not c.when_unsatisfiable:
                errors.append(f"{p}.whenUnsatisfiable: Required value: can not be empty")
            elif c.when_unsatisfiable not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
                errors.append(
                    f"{p}.whenUnsatisfiable: Unsupported value: {go_quote(c.when_unsatisfiable)}: "
                    f'supported values: "{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"'
                )
            if c.label_selector is not None:
                errors.append(
                    f"{p}.labelSelector: Forbidden: constraint must not define a selector, "
                    "as they deduced for each pod"
                )
            for other in self.default_constraints[:i]:
                if (other.topology_key, other.when_unsatisfiable) == (
                    c.topology_key,
                    c.when_unsatisfiable,
                ):
                    errors.append(
                        f"defaultConstraints[{i}]: Duplicate value: "
                        f'"{{{c.topology_key}, {c.when_unsatisfiable}}}"'
                    )
                    break
        if errors:
            raise ValueError("; ".join(errors))
