"""The plugin framework: interfaces, Status, CycleState, snapshot, runtime.

A plugin imports what it needs from here::

    from berth.framework import CycleState, FilterPlugin, NodeInfo, PodInfo, Status

A plugin that reads objects beyond nodes and pods declares them with
``Plugin.reads`` (``ObjectKind``) and finds them in
``self.handle.snapshot.objects(group, resource)``; one that must change an
object adds an ``ObjectWrite`` with ``CycleState.add_write`` (see
framework/objects.py). A plugin that rejects pods declares the cluster events
that may undo its rejection with ``Plugin.events_to_register``
(``ClusterEventWithHint``, framework/events.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth.framework.lazy import lazy_exports

if TYPE_CHECKING:
    from berth.framework.cycle_state import (
        CycleState,
        StateError,
        StateKey,
    )
    from berth.framework.events import (
        ActionType,
        ClusterEvent,
        ClusterEventWithHint,
        EventResource,
        QueueingHint,
        QueueingHintFn,
    )
    from berth.framework.handle import Handle
    from berth.framework.interfaces import (
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
        SignFragment,
        SignPlugin,
        SortKey,
    )
    from berth.framework.label_index import (
        LabelColumn,
        NodeLabels,
    )
    from berth.framework.model import (
        NodeInfo,
        PodInfo,
        Resource,
    )
    from berth.framework.objects import (
        ClusterObject,
        ObjectKind,
        ObjectWrite,
        pod_write,
    )
    from berth.framework.snapshot import (
        NodeBatch,
        NodeColumns,
        Snapshot,
    )
    from berth.framework.status import (
        Code,
        Status,
    )

__all__ = [
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "ActionType",
    "BindPlugin",
    "ClusterEvent",
    "ClusterEventWithHint",
    "ClusterObject",
    "Code",
    "CycleState",
    "EventResource",
    "FilterPlugin",
    "Handle",
    "LabelColumn",
    "NodeBatch",
    "NodeColumns",
    "NodeInfo",
    "NodeLabels",
    "NodeVerdicts",
    "ObjectKind",
    "ObjectWrite",
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
    "QueueingHint",
    "QueueingHintFn",
    "ReservePlugin",
    "Resource",
    "ScoreArray",
    "ScorePlugin",
    "SignFragment",
    "SignPlugin",
    "Snapshot",
    "SortKey",
    "StateError",
    "StateKey",
    "Status",
    "pod_write",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(globals())
