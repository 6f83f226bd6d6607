"""The plugin framework: interfaces, Status, CycleState, snapshot, runtime.

A plugin imports what it needs from here::

    from plugins.framework import CycleState, FilterPlugin, NodeInfo, PodInfo, Status
"""

from plugins.framework.cycle_state import CycleState, StateError, StateKey
from plugins.framework.handle import Handle
from plugins.framework.interfaces import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    BindPlugin,
    FilterPlugin,
    NodeVerdicts,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScoreArray,
    ScorePlugin,
    SortKey,
)
from plugins.framework.model import NodeInfo, PodInfo, Resource
from plugins.framework.snapshot import NodeBatch, NodeColumns, Snapshot
from plugins.framework.status import Code, Status

__all__ = [
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "BindPlugin",
    "Code",
    "CycleState",
    "FilterPlugin",
    "Handle",
    "NodeBatch",
    "NodeColumns",
    "NodeInfo",
    "NodeVerdicts",
    "PermitPlugin",
    "Plugin",
    "PodInfo",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "QueueSortPlugin",
    "QueuedPodInfo",
    "ReservePlugin",
    "Resource",
    "ScoreArray",
    "ScorePlugin",
    "Snapshot",
    "SortKey",
    "StateError",
    "StateKey",
    "Status",
]
