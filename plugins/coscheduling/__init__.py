"""Coscheduling (QueueSort + PreFilter + PostFilter + Reserve/Unreserve +
Permit): gang scheduling of PodGroups, as kubernetes-sigs/scheduler-plugins
does it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.coscheduling.args import (
        DEFAULT_PERMIT_WAITING_TIME_SECONDS,
        DEFAULT_POD_GROUP_REJECT_PERCENTAGE,
        MAX_PERMIT_WAITING_TIME_SECONDS,
        CoschedulingArgs,
    )
    from berth.plugins.coscheduling.core import (
        GROUPED_PODS,
        POD_GROUP_LABEL,
        PODGROUP,
        PodGroup,
    )
    from berth.plugins.coscheduling.coscheduling import (
        NAME,
        Coscheduling,
        gated_message,
        not_enough_message,
        post_filter_message,
    )

__all__ = [
    "DEFAULT_PERMIT_WAITING_TIME_SECONDS",
    "DEFAULT_POD_GROUP_REJECT_PERCENTAGE",
    "GROUPED_PODS",
    "MAX_PERMIT_WAITING_TIME_SECONDS",
    "NAME",
    "PODGROUP",
    "POD_GROUP_LABEL",
    "Coscheduling",
    "CoschedulingArgs",
    "PodGroup",
    "gated_message",
    "not_enough_message",
    "post_filter_message",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
