"""CoschedulingArgs, as scheduler-plugins defines them (apis/config/types.go
CoschedulingArgs; defaults in apis/config/v1/defaults.go
SetDefaults_CoschedulingArgs; checks in apis/config/validation
ValidateCoschedulingArgs), with Berth's limits:

- ``permitWaitingTimeSeconds`` (default 60): at most 900, upstream's longest
  Permit wait (framework.go maxTimeout, 15 minutes), instead of being cut
  there silently;
- ``podGroupBackoffSeconds`` must stay 0: upstream remembers for that long
  that a group failed (an in-memory cache in the plugin); Berth's plugin
  server keeps nothing between requests, so it cannot, and refuses the
  setting rather than ignore it;
- ``podGroupRejectPercentage`` (default 10): 0..100, as upstream.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = [
    "DEFAULT_PERMIT_WAITING_TIME_SECONDS",
    "DEFAULT_POD_GROUP_REJECT_PERCENTAGE",
    "MAX_PERMIT_WAITING_TIME_SECONDS",
    "CoschedulingArgs",
]

DEFAULT_PERMIT_WAITING_TIME_SECONDS: Final = 60
DEFAULT_POD_GROUP_REJECT_PERCENTAGE: Final = 10
# framework.go: maxTimeout, the longest a pod may wait at Permit.
MAX_PERMIT_WAITING_TIME_SECONDS: Final = 15 * 60


class CoschedulingArgs(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Args of Coscheduling. ``validate()`` raises ValueError as
    ``<field>: <reason>`` (several joined by "; ")."""

    # How long the members of a group wait at Permit for the rest, when the
    # PodGroup does not say (spec.scheduleTimeoutSeconds); 0 means 60.
    permit_waiting_time_seconds: int = DEFAULT_PERMIT_WAITING_TIME_SECONDS
    # Upstream's group backoff; only 0 (off) is supported (see above).
    pod_group_backoff_seconds: int = 0
    # PostFilter: when a member fits no node and at most this percentage of
    # minMember is still unassigned, the group is not rejected (the next
    # members may still make it).
    pod_group_reject_percentage: int = DEFAULT_POD_GROUP_REJECT_PERCENTAGE

    def validate(self) -> None:
        errors: list[str] = []
        if self.permit_waiting_time_seconds < 0:
            errors.append(
                "permitWaitingTimeSeconds: invalid value "
                f"{self.permit_waiting_time_seconds}: must be greater than or equal to 0"
            )
        elif self.permit_waiting_time_seconds > MAX_PERMIT_WAITING_TIME_SECONDS:
            errors.append(
                "permitWaitingTimeSeconds: invalid value "
                f"{self.permit_waiting_time_seconds}: must be at most "
                f"{MAX_PERMIT_WAITING_TIME_SECONDS} (15 minutes, the longest a pod may wait "
                "at Permit)"
            )
        if self.pod_group_backoff_seconds < 0:
            errors.append(
                "podGroupBackoffSeconds: invalid value "
                f"{self.pod_group_backoff_seconds}: must be greater than or equal to 0"
            )
        elif self.pod_group_backoff_seconds > 0:
            errors.append(
                "podGroupBackoffSeconds: not supported: Berth's plugin server keeps nothing "
                "between requests, so it cannot hold a failed group back for "
                f"{self.pod_group_backoff_seconds}s; leave it out (0)"
            )
        if not 0 <= self.pod_group_reject_percentage <= 100:
            errors.append(
                "podGroupRejectPercentage: invalid value "
                f"{self.pod_group_reject_percentage}: must be between 0 and 100"
            )
        if errors:
            raise ValueError("; ".join(errors))

    @property
    def default_timeout(self) -> float:
        """Seconds a member waits when its PodGroup sets no timeout."""
        return float(self.permit_waiting_time_seconds or DEFAULT_PERMIT_WAITING_TIME_SECONDS)
