"""PodTopologySpread: spread pods over topology domains as their
``topologySpreadConstraints`` (or the cluster's default constraints) ask.

Port of pkg/scheduler/framework/plugins/podtopologyspread at v1.36:
plugin.go (New, getConstraints, the system default constraints),
filtering.go (PreFilter, calPreFilterState, Filter, minMatchNum),
scoring.go (PreScore, initPreScoreState, Score, NormalizeScore,
topologyNormalizingWeight, scoreForCount); common.go in common.py.

PreFilterExtensions (filtering.go, AddPod/RemovePod, updateWithPod) keep the
PreFilter state's domain counts right when the framework adds nominated pods
to a node (RunFilterPluginsWithNominatedPods) or preemption removes and adds
back victims (SelectVictimsOnNode). CycleState.clone shares values, so they
write an updated copy (upstream's preFilterState.Clone, here sharing the count
tables the pod does not change) instead of changing the state in place.

Differences from upstream, for lack of a framework facility:

* SignPod has no Berth extension point.
* EventsToRegister is upstream's (queueing hints on); its hints see no
  cluster state, so for a pod without constraints of its own (default
  constraints, whose selector DefaultSelector builds from the Services and
  owners the snapshot holds) they answer Queue.

Matching pods per node come from count tables and topology values from
topology columns, both per snapshot and kept current in O(change) (counts.py,
through Snapshot.watch_pods and the nodes' generation). PreFilter, Filter's
batch form, PreScore and Score's batch form sum and look them up with numpy
over node slots instead of walking nodes and pods in Python; the results are
upstream's (test_counts.py compares them with upstream's walks). Only the
node inclusion policies that can exclude a node (nodeAffinityPolicy Honor for
a pod with required node affinity, nodeTaintsPolicy Honor) are still checked
node by node, once per cycle and pair of policies.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
import numpy as np

from berth.api.v1 import cluster_pb2 as pb
from berth.framework.cycle_state import CycleState, StateKey
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
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScoreArray,
    ScorePlugin,
    SignFragment,
    SignPlugin,
)
from berth.framework.labels import SelectorError
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.nodeaffinity import RequiredNodeAffinity, required_node_affinity
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import BoolArray, IntArray, NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Status
from berth.plugins.podtopologyspread.args import (
    DO_NOT_SCHEDULE,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULTING,
    DefaultConstraint,
    PodTopologySpreadArgs,
)
from berth.plugins.podtopologyspread.common import (
    HONOR,
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
    pod_constraints,
    pod_labels_match_spread_constraints,
)
from berth.plugins.podtopologyspread.counts import (
    TopologyColumn,
    pod_count_index,
    topology_index,
)

if TYPE_CHECKING:
    from berth.framework.handle import Handle

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

    def with_pod(self, pod: pb.Pod, preemptor: pb.Pod, node: pb.Node, delta: int) -> PreFilterState:
        """updateWithPod on a copy: this state when ``pod`` changes no count
        (another namespace, a node outside the domains, no constraint
        selecting it), else a new state sharing every count table but the
        ones it changes."""
        if pod.namespace != preemptor.namespace:
            return self
        if not node_labels_match_spread_constraints(node.labels, self.constraints):
            return self
        required = required_node_affinity(preemptor)
        out: PreFilterState | None = None
        for i, c in enumerate(self.constraints):
            if not c.selector.matches(pod.labels):
                continue
            if not c.match_node_inclusion_policies(preemptor, node, required):
                continue
            if out is None:
                out = PreFilterState(
                    self.constraints,
                    list(self.tp_value_to_match_num),
                    list(self.critical_paths),
                )
            v = node.labels[c.topology_key]
            counts = out.tp_value_to_match_num[i] = dict(out.tp_value_to_match_num[i])
            counts[v] = counts.get(v, 0) + delta
            paths = out.critical_paths[i] = list(out.critical_paths[i])
            _update_critical_paths(paths, v, counts[v])
        return self if out is None else out

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
PRE_FILTER_STATE_KEY: Final = StateKey("PreFilter" + NAME, PreFilterState, scheduling_only=True)
PRE_SCORE_STATE_KEY: Final = StateKey("PreScore" + NAME, PreScoreState, scheduling_only=True)


def topology_normalizing_weight(size: int) -> float:
    """scoring.go, topologyNormalizingWeight: log(size + 2)."""
    return math.log(size + 2)


def score_for_count(cnt: int, max_skew: int, weight: float) -> float:
    """scoring.go, scoreForCount."""
    return float(cnt) * weight + float(max_skew - 1)


def _go_round(x: float) -> int:
    """math.Round: half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


class PodTopologySpread(
    PreFilterPlugin[PodTopologySpreadArgs],
    FilterPlugin[PodTopologySpreadArgs],
    PreScorePlugin[PodTopologySpreadArgs],
    ScorePlugin[PodTopologySpreadArgs],
    SignPlugin[PodTopologySpreadArgs],
):
    """The PodTopologySpread plugin (upstream's podtopologyspread.PodTopologySpread)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = PodTopologySpreadArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: a pod with topology spread constraints is not signed,
        nor is any pod while the profile has default constraints."""
        if pod.proto.topology_spread_constraints:
            return Status.unschedulable("pods with topology constraints are not signable", NAME)
        if self.default_constraints:
            return Status.unschedulable(
                "pods with default topology constraints are not signable", NAME
            )
        return []

    def signs_any_pod(self) -> bool:
        """Default constraints (the system's, in the default profile) leave
        no pod signable."""
        return not self.default_constraints

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

    # -- EnqueueExtensions --------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """plugin.go, EventsToRegister (queueing hints on)."""
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.POD,
                    ActionType.ADD
                    | ActionType.UPDATE_POD_LABEL
                    | ActionType.UPDATE_POD_TOLERATION
                    | ActionType.DELETE,
                ),
                self.is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.NODE,
                    ActionType.ADD
                    | ActionType.DELETE
                    | ActionType.UPDATE_NODE_LABEL
                    | ActionType.UPDATE_NODE_TAINT,
                ),
                self.is_schedulable_after_node_change,
            ),
        ]

    def _hint_constraints(self, pod: pb.Pod) -> list[Constraint] | None:
        """The pod's DoNotSchedule constraints for a hint; None when they
        are the default ones (their selector needs the cluster state)."""
        if not pod.topology_spread_constraints:
            return None
        return filter_constraints(pod.topology_spread_constraints, pod.labels, DO_NOT_SCHEDULE)

    def is_schedulable_after_pod_change(
        self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None
    ) -> QueueingHint:
        """plugin.go, isSchedulableAfterPodChange: a pod in the same
        namespace, on a node or nominated, added or deleted with labels a
        constraint selects, or relabelled into or out of a selector; the
        rejected pod's own new toleration when a constraint honours taints."""
        target = pod.proto
        for other in (new, old):
            if other is not None and not _involved_in_spreading(other.proto, target):
                return QueueingHint.QUEUE_SKIP
        constraints = self._hint_constraints(target)
        if constraints is None:
            return QueueingHint.QUEUE
        if old is not None and new is not None:
            if (
                new.uid == pod.uid
                and list(new.proto.tolerations) != list(old.proto.tolerations)
                and any(c.node_taints_policy == HONOR for c in constraints)
            ):
                return QueueingHint.QUEUE
            if dict(new.proto.labels) == dict(old.proto.labels):
                return QueueingHint.QUEUE_SKIP
            for c in constraints:
                if c.selector.matches(old.proto.labels) != c.selector.matches(new.proto.labels):
                    return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        changed = new if new is not None else old
        assert changed is not None
        if pod_labels_match_spread_constraints(constraints, changed.proto.labels):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None
    ) -> QueueingHint:
        """plugin.go, isSchedulableAfterNodeChange: a node added or deleted
        that has every topology key; an update that makes it have them or
        not, or (having them) changes a topology value or its taints."""
        constraints = self._hint_constraints(pod.proto)
        if constraints is None:
            return QueueingHint.QUEUE
        was = old is not None and node_labels_match_spread_constraints(old.node.labels, constraints)
        now = new is not None and node_labels_match_spread_constraints(new.node.labels, constraints)
        if old is not None and new is not None:
            if was != now:
                return QueueingHint.QUEUE
            before, after = old.node.labels, new.node.labels
            if now and (
                any(before.get(c.topology_key) != after.get(c.topology_key) for c in constraints)
                or list(old.node.taints) != list(new.node.taints)
            ):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE if (now if new is not None else was) else QueueingHint.QUEUE_SKIP

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
            return pod_constraints(pod, action)
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
        """filtering.go, calPreFilterState, over node slots with numpy: the
        topology values come from the snapshot's topology columns and the
        matching pods per node from its count tables (counts.py)."""
        proto = pod.proto
        snapshot = all_nodes.snapshot
        constraints = tuple(self.get_constraints(proto, DO_NOT_SCHEDULE, snapshot))
        if not constraints:
            return PreFilterState()
        required = required_node_affinity(proto)
        index = pod_count_index(snapshot)
        topology = topology_index(snapshot)
        idx = all_nodes.idx
        columns = [topology.column(snapshot, c.topology_key) for c in constraints]
        codes = [col.codes[idx] for col in columns]
        # nodeLabelsMatchSpreadConstraints: every topology key present. None
        # when every node has them (no node to leave out).
        has_keys: BoolArray = codes[0] >= 0
        for code in codes[1:]:
            has_keys &= code >= 0
        eligible = None if np.count_nonzero(has_keys) == len(idx) else has_keys
        policy_masks: dict[tuple[str, str], BoolArray] = {}
        counts: list[dict[str, int]] = []
        paths: list[list[tuple[str, int]]] = []
        for c, col, code in zip(constraints, columns, codes, strict=True):
            keep = eligible
            if not c.admits_every_node(proto, required):
                all_eligible = np.ones(len(idx), dtype=np.bool_) if eligible is None else eligible
                keep = all_eligible & _inclusion_mask(
                    policy_masks, c, proto, snapshot, idx, all_eligible, required
                )
            # countPodsMatchSelector per node, from the table, summed by domain.
            table = index.table(proto.namespace, c.selector)
            if keep is None:
                domain_counts, sums, domains = _sum_by_domain(code, table[idx], col)
            else:
                domain_counts, sums, domains = _sum_by_domain(code[keep], table[idx[keep]], col)
            counts.append(domain_counts)
            paths.append(_critical_paths(domains, sums, col))
        return PreFilterState(constraints, counts, paths)

    def _pre_filter_state(self, state: CycleState) -> PreFilterState:
        return state.read(PRE_FILTER_STATE_KEY)

    # -- PreFilterExtensions -------------------------------------------------------

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """filtering.go, AddPod: ``pod_to_add`` counts in its domains."""
        return self._update_with_pod(state, pod, pod_to_add, node, 1)

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """filtering.go, RemovePod: ``pod_to_remove`` no longer counts."""
        return self._update_with_pod(state, pod, pod_to_remove, node, -1)

    def _update_with_pod(
        self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, delta: int
    ) -> Status:
        """getPreFilterState then updateWithPod, on a copy written back."""
        s = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY.name}" from cycleState: not found')
        updated = s.with_pod(other.proto, pod.proto, node.node, delta)
        if updated is not s:
            state.write(PRE_FILTER_STATE_KEY, updated)
        return SUCCESS

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
        """Batch form of Filter, constraint by constraint over the batch with
        numpy; a node's status is that of the first constraint it fails, as
        in Filter."""
        s = self._pre_filter_state(state)
        if not s.constraints:
            return NodeVerdicts.all_pass(len(nodes))
        snapshot = nodes.snapshot
        topology = topology_index(snapshot)
        pod_labels = pod.proto.labels
        # Per constraint: the candidates' codes, and each node's verdict
        # (_per_code's extra last entry, 0, is what a node without the key
        # reads; those are told apart by their code).
        checks: list[tuple[IntArray, BoolArray]] = []
        clean = True
        for i, c in enumerate(s.constraints):
            col = topology.column(snapshot, c.topology_key)
            code = col.codes[nodes.idx]
            min_match = s.min_match_num(i, c.min_domains)
            self_match = 1 if c.selector.matches(pod_labels) else 0
            match = _per_code(s.tp_value_to_match_num[i], col)
            over = match[code] + self_match - min_match > c.max_skew
            checks.append((code, over))
            if clean and (np.count_nonzero(over) or np.count_nonzero(code < 0)):
                clean = False
        if clean:
            return NodeVerdicts.all_pass(len(nodes))
        # The first constraint a node fails, in order: the key missing, then
        # the skew.
        status_index = np.full(len(nodes), -1, dtype=np.int32)
        statuses: list[Status] = []
        for code, over in checks:
            undecided = status_index < 0
            missing = undecided & (code < 0)
            if np.count_nonzero(missing):
                status_index[missing] = _status_slot(statuses, _LABEL_MISSING)
            over &= undecided & (code >= 0)
            if np.count_nonzero(over):
                status_index[over] = _status_slot(statuses, _NOT_MATCH)
        return NodeVerdicts(status_index, statuses)

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
        # initPreScoreState, over node slots with numpy.
        topology = topology_index(snapshot)
        columns = [topology.column(snapshot, c.topology_key) for c in constraints]
        idx = nodes.idx
        cand_codes = [col.codes[idx] for col in columns]
        if require_all:
            has_all = np.logical_and.reduce([c >= 0 for c in cand_codes])
            slot = snapshot.slot
            ignored = frozenset(slot(i).name for i in idx[~has_all].tolist())
        else:
            has_all = np.ones(len(idx), dtype=np.bool_)
            ignored = frozenset()
        # Per constraint (but hostname): the codes of the candidates'
        # domains, a missing label read as "" (labels.get(key, "")).
        counts: list[dict[str, int]] = []
        domain_codes: list[IntArray | None] = []
        for c, col, code in zip(constraints, columns, cand_codes, strict=True):
            if c.topology_key == LABEL_HOSTNAME:
                counts.append({})
                domain_codes.append(None)
                continue
            present = np.unique(_missing_as_empty(code[has_all], col))
            domain_codes.append(present)
            counts.append(dict.fromkeys((col.values[k] for k in present.tolist()), 0))
        weights = []
        for i, c in enumerate(constraints):
            size = len(counts[i])
            if c.topology_key == LABEL_HOSTNAME:
                size = len(nodes) - len(ignored)
            weights.append(topology_normalizing_weight(size))
        # processAllNode.
        required = required_node_affinity(proto)
        index = pod_count_index(snapshot)
        all_idx = all_nodes.idx
        all_codes = [col.codes[all_idx] for col in columns]
        if require_all:
            eligible = np.logical_and.reduce([c >= 0 for c in all_codes])
        else:
            eligible = np.ones(len(all_idx), dtype=np.bool_)
        policy_masks: dict[tuple[str, str], BoolArray] = {}
        for c, col, node_codes, wanted, domain_counts in zip(
            constraints, columns, all_codes, domain_codes, counts, strict=True
        ):
            if wanted is None or not len(wanted):
                # Hostname: counted at Score, per candidate.
                continue
            keep = eligible
            if not c.admits_every_node(proto, required):
                keep = keep & _inclusion_mask(
                    policy_masks, c, proto, snapshot, all_idx, eligible, required
                )
            table = index.table(proto.namespace, c.selector)
            sums = np.bincount(
                _missing_as_empty(node_codes[keep], col),
                weights=table[all_idx[keep]],
                minlength=int(wanted.max()) + 1,
            )
            for k, n in zip(wanted.tolist(), sums[wanted].tolist(), strict=True):
                domain_counts[col.values[k]] += int(n)
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(constraints, ignored, counts, weights))
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
        """Batch form of Score with numpy: domain counts looked up by
        topology code, hostname counts read from the count tables; the
        constraints' terms added in order, as Score adds them."""
        s = state.read(PRE_SCORE_STATE_KEY)
        snapshot = nodes.snapshot
        topology = topology_index(snapshot)
        index = pod_count_index(snapshot)
        idx = nodes.idx
        total = np.zeros(len(idx), dtype=np.float64)
        for i, c in enumerate(s.constraints):
            col = topology.column(snapshot, c.topology_key)
            code = col.codes[idx]
            present = code >= 0
            if c.topology_key == LABEL_HOSTNAME:
                cnt = index.table(pod.namespace, c.selector)[idx]
            else:
                cnt = _per_code(s.topology_value_to_pod_counts[i], col)[np.where(present, code, 0)]
            term = cnt.astype(np.float64) * s.topology_normalizing_weight[i] + float(c.max_skew - 1)
            total += np.where(present, term, 0.0)
        # math.Round, half away from zero (the total is never negative).
        scores = np.floor(total + 0.5).astype(np.int64)
        if s.ignored_nodes:
            scores[_ignored_mask(s, nodes)] = 0
        return scores

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """scoring.go, NormalizeScore: ignored nodes get 0; with the highest
        raw score 0 every other node gets 100; else
        100 * (max + min - score) / max (integer division)."""
        s = state.read(PRE_SCORE_STATE_KEY)
        if len(scores) == 0:
            return SUCCESS
        ignored = _ignored_mask(s, nodes)
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


# -- numpy helpers -------------------------------------------------------------------


def _status_slot(statuses: list[Status], status: Status) -> int:
    """The index of ``status`` in a NodeVerdicts' status list, added when new."""
    try:
        return statuses.index(status)
    except ValueError:
        statuses.append(status)
        return len(statuses) - 1


def _per_code(by_value: dict[str, int], col: TopologyColumn) -> IntArray:
    """``by_value`` as an array over ``col``'s codes (0 for values it does
    not hold)."""
    out = np.zeros(len(col.values) + 1, dtype=np.int64)
    code_of = col.code_of
    for value, n in by_value.items():
        k = code_of.get(value)
        if k is not None:
            out[k] = n
    return out


def _missing_as_empty(codes: IntArray, col: TopologyColumn) -> IntArray:
    """``codes`` with -1 (no label) read as the code of "" (labels.get(key, ""))."""
    missing = codes < 0
    if not np.count_nonzero(missing):
        return codes
    return np.where(missing, col.code(""), codes)


def _sum_by_domain(
    codes: IntArray, pods: IntArray, col: TopologyColumn
) -> tuple[dict[str, int], IntArray, IntArray]:
    """Matching pods per domain of the nodes with ``codes`` (none missing),
    the domains in the order their first node comes (upstream fills its map
    in node order; only the critical paths' ties depend on it). Also the
    sums and the domains' codes, in that order."""
    if not len(codes):
        empty = np.empty(0, dtype=np.int64)
        return {}, empty, empty
    # Each code's first position without sorting the nodes (np.unique's
    # return_index sorts them all).
    n = len(codes)
    first = np.full(int(codes.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(n, dtype=np.int64))
    domains = np.flatnonzero(first < n)
    domains = domains[np.argsort(first[domains], kind="stable")]
    sums = np.bincount(codes, weights=pods)[domains].astype(np.int64)
    values = col.values
    return (
        {values[k]: n for k, n in zip(domains.tolist(), sums.tolist(), strict=True)},
        sums,
        domains,
    )


# Above any count: the first minimum's place when looking for the second.
_INT64_MAX: Final = int(np.iinfo(np.int64).max)


def _critical_paths(
    domains: IntArray, sums: IntArray, col: TopologyColumn
) -> list[tuple[str, int]]:
    """criticalPaths.update applied to the domains in order, in one go: the
    first domain with the fewest pods, then the first of the others with the
    fewest (what the sequential strict-less-than updates leave)."""
    paths = _new_critical_paths()
    if not len(sums):
        return paths
    first = int(np.argmin(sums))
    paths[0] = (col.values[int(domains[first])], int(sums[first]))
    if len(sums) > 1:
        rest = sums.copy()
        rest[first] = _INT64_MAX
        second = int(np.argmin(rest))
        paths[1] = (col.values[int(domains[second])], int(sums[second]))
    return paths


def _inclusion_mask(
    memo: dict[tuple[str, str], BoolArray],
    c: Constraint,
    pod: pb.Pod,
    snapshot: Snapshot,
    idx: IntArray,
    eligible: BoolArray,
    required: RequiredNodeAffinity,
) -> BoolArray:
    """matchNodeInclusionPolicies over the nodes at ``idx`` (False where
    not ``eligible``), once per pair of policies in a cycle. A Python walk:
    only for constraints whose policies can exclude a node."""
    key = (c.node_affinity_policy, c.node_taints_policy)
    mask = memo.get(key)
    if mask is None:
        mask = np.zeros(len(idx), dtype=np.bool_)
        slot = snapshot.slot
        for k in np.flatnonzero(eligible).tolist():
            node = slot(int(idx[k])).node
            mask[k] = c.match_node_inclusion_policies(pod, node, required)
        memo[key] = mask
    return mask


def _ignored_mask(s: PreScoreState, nodes: NodeBatch) -> BoolArray:
    if not s.ignored_nodes:
        return np.zeros(len(nodes), dtype=np.bool_)
    ignored = s.ignored_nodes
    return np.fromiter((name in ignored for name in nodes.names), dtype=np.bool_, count=len(nodes))


def _involved_in_spreading(incoming: pb.Pod, with_spreading: pb.Pod) -> bool:
    """plugin.go, involvedInTopologySpreading: the pod itself, or a pod on a
    node (or nominated to one) in its namespace."""
    if incoming.uid == with_spreading.uid:
        return True
    if not incoming.node_name and not incoming.nominated_node_name:
        return False
    return incoming.namespace == with_spreading.namespace
