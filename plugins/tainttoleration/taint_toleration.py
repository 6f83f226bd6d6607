"""TaintToleration: keep pods off nodes whose taints they do not tolerate, and
prefer nodes with fewer untolerated PreferNoSchedule taints.

Port of pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go
at v1.36 (Filter, PreScore, Score, NormalizeScore). Toleration matching is
upstream's Toleration.ToleratesTaint, shared in framework/tolerations.py;
the alpha Lt/Gt operators (feature gate TaintTolerationComparisonOperators,
off by default in v1.36) match nothing, as upstream with the gate off.

EventsToRegister and its queueing hints are upstream's (queueing hints on).
Not served: SignPod (upstream's pod signatures for batched scheduling; Berth
has no such extension point).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterable
from typing import ClassVar

import msgspec
import numpy as np
import numpy.typing as npt

from berth.framework import signers
from berth.framework.cycle_state import CycleState, StateError, StateKey
from berth.framework.events import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueueingHint,
)
from berth.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    NodeVerdicts,
    PreScorePlugin,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.normalize import default_normalize_score
from berth.framework.snapshot import NodeBatch, NodesMark, Snapshot
from berth.framework.status import SUCCESS, Status
from berth.framework.tolerations import (
    EFFECT_NO_EXECUTE,
    EFFECT_NO_SCHEDULE,
    EFFECT_PREFER_NO_SCHEDULE,
    TaintLike,
    TolerationLike,
    tolerations_tolerate_taint,
)

__all__ = [
    "ERR_REASON_UNTOLERATED",
    "NAME",
    "PRE_SCORE_STATE_KEY",
    "PreScoreState",
    "TaintIndex",
    "TaintToleration",
    "TolerationRecord",
    "count_intolerable_prefer_no_schedule",
    "default_normalize_score",
    "find_untolerated_taint",
    "prefer_no_schedule_tolerations",
    "taint_index",
]

NAME = "TaintToleration"

# taint_toleration.go, Filter, as of v1.36. It names no taint: taint keys and
# values may be sensitive, so upstream only logs the taint
# (kubernetes/kubernetes#134740, late 2025; releases before it printed
# "node(s) had untolerated taint {key: value}"). Every rejected node thus
# shares one reason.
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"

# Preemption cannot remove a taint: every rejection is unresolvable.
_REJECTED = Status.unresolvable(ERR_REASON_UNTOLERATED)

# helper.DoNotScheduleTaintsFilterFunc: the effects Filter looks at.
_DO_NOT_SCHEDULE = frozenset({EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE})


class TolerationRecord(msgspec.Struct, frozen=True, array_like=True):
    """A toleration as CycleState carries it: the fields matching reads
    (tolerationSeconds plays no part in scheduling)."""

    key: str
    operator: str
    value: str
    effect: str


class PreScoreState(msgspec.Struct):
    """taint_toleration.go, preScoreState: the pod's tolerations that can
    tolerate a PreferNoSchedule taint."""

    tolerations_prefer_no_schedule: list[TolerationRecord]


# Upstream's key: "PreScore" + the plugin name. Scheduling-only: upstream reads
# it only in Score (taint_toleration.go, getPreScoreState).
PRE_SCORE_STATE_KEY = StateKey("PreScore" + NAME, PreScoreState, scheduling_only=True)


def find_untolerated_taint(
    taints: Iterable[TaintLike], tolerations: Iterable[TolerationLike]
) -> TaintLike | None:
    """The first NoSchedule or NoExecute taint no toleration matches, or None:
    upstream's FindMatchingUntoleratedTaint with DoNotScheduleTaintsFilterFunc
    (k8s.io/component-helpers/scheduling/corev1/helpers.go)."""
    tols = list(tolerations)
    for taint in taints:
        if taint.effect in _DO_NOT_SCHEDULE and not tolerations_tolerate_taint(tols, taint):
            return taint
    return None


def prefer_no_schedule_tolerations(
    tolerations: Iterable[TolerationLike],
) -> list[TolerationRecord]:
    """taint_toleration.go, getAllTolerationPreferNoSchedule: tolerations whose
    effect is PreferNoSchedule or empty (an empty effect matches every effect)."""
    return [
        TolerationRecord(t.key, t.operator, t.value, t.effect)
        for t in tolerations
        if not t.effect or t.effect == EFFECT_PREFER_NO_SCHEDULE
    ]


def count_intolerable_prefer_no_schedule(
    taints: Iterable[TaintLike], tolerations: Iterable[TolerationLike]
) -> int:
    """taint_toleration.go, countIntolerableTaintsPreferNoSchedule: how many
    PreferNoSchedule taints no toleration matches. Other effects never count."""
    tols = list(tolerations)
    return sum(
        1
        for taint in taints
        if taint.effect == EFFECT_PREFER_NO_SCHEDULE and not tolerations_tolerate_taint(tols, taint)
    )


# -- which nodes have taints, per snapshot ---------------------------------------------

_node_of = operator.attrgetter("node")


class TaintIndex:
    """For one snapshot: which slots hold a node with any taint, so the batch
    forms visit only those (most clusters taint few nodes, often none).
    ``sync`` brings it up to the snapshot's node records: nothing to do while
    the snapshot's ``node_generation`` is the one last synced at (no node
    added, removed or replaced since); else it walks the records once and
    compares them by identity (a node update replaces its record), and any
    change rebuilds the mask. Holds no reference to the snapshot."""

    __slots__ = (
        "_cycle",
        "_mark",
        "_order",
        "_protos",
        "tainted",
        "tainted_any",
    )

    def __init__(self) -> None:
        # The cycle last synced for: a cycle's Filter and Score see the same
        # nodes, so its second call need not walk them again.
        self._cycle: CycleState | None = None
        self._mark = NodesMark()
        self._order: npt.NDArray[np.int64] | None = None
        self._protos: list[object] = []
        # By slot: does the node there have a taint?
        self.tainted: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.tainted_any = False

    def sync(self, snapshot: Snapshot, cycle: CycleState | None = None) -> None:
        if cycle is not None and cycle is self._cycle:
            return
        self._cycle = cycle
        if not self._mark.moved(snapshot):
            return
        order = snapshot.node_order()
        current = snapshot.nodes
        protos: list[object] = list(map(_node_of, current.values()))
        if order is self._order and protos == self._protos:
            # Same nodes in the same slots, no record replaced (list equality
            # takes identical records at once).
            return
        tainted = np.zeros(snapshot.columns.capacity, dtype=np.bool_)
        for ni in current.values():
            if ni.node.taints:
                tainted[ni.index] = True
        self.tainted = tainted
        self.tainted_any = bool(tainted.any())
        self._protos = protos
        self._order = order

    def candidates(self, nodes: NodeBatch) -> npt.NDArray[np.intp]:
        """Positions in ``nodes`` of the tainted ones."""
        if not self.tainted_any:
            return np.empty(0, dtype=np.intp)
        return np.flatnonzero(self.tainted[nodes.idx])


_INDEXES: weakref.WeakKeyDictionary[Snapshot, TaintIndex] = weakref.WeakKeyDictionary()


def taint_index(snapshot: Snapshot, cycle: CycleState | None = None) -> TaintIndex:
    """The snapshot's taint index, up to date (already, when last synced in
    the same ``cycle``); dropped with the snapshot."""
    index = _INDEXES.get(snapshot)
    if index is None:
        index = _INDEXES[snapshot] = TaintIndex()
    index.sync(snapshot, cycle)
    return index


def _read_pre_score_state(state: CycleState) -> PreScoreState:
    """taint_toleration.go, getPreScoreState: Score needs PreScore's state."""
    try:
        return state.read(PRE_SCORE_STATE_KEY)
    except StateError as exc:
        raise StateError(
            f'failed to read "{PRE_SCORE_STATE_KEY.name}" from cycleState: {exc}'
        ) from exc


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin):
    name: ClassVar[str] = NAME

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's tolerations (signers.go TolerationsSigner)."""
        return [(signers.TOLERATIONS, signers.tolerations(pod.proto))]

    # -- EnqueueExtensions ----------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """taint_toleration.go, EventsToRegister (queueing hints on): a node
        added or its taints changed; a toleration added to the pod."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                self.is_schedulable_after_node_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
                self.is_schedulable_after_pod_toleration_change,
            ),
        ]

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        """isSchedulableAfterNodeChange: Queue when the node had (or, added,
        is taken to have had) a taint the pod does not tolerate and has
        none now."""
        tolerations = pod.proto.tolerations
        was_untolerated = old is None or (
            find_untolerated_taint(old.node.taints, tolerations) is not None
        )
        is_untolerated = find_untolerated_taint(new.node.taints, tolerations) is not None
        if was_untolerated and not is_untolerated:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_toleration_change(
        self, pod: PodInfo, old: PodInfo | None, new: PodInfo
    ) -> QueueingHint:
        """isSchedulableAfterPodTolerationChange: only a toleration added to
        the rejected pod itself may help it."""
        return QueueingHint.QUEUE if new.uid == pod.uid else QueueingHint.QUEUE_SKIP

    # -- Filter ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """taint_toleration.go, Filter: a NoSchedule or NoExecute taint the pod
        does not tolerate rejects the node, UnschedulableAndUnresolvable."""
        if find_untolerated_taint(node.node.taints, pod.proto.tolerations) is None:
            return SUCCESS
        return _REJECTED

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form visits only the tainted nodes (the snapshot's
        TaintIndex; taints are not snapshot columns) and decides each distinct
        taint once per call: many nodes usually share a few taints."""
        tainted = taint_index(nodes.snapshot, state).candidates(nodes)
        if not tainted.size:
            return NodeVerdicts.all_pass(len(nodes))
        tolerations = list(pod.proto.tolerations)
        tolerated: dict[tuple[str, str, str], bool] = {}
        rejected = np.zeros(len(nodes), dtype=np.bool_)
        slot = nodes.snapshot.slot
        idx = nodes.idx
        for k in tainted.tolist():
            taints = slot(int(idx[k])).node.taints
            for taint in taints:
                if taint.effect not in _DO_NOT_SCHEDULE:
                    continue
                ident = (taint.key, taint.value, taint.effect)
                ok = tolerated.get(ident)
                if ok is None:
                    ok = tolerated[ident] = tolerations_tolerate_taint(tolerations, taint)
                if not ok:
                    rejected[k] = True
                    break
        if not np.count_nonzero(rejected):
            return NodeVerdicts.all_pass(len(nodes))
        return NodeVerdicts.from_mask(rejected, _REJECTED)

    # -- PreScore -------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """taint_toleration.go, PreScore: keep the pod's tolerations that bear
        on PreferNoSchedule taints. Never Skips (v1.36 has no Skip here): even a
        pod without tolerations scores nodes by their PreferNoSchedule taints."""
        tolerations = prefer_no_schedule_tolerations(pod.proto.tolerations)
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(tolerations))
        return SUCCESS

    # -- Score ----------------------------------------------------------------

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """taint_toleration.go, Score: the raw score is the number of
        untolerated PreferNoSchedule taints (more is worse; NormalizeScore
        reverses it). Without PreScore's state the cycle fails, as upstream."""
        pre = _read_pre_score_state(state)
        return count_intolerable_prefer_no_schedule(
            node.node.taints, pre.tolerations_prefer_no_schedule
        )

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """The batch form: untainted nodes score 0 (only the tainted ones of
        the snapshot's TaintIndex are visited), each distinct PreferNoSchedule
        taint decided once per call."""
        tolerations = _read_pre_score_state(state).tolerations_prefer_no_schedule
        scores = np.zeros(len(nodes), dtype=np.int64)
        tainted = taint_index(nodes.snapshot, state).candidates(nodes)
        if not tainted.size:
            return scores
        tolerated: dict[tuple[str, str], bool] = {}
        slot = nodes.snapshot.slot
        idx = nodes.idx
        for k in tainted.tolist():
            taints = slot(int(idx[k])).node.taints
            count = 0
            for taint in taints:
                if taint.effect != EFFECT_PREFER_NO_SCHEDULE:
                    continue
                ident = (taint.key, taint.value)
                ok = tolerated.get(ident)
                if ok is None:
                    ok = tolerated[ident] = tolerations_tolerate_taint(tolerations, taint)
                if not ok:
                    count += 1
            scores[k] = count
        return scores

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """taint_toleration.go, NormalizeScore: DefaultNormalizeScore(MaxNodeScore,
        reverse=true): the nodes with the fewest untolerated taints get 100, a
        node with the most gets 0, and all get 100 when none has any."""
        default_normalize_score(MAX_NODE_SCORE, True, scores)
        return SUCCESS
