"""PreFilter/Filter/PreScore/Score plugin PodTopologySpread (upstream
pkg/scheduler/framework/plugins/podtopologyspread)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.plugins.podtopologyspread.args import PodTopologySpreadArgs
    from berth.plugins.podtopologyspread.pod_topology_spread import (
        ERR_REASON_CONSTRAINTS_NOT_MATCH,
        ERR_REASON_NODE_LABEL_NOT_MATCH,
        PRE_FILTER_STATE_KEY,
        PRE_SCORE_STATE_KEY,
        PodTopologySpread,
    )

__all__ = [
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "PodTopologySpread",
    "PodTopologySpreadArgs",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
