"""PodTopologySpread: spread pods over topology domains as their
``topologySpreadConstraints`` (or the cluster's default constraints) ask.

Port of pkg/scheduler/framework/plugins/podtopologyspread at v1.36:
plugin.go (New, getConstraints, the system default constraints),
filtering.go (PreFilter, calPreFilterState, Filter, minMatchNum),
scoring.go (PreScore, initPreScoreState, Score, NormalizeScore,
topologyNormalizingWeight, scoreForCount); common.go in common.py.

Differences from upstream, all for lack of a framework facility:

* Upstream's PreFilterExtensions (AddPod/RemovePod) have no Berth extension
  point yet, so Filter does not see nominated pods added in (upstream's
  addNominatedPods) and preemption cannot evaluate victims against this
  state. ``PreFilterState.add_pod`` implements updateWithPod for when it
  does.
* EnqueueExtensions (queueing hints) and SignPod belong to the caller's queue.

Matching pods per node come from count tables kept up to date across cycles
(counts.py: O(changed pods) per cycle, not O(pods)); PreFilter and PreScore
still walk every node once per constraint to sum them by domain, as upstream
does.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
import numpy as np

from berth_api.v1 import cluster_pb2 as pb
from plugins.framework.cycle_state import CycleState, StateKey
from plugins.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    NodeVerdicts,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScoreArray,
    ScorePlugin,
)
from plugins.framework.model import NodeInfo, PodInfo
from plugins.framework.objects import ObjectKind
from plugins.framework.snapshot import NodeBatch, Snapshot
from plugins.framework.status import SUCCESS, Status
from plugins.nodeaffinity.selector import required_node_affinity
from plugins.podtopologyspread.args import (
    DO_NOT_SCHEDULE,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULTING,
    DefaultConstraint,
    PodTopologySpreadArgs,
)
from plugins.podtopologyspread.common import (
    LABEL_HOSTNAME,
    LABEL_TOPOLOGY_ZONE,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    SERVICES,
    STATEFULSETS,
    Constraint,
    count_pods_match_selector,
    default_selector,
    filter_constraints,
    node_labels_match_spread_constraints,
)
from plugins.podtopologyspread.counts import pod_count_index
from plugins.podtopologyspread.selector import SelectorError

if TYPE_CHECKING:
    from plugins.framework.handle import Handle

__all__ = [
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "PodTopologySpread",
    "PreFilterState",
    "PreScoreState",
]

log = logging.getLogger(__name__)

NAME: Final = "PodTopologySpread"

# plugin.go, ErrReasonConstraintsNotMatch and ErrReasonNodeLabelNotMatch.
ERR_REASON_CONSTRAINTS_NOT_MATCH: Final = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH: Final = (
    ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
)

_NOT_MATCH = Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
# Preemption cannot give a node a label: unresolvable.
_LABEL_MISSING = Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)

# plugin.go, systemDefaultConstraints.
SYSTEM_DEFAULT_CONSTRAINTS: Final = (
    DefaultConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY),
    DefaultConstraint(
        max_skew=5, topology_key=LABEL_TOPOLOGY_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY
    ),
)

_MAX_INT32: Final = 2**31 - 1


class PreFilterState(msgspec.Struct):
    """filtering.go, preFilterState. ``tp_value_to_match_num[i]`` maps each
    domain of constraint i (among eligible nodes) to its matching pods;
    ``critical_paths[i]`` holds the two domains with the fewest, as
    (value, count) (upstream's criticalPaths; ``[0]`` is the minimum)."""

    constraints: tuple[Constraint, ...] = ()
    tp_value_to_match_num: list[dict[str, int]] = msgspec.field(default_factory=list)
    critical_paths: list[list[tuple[str, int]]] = msgspec.field(default_factory=list)

    def min_match_num(self, i: int, min_domains: int) -> int:
        """preFilterState.minMatchNum: the global minimum, or 0 when fewer
        domains than minDomains are eligible."""
        if len(self.tp_value_to_match_num[i]) < min_domains:
            return 0
        return self.critical_paths[i][0][1]

    def add_pod(self, pod: pb.Pod, preemptor: pb.Pod, node: pb.Node, delta: int) -> None:
        """filtering.go, updateWithPod: count ``pod`` (delta +1) or uncount
        it (-1) on ``node``, for the AddPod/RemovePod extensions."""
        if pod.namespace != preemptor.namespace:
            return
        if not node_labels_match_spread_constraints(node.labels, self.constraints):
            return
        required = required_node_affinity(preemptor)
        for i, c in enumerate(self.constraints):
            if not c.selector.matches(pod.labels):
                continue
            if not c.match_node_inclusion_policies(preemptor, node, required):
                continue
            v = node.labels[c.topology_key]
            counts = self.tp_value_to_match_num[i]
            counts[v] = counts.get(v, 0) + delta
            _update_critical_paths(self.critical_paths[i], v, counts[v])


def _new_critical_paths() -> list[tuple[str, int]]:
    return [("", _MAX_INT32), ("", _MAX_INT32)]


def _update_critical_paths(p: list[tuple[str, int]], value: str, num: int) -> None:
    """filtering.go, criticalPaths.update."""
    i = 0 if value == p[0][0] else 1 if value == p[1][0] else -1
    if i >= 0:
        p[i] = (value, num)
        if p[0][1] > p[1][1]:
            p[0], p[1] = p[1], p[0]
    elif num < p[0][1]:
        p[1] = p[0]
        p[0] = (value, num)
    elif num < p[1][1]:
        p[1] = (value, num)


class PreScoreState(msgspec.Struct):
    """scoring.go, preScoreState. ``ignored_nodes``: candidates missing a
    topology key (not scored); ``topology_value_to_pod_counts[i]``: matching
    pods per domain of constraint i that some candidate is in (hostname
    constraints are counted at Score); ``topology_normalizing_weight[i]``."""

    constraints: tuple[Constraint, ...] = ()
    ignored_nodes: frozenset[str] = frozenset()
    topology_value_to_pod_counts: list[dict[str, int]] = msgspec.field(default_factory=list)
    topology_normalizing_weight: list[float] = msgspec.field(default_factory=list)


# Upstream's keys: "PreFilter" / "PreScore" + the plugin name.
PRE_FILTER_STATE_KEY: Final = StateKey("PreFilter" + NAME, PreFilterState)
PRE_SCORE_STATE_KEY: Final = StateKey("PreScore" + NAME, PreScoreState)


def topology_normalizing_weight(size: int) -> float:
    """scoring.go, topologyNormalizingWeight: log(size + 2)."""
    return math.log(size + 2)


def score_for_count(cnt: int, max_skew: int, weight: float) -> float:
    """scoring.go, scoreForCount."""
    return float(cnt) * weight + float(max_skew - 1)


def _go_round(x: float) -> int:
    """math.Round: half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    """The PodTopologySpread plugin (upstream's podtopologyspread.PodTopologySpread)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = PodTopologySpreadArgs

    def __init__(
        self, args: PodTopologySpreadArgs | None = None, handle: Handle | None = None
    ) -> None:
        spread_args = PodTopologySpreadArgs() if args is None else args
        # New validates (ValidatePodTopologySpreadArgs).
        spread_args.validate()
        super().__init__(spread_args, handle)
        self.system_defaulted = spread_args.defaulting_type == SYSTEM_DEFAULTING
        self.default_constraints: tuple[DefaultConstraint, ...] = (
            SYSTEM_DEFAULT_CONSTRAINTS
            if self.system_defaulted
            else tuple(spread_args.default_constraints)
        )

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """New: with default constraints, the listers of Services,
        ReplicationControllers, ReplicaSets and StatefulSets (setListers),
        which DefaultSelector reads."""
        a = PodTopologySpreadArgs() if args is None else args
        if a.defaulting_type == SYSTEM_DEFAULTING or a.default_constraints:
            return (SERVICES, REPLICATIONCONTROLLERS, REPLICASETS, STATEFULSETS)
        return ()

    # -- constraints ------------------------------------------------------------

    def _build_default_constraints(
        self, pod: pb.Pod, action: str, snapshot: Snapshot
    ) -> list[Constraint]:
        """common.go, buildDefaultConstraints: the default constraints for
        ``action`` with the pod's DefaultSelector; none when it is empty."""
        wanted = [c for c in self.default_constraints if c.when_unsatisfiable == action]
        if not wanted:
            return []
        selector = default_selector(pod, snapshot)
        if selector.empty:
            return []
        return filter_constraints(wanted, pod.labels, action, selector)

    def get_constraints(self, pod: pb.Pod, action: str, snapshot: Snapshot) -> list[Constraint]:
        """plugin.go, getConstraints (and initPreScoreState's half for
        ScheduleAnyway): the pod's own constraints for ``action``, or the
        default ones when it has none. SelectorError when a selector does
        not parse."""
        if pod.topology_spread_constraints:
            return filter_constraints(pod.topology_spread_constraints, pod.labels, action)
        return self._build_default_constraints(pod, action, snapshot)

    # -- PreFilter / Filter --------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """filtering.go, PreFilter: Skip without hard constraints; else the
        domain counts over all nodes go to CycleState."""
        try:
            s = self.cal_pre_filter_state(pod, nodes)
        except SelectorError as exc:
            return None, Status.error(
                f"get constraints from pod: obtaining pod's hard topology spread constraints: {exc}"
            )
        if not s.constraints:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, SUCCESS

    def cal_pre_filter_state(self, pod: PodInfo, all_nodes: NodeBatch) -> PreFilterState:
        """filtering.go, calPreFilterState."""
        proto = pod.proto
        constraints = tuple(self.get_constraints(proto, DO_NOT_SCHEDULE, all_nodes.snapshot))
        if not constraints:
            return PreFilterState()
        counts: list[dict[str, int]] = [{} for _ in constraints]
        required = required_node_affinity(proto)
        index = pod_count_index(all_nodes.snapshot)
        tables = [index.table(proto.namespace, c.selector) for c in constraints]
        # Constraints whose inclusion policies admit every node (Ignore, or
        # Honor of a pod without nodeSelector, required affinity or tolerations
        # to check) need no per-node check.
        check = [not c.admits_every_node(proto, required) for c in constraints]
        keys = [c.topology_key for c in constraints]
        per_constraint = list(zip(constraints, check, tables, counts, strict=True))
        for ni in all_nodes:
            node = ni.node
            labels = node.labels
            # nodeLabelsMatchSpreadConstraints: every topology key present.
            values = [labels.get(k) for k in keys]
            if None in values:
                continue
            name = node.name
            for (c, must_check, table, domain_counts), value in zip(
                per_constraint, values, strict=True
            ):
                if must_check and not c.match_node_inclusion_policies(proto, node, required):
                    continue
                # countPodsMatchSelector over the node's pods, from the table.
                assert value is not None
                domain_counts[value] = domain_counts.get(value, 0) + table.get(name, 0)
        paths = []
        for i in range(len(constraints)):
            p = _new_critical_paths()
            for value, num in counts[i].items():
                _update_critical_paths(p, value, num)
            paths.append(p)
        return PreFilterState(constraints, counts, paths)

    def _pre_filter_state(self, state: CycleState) -> PreFilterState:
        return state.read(PRE_FILTER_STATE_KEY)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """filtering.go, Filter: for each hard constraint in order, a node
        without the topology key is UnschedulableAndUnresolvable (missing
        required label); a node where matching pods + (1 if the pod itself
        matches) - global minimum exceeds maxSkew is Unschedulable."""
        s = self._pre_filter_state(state)
        return self._verdict(s, pod.proto.labels, node.node.labels)

    def _verdict(self, s: PreFilterState, pod_labels: Any, node_labels: Any) -> Status:
        for i, c in enumerate(s.constraints):
            value = node_labels.get(c.topology_key)
            if value is None:
                return _LABEL_MISSING
            min_match = s.min_match_num(i, c.min_domains)
            self_match = 1 if c.selector.matches(pod_labels) else 0
            match = s.tp_value_to_match_num[i].get(value, 0)
            if match + self_match - min_match > c.max_skew:
                return _NOT_MATCH
        return SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """Batch form of Filter: decided once per distinct combination of
        the node's topology values."""
        s = self._pre_filter_state(state)
        if not s.constraints:
            return NodeVerdicts.all_pass(len(nodes))
        keys = [c.topology_key for c in s.constraints]
        pod_labels = pod.proto.labels
        memo: dict[tuple[str | None, ...], Status] = {}
        out: list[Status] = []
        for ni in nodes:
            labels = ni.node.labels
            combo = tuple(labels.get(k) for k in keys)
            st = memo.get(combo)
            if st is None:
                st = memo[combo] = self._verdict(s, pod_labels, labels)
            out.append(st)
        return NodeVerdicts.from_statuses(out)

    # -- PreScore / Score / NormalizeScore -------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """scoring.go, PreScore: Skip when the cluster has no nodes or the
        pod has no soft constraints (nor default ones); else the domain
        counts over all nodes for the domains the candidates are in."""
        snapshot = nodes.snapshot
        all_nodes = snapshot.all_nodes()
        if len(all_nodes) == 0:
            return Status.skip()
        proto = pod.proto
        # Only non-system-default rules require every topology label, so
        # nodes without a zone label still get hostname spreading.
        require_all = bool(proto.topology_spread_constraints) or not self.system_defaulted
        try:
            constraints = tuple(self.get_constraints(proto, SCHEDULE_ANYWAY, snapshot))
        except SelectorError as exc:
            return Status.error(
                "calculating preScoreState: obtaining pod's soft topology spread "
                f"constraints: {exc}"
            )
        if not constraints:
            return Status.skip()
        # initPreScoreState.
        counts: list[dict[str, int]] = [{} for _ in constraints]
        ignored: set[str] = set()
        for ni in nodes:
            labels = ni.node.labels
            if require_all and not node_labels_match_spread_constraints(labels, constraints):
                ignored.add(ni.name)
                continue
            for i, c in enumerate(constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue
                counts[i].setdefault(labels.get(c.topology_key, ""), 0)
        weights = []
        for i, c in enumerate(constraints):
            size = len(counts[i])
            if c.topology_key == LABEL_HOSTNAME:
                size = len(nodes) - len(ignored)
            weights.append(topology_normalizing_weight(size))
        # processAllNode.
        required = required_node_affinity(proto)
        index = pod_count_index(snapshot)
        tables = [
            None if c.topology_key == LABEL_HOSTNAME else index.table(proto.namespace, c.selector)
            for c in constraints
        ]
        check = [not c.admits_every_node(proto, required) for c in constraints]
        for ni in all_nodes:
            node = ni.node
            labels = node.labels
            if require_all and not node_labels_match_spread_constraints(labels, constraints):
                continue
            for i, c in enumerate(constraints):
                table = tables[i]
                if table is None:
                    # Hostname: counted at Score, per candidate.
                    continue
                value = labels.get(c.topology_key, "")
                if value not in counts[i]:
                    continue
                if check[i] and not c.match_node_inclusion_policies(proto, node, required):
                    continue
                counts[i][value] += table.get(node.name, 0)
        state.write(
            PRE_SCORE_STATE_KEY, PreScoreState(constraints, frozenset(ignored), counts, weights)
        )
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """scoring.go, Score: per constraint whose key the node has, the
        matching pods of its domain (of the node itself for hostname) times
        the topology weight, plus maxSkew - 1; rounded. Ignored nodes score
        0. Lower is better (NormalizeScore reverses)."""
        s = state.read(PRE_SCORE_STATE_KEY)
        return self._score(s, pod, node, None)

    def _score(
        self,
        s: PreScoreState,
        pod: PodInfo,
        node: NodeInfo,
        tables: list[dict[str, int] | None] | None,
    ) -> int:
        """Score of one node; ``tables`` (the batch form's) hold the hostname
        constraints' counts per node, else the node's pods are walked."""
        if node.name in s.ignored_nodes:
            return 0
        labels = node.node.labels
        total = 0.0
        for i, c in enumerate(s.constraints):
            value = labels.get(c.topology_key)
            if value is None:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                table = None if tables is None else tables[i]
                if table is None:
                    cnt = count_pods_match_selector(node.pods.values(), c.selector, pod.namespace)
                else:
                    cnt = table.get(node.name, 0)
            else:
                cnt = s.topology_value_to_pod_counts[i][value]
            total += score_for_count(cnt, c.max_skew, s.topology_normalizing_weight[i])
        return _go_round(total)

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """Batch form of Score: hostname counts come from the count tables."""
        s = state.read(PRE_SCORE_STATE_KEY)
        index = pod_count_index(nodes.snapshot)
        tables: list[dict[str, int] | None] = [
            index.table(pod.namespace, c.selector) if c.topology_key == LABEL_HOSTNAME else None
            for c in s.constraints
        ]
        return np.fromiter(
            (self._score(s, pod, ni, tables) for ni in nodes), dtype=np.int64, count=len(nodes)
        )

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """scoring.go, NormalizeScore: ignored nodes get 0; with the highest
        raw score 0 every other node gets 100; else
        100 * (max + min - score) / max (integer division)."""
        s = state.read(PRE_SCORE_STATE_KEY)
        if len(scores) == 0:
            return SUCCESS
        ignored = np.fromiter(
            (name in s.ignored_nodes for name in nodes.names), dtype=np.bool_, count=len(nodes)
        )
        scored = scores[~ignored]
        if len(scored):
            min_score = int(scored.min())
            max_score = max(int(scored.max()), 0)
        else:
            min_score, max_score = 0, 0
        if max_score == 0:
            scores[:] = MAX_NODE_SCORE
        else:
            scores[:] = MAX_NODE_SCORE * (max_score + min_score - scores) // max_score
        scores[ignored] = 0
        return SUCCESS
