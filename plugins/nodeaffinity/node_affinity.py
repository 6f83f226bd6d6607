"""NodeAffinity: keep pods on nodes their nodeSelector and required node
affinity select, and prefer nodes their preferred terms select.

Port of pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go at
v1.36 (PreFilter, Filter, PreScore, Score, NormalizeScore); selector
semantics in framework/nodeaffinity.py (component-helpers nodeaffinity),
with its EventsToRegister and queueing hint; SignPod (pod signatures for
batched scheduling) has no Berth extension point.

The batch forms read node labels as columns (``NodeBatch.labels(key)``,
framework/label_index.py): each requirement of a selector is one numpy
operation over the candidates' codes of its key, each term the AND of its
requirements, the selector the OR of its terms (a preferred term adds its
weight where it matches), so a cycle costs a few array operations per
requirement, never a Python call per node (``_Columns``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec
import numpy as np
import numpy.typing as npt

from berth.api.v1 import cluster_pb2 as pb
from berth.framework import signers
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
from berth.framework.label_index import NodeLabels
from berth.framework.labels import DOES_NOT_EXIST, EXISTS, GT, IN, NOT_IN, Requirement, parse_int64
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.nodeaffinity import (
    NODE_NAME_FIELD,
    RequiredNodeAffinity,
    SelectorTerm,
    aggregate_message,
    compile_node_selector,
    compile_preferred_terms,
    preferred_score,
    required_node_affinity,
    selector_matches,
)
from berth.framework.normalize import default_normalize_score
from berth.framework.runtime import CycleError, plugin_error_message
from berth.framework.snapshot import NodeBatch
from berth.framework.status import SUCCESS, Status
from berth.plugins.nodeaffinity.args import NodeAffinityArgs

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "ERR_REASON_CONFLICT",
    "ERR_REASON_ENFORCED",
    "ERR_REASON_POD",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "NodeAffinity",
    "PreScoreState",
    "default_normalize_score",
    "pod_node_names",
    "pod_preferred_terms",
]

NAME = "NodeAffinity"

# node_affinity.go, ErrReasonPod, errReasonEnforced, errReasonConflict.
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"

# Preemption cannot change a node's labels or name: every rejection is
# unresolvable.
_REJECTED_POD = Status.unresolvable(ERR_REASON_POD)
_REJECTED_ENFORCED = Status.unresolvable(ERR_REASON_ENFORCED)
_CONFLICT = Status.unresolvable(ERR_REASON_CONFLICT)


class PreScoreState(msgspec.Struct, frozen=True):
    """node_affinity.go, preScoreState: the pod's parsed preferred terms,
    None when it has none."""

    preferred: tuple[SelectorTerm, ...] | None = None


# Upstream's keys: "PreFilter" / "PreScore" + the plugin name. The
# PreFilter state is the parsed RequiredNodeAffinity itself. Both are
# scheduling-only: upstream reads them only in Filter and Score
# (node_affinity.go, getPreFilterState and getPreScoreState).
PRE_FILTER_STATE_KEY = StateKey("PreFilter" + NAME, RequiredNodeAffinity, scheduling_only=True)
PRE_SCORE_STATE_KEY = StateKey("PreScore" + NAME, PreScoreState, scheduling_only=True)


def _required_terms(pod: pb.Pod) -> pb.NodeSelector | None:
    """The pod's required node affinity, None when not set."""
    if not pod.HasField("affinity") or not pod.affinity.HasField("node_affinity"):
        return None
    affinity = pod.affinity.node_affinity
    return affinity.required if affinity.HasField("required") else None


def pod_node_names(required: pb.NodeSelector) -> frozenset[str] | None:
    """node_affinity.go, PreFilter: the node names the required terms allow
    when every term names nodes with ``metadata.name In``; None when some
    term does not (then any node may match). Within a term the named sets
    intersect (requirements are ANDed); across terms they unite."""
    names: set[str] = set()
    for term in required.terms:
        term_names: set[str] | None = None
        for req in term.match_fields:
            if req.key == NODE_NAME_FIELD and req.operator == IN:
                values = set(req.values)
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            return None
        names |= term_names
    return frozenset(names)


def pod_preferred_terms(pod: pb.Pod) -> tuple[tuple[SelectorTerm, ...] | None, str]:
    """node_affinity.go, getPodPreferredNodeAffinity: the pod's preferred
    terms parsed (None when it has none) and, when some term does not
    parse, the error message (upstream's aggregate of field errors)."""
    if not pod.HasField("affinity") or not pod.affinity.HasField("node_affinity"):
        return None, ""
    preferred = pod.affinity.node_affinity.preferred
    if not preferred:
        return None, ""
    terms, errors = compile_preferred_terms(preferred)
    if errors:
        return None, aggregate_message(errors)
    return terms, ""


BoolArray = npt.NDArray[np.bool_]


class _Columns:
    """Selectors evaluated over a batch of candidate nodes, as boolean
    masks aligned with it; each key's label column is looked up once per
    batch. The answers are those of the per-node matches
    (labels.Requirement.Matches, nodeSelectorTerm.match,
    NodeSelector.Match, PreferredSchedulingTerms.Score in
    k8s.io/component-helpers/scheduling/corev1/nodeaffinity)."""

    __slots__ = ("_labels", "_names", "n", "nodes")

    def __init__(self, nodes: NodeBatch) -> None:
        self.nodes = nodes
        self.n = len(nodes)
        self._labels: dict[str, NodeLabels] = {}
        self._names: npt.NDArray[np.str_] | None = None

    def labels(self, key: str) -> NodeLabels:
        got = self._labels.get(key)
        if got is None:
            got = self._labels[key] = self.nodes.labels(key)
        return got

    def names(self) -> npt.NDArray[np.str_]:
        if self._names is None:
            self._names = np.asarray(self.nodes.names, dtype=np.str_)
        return self._names

    def requirement(self, req: Requirement) -> BoolArray:
        """labels.Requirement.Matches over the candidates."""
        labels = self.labels(req.key)
        op = req.operator
        if op == IN:
            return labels.isin(req.values)
        if op == NOT_IN:
            return ~labels.isin(req.values)
        if op == EXISTS:
            return labels.present
        if op == DOES_NOT_EXIST:
            return ~labels.present
        # Gt/Lt: decided once per distinct value among the candidates; a
        # value that is not an integer, or no label, does not match.
        codes, inverse = np.unique(labels.codes, return_inverse=True)
        values = labels.column.values
        table = np.zeros(len(codes), dtype=np.bool_)
        for i, code in enumerate(codes.tolist()):
            if code < 0:
                continue
            number = parse_int64(values[code])
            if number is not None:
                table[i] = number > req.bound if op == GT else number < req.bound
        out: BoolArray = table[inverse.reshape(-1)]
        return out

    def term(self, term: SelectorTerm) -> BoolArray:
        """nodeSelectorTerm.match: every expression and every field holds."""
        mask = np.ones(self.n, dtype=np.bool_)
        for req in term.expressions or ():
            mask &= self.requirement(req)
        for field in term.fields or ():
            if field.key == NODE_NAME_FIELD:
                equal = self.names() == field.value
            else:
                equal = np.full(self.n, field.value == "", dtype=np.bool_)
            mask &= equal if field.equal else ~equal
        return mask

    def selector(self, terms: Sequence[SelectorTerm]) -> BoolArray:
        """NodeSelector.Match: some term matches (no terms: none)."""
        mask = np.zeros(self.n, dtype=np.bool_)
        for term in terms:
            mask |= self.term(term)
        return mask

    def required(self, required: RequiredNodeAffinity) -> BoolArray:
        """RequiredNodeAffinity.Match: the nodeSelector's labels, then the
        required terms."""
        mask = np.ones(self.n, dtype=np.bool_)
        for key, value in required.node_selector or ():
            mask &= self.labels(key).equals(value)
        if required.terms is not None:
            mask &= self.selector(required.terms)
        return mask

    def preferred_score(self, terms: Sequence[SelectorTerm]) -> ScoreArray:
        """PreferredSchedulingTerms.Score: the weights of the matching terms."""
        total = np.zeros(self.n, dtype=np.int64)
        for term in terms:
            total += self.term(term) * np.int64(term.weight)
        return total


class NodeAffinity(
    PreFilterPlugin[NodeAffinityArgs],
    FilterPlugin[NodeAffinityArgs],
    PreScorePlugin[NodeAffinityArgs],
    ScorePlugin[NodeAffinityArgs],
    SignPlugin[NodeAffinityArgs],
):
    """The NodeAffinity plugin (upstream's nodeaffinity.NodeAffinity)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = NodeAffinityArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: the pod's node affinity and nodeSelector (signers.go
        NodeAffinitySigner); the profile's addedAffinity is the same for
        every pod."""
        return [
            (signers.NODE_AFFINITY, signers.node_affinity(pod.proto)),
            (signers.NODE_SELECTOR, signers.node_selector(pod.proto)),
        ]

    def __init__(self, args: NodeAffinityArgs | None = None, handle: Handle | None = None) -> None:
        affinity_args = NodeAffinityArgs() if args is None else args
        # New validates (getArgs), so a plugin built in code is checked like
        # one built from a configuration file.
        affinity_args.validate()
        super().__init__(affinity_args, handle)
        # New: addedNodeSelector when the required half is present (even
        # with no terms: then no node matches), addedPrefSchedTerms when the
        # preferred half has entries (even if all of weight 0).
        self.added_required: tuple[SelectorTerm, ...] | None = None
        self.added_preferred: tuple[SelectorTerm, ...] | None = None
        added = affinity_args.added_affinity
        if added is not None:
            required = added.required_during_scheduling_ignored_during_execution
            if required is not None:
                self.added_required, _ = compile_node_selector(required.node_selector_terms)
            preferred = added.preferred_during_scheduling_ignored_during_execution
            if preferred:
                self.added_preferred, _ = compile_preferred_terms(preferred)

    # -- EnqueueExtensions ----------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """node_affinity.go, EventsToRegister with queueing hints on: a node
        added or relabelled."""
        return [
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.is_schedulable_after_node_change,
            )
        ]

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        """isSchedulableAfterNodeChange: Queue when the new node matches the
        args' and the pod's required affinity and, for an update, the old
        one did not match the pod's."""
        record = new.node
        if self.added_required is not None and not selector_matches(
            self.added_required, record.labels, record.name
        ):
            return QueueingHint.QUEUE_SKIP
        required = required_node_affinity(pod.proto)
        if not required.matches(record.labels, record.name):
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        if required.matches(old.node.labels, old.node.name):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    # -- PreFilter ------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """node_affinity.go, PreFilter: Skip when neither the pod (no
        nodeSelector, no required affinity) nor the args constrain nodes.
        Otherwise the parsed selector goes to CycleState and, when every
        required term names nodes (``matchFields`` ``metadata.name In``),
        the result narrows Filter to those names; none at all is a conflict,
        UnschedulableAndUnresolvable."""
        proto = pod.proto
        required = _required_terms(proto)
        if required is None and self.added_required is None and not proto.node_selector:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, required_node_affinity(proto))
        if required is None or not required.terms:
            return None, SUCCESS
        names = pod_node_names(required)
        if names is None:
            return None, SUCCESS
        if not names:
            return None, _CONFLICT
        return PreFilterResult(names), SUCCESS

    def _required(self, state: CycleState, pod: PodInfo) -> RequiredNodeAffinity:
        # Filter: recompute when PreFilter did not run (upstream's fallback).
        parsed = state.get(PRE_FILTER_STATE_KEY)
        return required_node_affinity(pod.proto) if parsed is None else parsed

    # -- Filter ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """node_affinity.go, Filter: the args' required affinity first
        (``node(s) didn't match scheduler-enforced node affinity``), then the
        pod's nodeSelector AND required affinity (``node(s) didn't match
        Pod's node affinity/selector``); both UnschedulableAndUnresolvable."""
        record = node.node
        labels = record.labels
        added = self.added_required
        if added is not None and not selector_matches(added, labels, record.name):
            return _REJECTED_ENFORCED
        if not self._required(state, pod).matches(labels, record.name):
            return _REJECTED_POD
        return SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """The batch form: the args' selector and the pod's as masks over
        the candidates' label columns (``_Columns``), with Filter's order of
        checks: a node the args reject is rejected for that."""
        columns = _Columns(nodes)
        rejected = ~columns.required(self._required(state, pod))
        added = self.added_required
        enforced = None if added is None else ~columns.selector(added)
        if enforced is None or not np.count_nonzero(enforced):
            if not np.count_nonzero(rejected):
                return NodeVerdicts.all_pass(len(nodes))
            return NodeVerdicts.from_mask(rejected, _REJECTED_POD)
        if not np.count_nonzero(rejected & ~enforced):
            return NodeVerdicts.from_mask(enforced, _REJECTED_ENFORCED)
        # -1 passes, 0 and 1 index the statuses.
        codes = np.where(enforced, 0, np.where(rejected, 1, -1)).astype(np.int32)
        return NodeVerdicts(codes, [_REJECTED_ENFORCED, _REJECTED_POD])

    # -- PreScore -------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """node_affinity.go, PreScore: Skip when neither the pod nor the args
        have preferred terms; an Error when the pod's do not parse."""
        preferred, error = pod_preferred_terms(pod.proto)
        if error:
            return Status.error(error)
        if preferred is None and self.added_preferred is None:
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(preferred))
        return SUCCESS

    def _preferred(self, state: CycleState, pod: PodInfo) -> tuple[SelectorTerm, ...]:
        # Score: recompute when PreScore did not run (upstream's fallback).
        pre = state.get(PRE_SCORE_STATE_KEY)
        if pre is not None:
            return pre.preferred or ()
        preferred, error = pod_preferred_terms(pod.proto)
        if error:
            raise CycleError(Status.error(plugin_error_message("Score", NAME, error), NAME))
        return preferred or ()

    # -- Score ----------------------------------------------------------------

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """node_affinity.go, Score: the weights of the matching preferred
        terms, the args' and the pod's."""
        record = node.node
        total = preferred_score(self._preferred(state, pod), record.labels, record.name)
        if self.added_preferred is not None:
            total += preferred_score(self.added_preferred, record.labels, record.name)
        return total

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        """The batch form: each term's mask over the candidates' label
        columns, weighted and summed."""
        terms = self._preferred(state, pod) + (self.added_preferred or ())
        if not terms:
            return np.zeros(len(nodes), dtype=np.int64)
        return _Columns(nodes).preferred_score(terms)

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """node_affinity.go, NormalizeScore: DefaultNormalizeScore(MaxNodeScore,
        reverse=false): the best-matching node gets 100, the others in
        proportion; all stay 0 when none matches."""
        default_normalize_score(MAX_NODE_SCORE, False, scores)
        return SUCCESS
