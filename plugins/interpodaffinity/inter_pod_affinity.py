"""InterPodAffinity: required and preferred pod affinity and anti-affinity.

Port of pkg/scheduler/framework/plugins/interpodaffinity at v1.36
(filtering.go: PreFilter, AddPod, RemovePod, Filter; scoring.go: PreScore,
Score, NormalizeScore; plugin.go: New, mergeAffinityTermNamespacesIfNotEmpty,
GetNamespaceLabelsSnapshot). Terms are parsed once per pod (terms.py).

Counts are computed per cycle, as upstream does, but not by walking the
nodes: upstream visits every node's pods (in parallel) when the incoming pod
has terms, else only the nodes holding pods with (required anti-)affinity.
Here a per-snapshot index (index.py) groups the pods on the nodes by
namespace and labels and by the terms they carry, with their count per node,
so a cycle decides each group once and adds the counts of the matching ones:
a pod without terms in a cluster where no pod has terms does no per-node
work. EventsToRegister and its queueing hints are upstream's (queueing
hints on). Not done here: SignPod.

Namespace labels (for ``namespaceSelector``) come from the core v1
Namespace objects the plugin declares in ``reads``; a namespace the snapshot
does not hold has no labels (upstream logs and assumes an empty set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
import numpy as np
import numpy.typing as npt

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
from berth.framework.label_index import LabelColumn, NodeLabels
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.snapshot import BoolArray, NodeBatch, Snapshot
from berth.framework.status import SUCCESS, Status
from berth.plugins.interpodaffinity.args import InterPodAffinityArgs
from berth.plugins.interpodaffinity.index import (
    AffinityIndex,
    DenseCounts,
    SlotCounts,
    affinity_index,
)
from berth.plugins.interpodaffinity.terms import AffinityTerm, parsed_terms, pod_matches_all

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "ERR_REASON_AFFINITY",
    "ERR_REASON_ANTI_AFFINITY",
    "ERR_REASON_EXISTING_ANTI_AFFINITY",
    "NAME",
    "NAMESPACES",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "InterPodAffinity",
    "PreFilterState",
    "PreScoreState",
]

log = logging.getLogger(__name__)

NAME: Final = "InterPodAffinity"

# filtering.go, the ErrReason constants.
ERR_REASON_EXISTING_ANTI_AFFINITY: Final = (
    "node(s) didn't satisfy existing pods anti-affinity rules"
)
ERR_REASON_AFFINITY: Final = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"

# Filter: affinity rejections are UnschedulableAndUnresolvable (preemption
# cannot add a matching pod), anti-affinity ones Unschedulable.
_REJECT_AFFINITY = Status.unresolvable(ERR_REASON_AFFINITY)
_REJECT_ANTI_AFFINITY = Status.unschedulable(ERR_REASON_ANTI_AFFINITY)
_REJECT_EXISTING = Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY)
# Filter's verdict per node, as an index into _REJECTIONS (-1: passes).
_REJECTIONS: Final = (_REJECT_AFFINITY, _REJECT_ANTI_AFFINITY, _REJECT_EXISTING)
_PASS, _AFFINITY, _ANTI, _EXISTING = -1, 0, 1, 2
# The batch Filter's "no check failed" (above every rejection, so that the
# lowest code over several keys is the first check failed).
_NONE: Final = 3
VerdictArray = npt.NDArray[np.int32]

# The namespaces a namespaceSelector is resolved against (plugin.go, New:
# the Namespace informer's lister).
NAMESPACES: Final = ObjectKind(
    group="", version="v1", resource="namespaces", kind="Namespace", namespaced=False
)

# topology key -> topology value -> count (upstream's
# topologyToMatchedTermCount keyed by topologyPair, and scoreMap). A pair
# whose count comes back to zero is dropped, as upstream's update does, so
# "no pairs" is upstream's len(map) == 0.
Counts = dict[str, dict[str, int]]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class PreFilterWire(msgspec.Struct):
    """PreFilterState's wire form (the cycle state sent to the caller): the
    counts by topology value."""

    existing_anti_affinity: Counts
    affinity: Counts
    anti_affinity: Counts
    affinity_keys: list[str]
    anti_affinity_keys: list[str]
    self_match: bool
    namespace_labels: dict[str, str] = {}


# The three counts of a PreFilterState, by the names its tables use.
_WHICH: Final = ("existing", "affinity", "anti")


class CodeCounts:
    """One topology key's counts by code of the key's label column as
    PreFilter saw it: ``totals[code]`` for the first ``size`` entries of
    ``values`` (the column's list then: values are only appended to it, and a
    compaction replaces it, so those entries stay what they were)."""

    __slots__ = ("column", "size", "totals", "values")

    def __init__(self, column: LabelColumn, totals: IntArray) -> None:
        self.column = column
        self.values = column.values
        self.size = len(totals)
        self.totals = totals

    def by_value(self) -> dict[str, int]:
        held = np.flatnonzero(self.totals)
        return dict(
            zip(
                map(self.values.__getitem__, held.tolist()),
                self.totals[held].tolist(),
                strict=True,
            )
        )


class PreFilterState:
    """filtering.go, preFilterState, reduced to what Filter and the
    PreFilterExtensions read: the three counts, the topology keys of the
    incoming pod's required affinity and anti-affinity terms, whether the pod
    matches all of its own affinity terms (the first pod of a group), and the
    labels of its namespace (upstream's namespaceLabels, for AddPod and
    RemovePod). Treat as immutable: AddPod/RemovePod write a new one, since a
    cloned CycleState shares its values.

    PreFilter's counts are kept by code of each key's label column
    (``CodeCounts``), which is what the batch Filter reads, and turned into
    counts by topology value (upstream's topologyToMatchedTermCount) only
    when read as such: the per-node Filter, AddPod/RemovePod, the wire form
    (``to_wire``; a placed pod's response leaves this state out). A state
    from the wire or from AddPod/RemovePod holds counts by value. The
    lookup tables of the batch Filter are kept per column, so the Filter
    calls of one cycle (one per chunk of candidates) build each once."""

    __slots__ = (
        "_by_code",
        "_counts",
        "_tables",
        "affinity_keys",
        "anti_affinity_keys",
        "namespace_labels",
        "self_match",
    )

    Wire: ClassVar[type[PreFilterWire]] = PreFilterWire

    def __init__(
        self,
        existing_anti_affinity: Counts | None = None,
        affinity: Counts | None = None,
        anti_affinity: Counts | None = None,
        affinity_keys: list[str] | None = None,
        anti_affinity_keys: list[str] | None = None,
        self_match: bool = False,
        namespace_labels: dict[str, str] | None = None,
        *,
        by_code: dict[str, dict[str, CodeCounts]] | None = None,
    ) -> None:
        """Counts by value (the three first arguments), or ``by_code``:
        which ("existing", "affinity", "anti") -> key -> counts by code,
        holding only keys with a positive count."""
        self._by_code = by_code
        self._counts: dict[str, Counts] = {}
        if by_code is None:
            self._counts = {
                "existing": existing_anti_affinity or {},
                "affinity": affinity or {},
                "anti": anti_affinity or {},
            }
        self.affinity_keys = affinity_keys or []
        self.anti_affinity_keys = anti_affinity_keys or []
        self.self_match = self_match
        self.namespace_labels = namespace_labels or {}
        self._tables: dict[tuple[str, str], _Table] = {}

    def counts(self, which: str) -> Counts:
        """The counts ``which`` by topology value."""
        held = self._counts.get(which)
        if held is None:
            assert self._by_code is not None
            held = self._counts[which] = {
                key: c.by_value() for key, c in self._by_code[which].items()
            }
        return held

    @property
    def existing_anti_affinity(self) -> Counts:
        return self.counts("existing")

    @property
    def affinity(self) -> Counts:
        return self.counts("affinity")

    @property
    def anti_affinity(self) -> Counts:
        return self.counts("anti")

    def keys(self, which: str) -> list[str]:
        """The topology keys with a positive count in ``which``."""
        if self._by_code is not None:
            return list(self._by_code[which])
        return [k for k, by_value in self._counts[which].items() if by_value]

    def _lookup(
        self, name: str, labels: NodeLabels, build: Callable[[LabelColumn], npt.NDArray[Any]]
    ) -> npt.NDArray[Any]:
        """The table ``build`` makes over the label column's codes (one entry
        per value, then the ABSENT one), built once per state, ``name`` and
        column, read at ``labels``' nodes."""
        column = labels.column
        entry = self._tables.get((name, column.key))
        if not _valid(entry, column):
            entry = self._tables[name, column.key] = (
                column,
                column.values,
                len(column.values),
                build(column),
            )
        assert entry is not None
        return entry[3][labels.codes]

    def hits(self, which: str, labels: NodeLabels) -> BoolArray:
        """Which of the nodes sit in a pair (key, value) with a positive
        count in ``which``."""
        out: BoolArray = self._lookup(which, labels, lambda column: self._table(which, column))
        return out

    def verdicts(self, labels: NodeLabels, anti: bool, existing: bool) -> VerdictArray:
        """Each node's first failed check of ``anti`` (the incoming pod's
        anti-affinity) and ``existing`` (the existing pods' anti-affinity)
        over the key of ``labels``, _NONE where it fails neither."""

        def build(column: LabelColumn) -> VerdictArray:
            table = np.full(len(column.values) + 1, _NONE, dtype=np.int32)
            # The later check first, so that the earlier one overwrites it.
            if existing:
                table[self._table("existing", column)] = _EXISTING
            if anti:
                table[self._table("anti", column)] = _ANTI
            return table

        name = "verdicts" + ("-anti" if anti else "") + ("-existing" if existing else "")
        out: VerdictArray = self._lookup(name, labels, build)
        return out

    def _table(self, which: str, column: LabelColumn) -> BoolArray:
        """One entry per value of ``column`` (then False for ABSENT): whether
        the pair (column's key, value) has a positive count."""
        size = len(column.values)
        table = np.zeros(size + 1, dtype=np.bool_)
        by_code = None if self._by_code is None else self._by_code[which].get(column.key)
        if by_code is not None and by_code.column is column and by_code.values is column.values:
            table[: by_code.size] = by_code.totals > 0
            return table
        by_value = self.counts(which).get(column.key, {})
        codes = column.codes_of([v for v, c in by_value.items() if c > 0])
        if codes:
            table[codes] = True
        return table

    def to_wire(self) -> PreFilterWire:
        return PreFilterWire(
            existing_anti_affinity=self.existing_anti_affinity,
            affinity=self.affinity,
            anti_affinity=self.anti_affinity,
            affinity_keys=self.affinity_keys,
            anti_affinity_keys=self.anti_affinity_keys,
            self_match=self.self_match,
            namespace_labels=self.namespace_labels,
        )

    @classmethod
    def from_wire(cls, wire: PreFilterWire) -> PreFilterState:
        return cls(
            wire.existing_anti_affinity,
            wire.affinity,
            wire.anti_affinity,
            wire.affinity_keys,
            wire.anti_affinity_keys,
            wire.self_match,
            wire.namespace_labels,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PreFilterState) and self.to_wire() == other.to_wire()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PreFilterState({self.to_wire()!r})"


class PreScoreState(msgspec.Struct):
    """scoring.go, preScoreState: topology key -> value -> score."""

    topology_score: Counts


PRE_FILTER_STATE_KEY: Final = StateKey("PreFilter" + NAME, PreFilterState, scheduling_only=True)
PRE_SCORE_STATE_KEY: Final = StateKey("PreScore" + NAME, PreScoreState, scheduling_only=True)

_NOT_FOUND: Final = Status.error(
    f'error reading "{PRE_FILTER_STATE_KEY.name}" from cycleState: not found'
)


def _add_slots(
    counts: Counts,
    snap: Snapshot,
    key: str,
    slots: SlotCounts,
    weight: int = 1,
) -> bool:
    """topologyToMatchedTermCount.update / scoreMap.processTerm, for the
    pods counted in ``slots``: ``weight`` per pod to the pair (key, value)
    of its node, when the node has the key. Returns whether any had. Many
    slots are summed per value with numpy over the snapshot's label column
    of ``key``, few with a Python loop (cheaper below ~_VECTOR_SLOTS)."""
    if slots.dense is not None or len(slots) >= _VECTOR_SLOTS:
        return _add_slots_vector(counts, snap, key, slots, weight)
    by_value: dict[str, int] | None = None
    slot = snap.slot
    for i, n in slots.items():
        value = slot(i).node.labels.get(key)
        if value is None:
            continue
        if by_value is None:
            by_value = counts.setdefault(key, {})
        by_value[value] = by_value.get(value, 0) + n * weight
    return by_value is not None


# From this many slots on, _add_slots sums with numpy.
_VECTOR_SLOTS: Final = 32


def _add_slots_vector(
    counts: Counts, snap: Snapshot, key: str, slots: SlotCounts, weight: int
) -> bool:
    column = snap.label_column(key)
    if slots.dense is not None:
        totals = _dense_sums(column, slots.dense, len(column.values))
    else:
        m = len(slots)
        codes = column.codes[np.fromiter(slots.keys(), np.int64, m)]
        present = codes >= 0
        if not np.count_nonzero(present):
            return False
        per_pod = np.fromiter(slots.values(), np.int64, m)[present]
        totals = np.bincount(codes[present], weights=per_pod, minlength=len(column.values))
    held = np.flatnonzero(totals)
    if not len(held):
        return False
    added = zip(
        map(column.values.__getitem__, held.tolist()),
        (totals[held].astype(np.int64) * weight).tolist(),
        strict=True,
    )
    by_value = counts.get(key)
    if not by_value:
        counts[key] = dict(added)
        return True
    for value, n in added:
        by_value[value] = by_value.get(value, 0) + n
    return True


# Per topology key, counts by code of the key's label column (PreFilter's).
CodeSums = dict[str, tuple[LabelColumn, IntArray]]


def _sum_slots(snap: Snapshot, key: str, slots: SlotCounts, sums: CodeSums) -> None:
    """topologyToMatchedTermCount.update for the pods counted in ``slots``,
    by code: one per pod to the code of its node's value of ``key``, when
    the node has the key. Many slots are summed with numpy, few with a
    Python loop (cheaper below ~_VECTOR_SLOTS)."""
    held = sums.get(key)
    if held is None:
        column = snap.label_column(key)
        held = sums[key] = (column, np.zeros(len(column.values), dtype=np.int64))
    column, totals = held
    codes = column.codes
    if slots.dense is not None:
        totals += _dense_sums(column, slots.dense, len(totals))
        return
    if len(slots) < _VECTOR_SLOTS:
        for i, n in slots.items():
            code = int(codes[i])
            if code >= 0:
                totals[code] += n
        return
    m = len(slots)
    at = codes[np.fromiter(slots.keys(), np.int64, m)]
    present = at >= 0
    per_pod = np.fromiter(slots.values(), np.int64, m)[present]
    totals += np.bincount(at[present], weights=per_pod, minlength=len(totals)).astype(np.int64)


def _dense_sums(column: LabelColumn, dense: DenseCounts, size: int) -> IntArray:
    """A group's counts by code of ``column`` (at least ``size`` entries),
    from its dense array over the slots: one bincount over the slots, the
    codes shifted by one so that ABSENT (-1) falls in an entry dropped."""
    n = min(len(dense), len(column.codes))
    sums = np.bincount(column.codes[:n] + 1, weights=dense[:n], minlength=size + 1)
    out: IntArray = sums[1:].astype(np.int64)
    return out


def _by_code(sums: CodeSums) -> dict[str, CodeCounts]:
    """The keys of ``sums`` with a positive count."""
    return {key: CodeCounts(column, t) for key, (column, t) in sums.items() if np.count_nonzero(t)}


def _has_counts(counts: Counts) -> bool:
    return any(counts.values())


def _updated(counts: Counts, keys: Iterable[str], labels: Mapping[str, str], change: int) -> Counts:
    """``counts`` with ``change`` added to the pair (key, value) of a node
    with ``labels`` for every key it has (filtering.go, update): a new map
    where anything changes (the old one may be shared with a clone of the
    cycle state), pairs that reach zero dropped."""
    out: Counts | None = None
    for key in keys:
        value = labels.get(key)
        if value is None:
            continue
        if out is None:
            out = dict(counts)
        by_value = out[key] = dict(out.get(key, {}))
        n = by_value.get(value, 0) + change
        if n:
            by_value[value] = n
        else:
            del by_value[value]
            if not by_value:
                del out[key]
    return counts if out is None else out


class InterPodAffinity(
    PreFilterPlugin[InterPodAffinityArgs],
    FilterPlugin[InterPodAffinityArgs],
    PreScorePlugin[InterPodAffinityArgs],
    ScorePlugin[InterPodAffinityArgs],
    SignPlugin[InterPodAffinityArgs],
):
    """The InterPodAffinity plugin (upstream's interpodaffinity.InterPodAffinity)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = InterPodAffinityArgs

    def sign_pod(self, pod: PodInfo) -> list[SignFragment] | Status:
        """SignPod: a pod with pod affinity or anti-affinity is not signed;
        otherwise its labels (existing pods' terms may match them) unless
        the profile ignores existing pods' preferred terms. Berth also signs
        the namespace: an existing pod's term selects namespaces, so two
        pods with equal labels in different namespaces can score apart
        (upstream signs the labels alone)."""
        affinity = pod.proto.affinity
        if pod.proto.HasField("affinity") and (
            affinity.HasField("pod_affinity") or affinity.HasField("pod_anti_affinity")
        ):
            return Status.unschedulable("pods with InterPodAffinity are not signable", NAME)
        if self.ignore_preferred_terms_of_existing_pods:
            return []
        return [(signers.LABELS, (pod.proto.namespace, signers.labels(pod.proto)))]

    def __init__(
        self, args: InterPodAffinityArgs | None = None, handle: Handle | None = None
    ) -> None:
        ipa_args = InterPodAffinityArgs() if args is None else args
        # New validates, so a plugin built in code is checked like one built
        # from a configuration file.
        ipa_args.validate()
        super().__init__(ipa_args, handle)
        self.hard_pod_affinity_weight = ipa_args.hard_pod_affinity_weight
        self.ignore_preferred_terms_of_existing_pods = (
            ipa_args.ignore_preferred_terms_of_existing_pods
        )

    # -- EnqueueExtensions ----------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """plugin.go, EventsToRegister (queueing hints on): a pod added,
        relabelled or deleted; a node added or relabelled."""
        return [
            ClusterEventWithHint(
                ClusterEvent(
                    EventResource.POD,
                    ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE,
                ),
                self.is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint(
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                self.is_schedulable_after_node_change,
            ),
        ]

    def is_schedulable_after_pod_change(
        self, pod: PodInfo, old: PodInfo | None, new: PodInfo | None
    ) -> QueueingHint:
        """plugin.go, isSchedulableAfterPodChange: the rejected pod's own
        labels changed; or a pod on a node (or nominated) was added matching
        all its affinity terms, relabelled into its affinity or out of its
        anti-affinity, or deleted matching its anti-affinity (or the deleted
        pod's anti-affinity matched it). Terms match without namespace
        labels, as upstream's podMatchesAllAffinityTerms."""
        if old is not None and new is not None and new.uid == pod.uid:
            return QueueingHint.QUEUE
        for other in (new, old):
            if (
                other is not None
                and not other.proto.node_name
                and not (other.proto.nominated_node_name)
            ):
                return QueueingHint.QUEUE_SKIP
        terms = parsed_terms(pod)
        affinity, anti = terms.required_affinity, terms.required_anti_affinity
        if old is not None and new is not None:
            if not pod_matches_all(affinity, old.proto) and pod_matches_all(affinity, new.proto):
                return QueueingHint.QUEUE
            if pod_matches_all(anti, old.proto) and not pod_matches_all(anti, new.proto):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        if new is not None:
            return (
                QueueingHint.QUEUE
                if pod_matches_all(affinity, new.proto)
                else (QueueingHint.QUEUE_SKIP)
            )
        assert old is not None
        if pod_matches_all(anti, old.proto):
            return QueueingHint.QUEUE
        if pod_matches_all(parsed_terms(old).required_anti_affinity, pod.proto):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(
        self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo
    ) -> QueueingHint:
        """plugin.go, isSchedulableAfterNodeChange: a node that gains an
        affinity term's topology key or moves to another domain of it; any
        node added, or one that loses an anti-affinity term's topology key or
        moves to another domain of it, when the pod has anti-affinity."""
        terms = parsed_terms(pod)
        labels = new.node.labels
        for term in terms.required_affinity:
            key = term.topology_key
            if old is None:
                if key in labels:
                    return QueueingHint.QUEUE
                continue
            before = old.node.labels
            if key in labels and (key not in before or before[key] != labels[key]):
                return QueueingHint.QUEUE
        for term in terms.required_anti_affinity:
            if old is None:
                return QueueingHint.QUEUE
            key = term.topology_key
            before = old.node.labels
            if key in before and (key not in labels or before[key] != labels[key]):
                return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        return (NAMESPACES,)

    # -- namespaces -----------------------------------------------------------

    def _snapshot(self) -> Snapshot | None:
        handle = self._handle
        if handle is None:
            return None
        try:
            return handle.snapshot
        except RuntimeError:
            return None

    @staticmethod
    def _namespace_labels(snap: Snapshot | None, namespace: str) -> dict[str, str]:
        """GetNamespaceLabelsSnapshot: the namespace's labels, none when the
        snapshot does not hold it."""
        obj = None if snap is None else snap.object("", "namespaces", "", namespace)
        if obj is None:
            log.debug("namespace %s not in the snapshot, assuming no labels", namespace)
            return {}
        return dict(obj.labels)

    @staticmethod
    def _merge_namespaces(snap: Snapshot | None, term: AffinityTerm) -> AffinityTerm:
        """plugin.go, mergeAffinityTermNamespacesIfNotEmpty: unless the
        namespace selector is the empty (match-everything) one, the names of
        the namespaces it selects join the term's namespaces. Upstream's
        function gets the term by value, so the selector itself stays as it
        was (only the shared namespace set changes); so here."""
        sel = term.namespace_selector
        if sel.empty or sel.nothing or snap is None:
            return term
        names = frozenset(
            name
            for (_, name), obj in snap.objects("", "namespaces").items()
            if sel.matches(obj.labels)
        )
        return term.with_namespaces(names) if names else term

    def _required_terms(
        self, snap: Snapshot | None, pod: PodInfo
    ) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]]:
        """The incoming pod's required affinity and anti-affinity terms,
        namespace selectors merged."""
        terms = parsed_terms(pod)
        return (
            tuple(self._merge_namespaces(snap, t) for t in terms.required_affinity),
            tuple(self._merge_namespaces(snap, t) for t in terms.required_anti_affinity),
        )

    # -- PreFilter ------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """filtering.go, PreFilter: the existing pods' required anti-affinity
        terms the incoming pod matches, counted per topology pair of their
        nodes (getExistingAntiAffinityCounts); the incoming pod's required
        affinity (pods matching all terms) and anti-affinity (per term)
        counted the same way over every pod of the snapshot
        (getIncomingAffinityAntiAffinityCounts). Skip when there is nothing
        to check."""
        terms = parsed_terms(pod)
        if terms.errors:
            return None, Status.unresolvable("parsing pod: " + _aggregate(terms.errors))
        snap = nodes.snapshot
        index = affinity_index(snap)
        if not index.required_anti and not (
            terms.required_affinity or terms.required_anti_affinity
        ):
            # The Skip below without the work: no existing pod has a required
            # anti-affinity term and the pod has no required terms.
            return None, Status.skip()
        affinity, anti = self._required_terms(snap, pod)
        ns_labels = self._namespace_labels(snap, pod.namespace)
        incoming = pod.proto
        inc_ns, inc_labels = incoming.namespace, dict(incoming.labels)

        sums: dict[str, CodeSums] = {which: {} for which in _WHICH}
        for t, slots in index.required_anti.items():
            if t.matches_parts(inc_ns, inc_labels, ns_labels):
                _sum_slots(snap, t.topology_key, slots, sums["existing"])
        if affinity or anti:
            _count_incoming(index, snap, affinity, anti, sums)
        by_code = {which: _by_code(sums[which]) for which in _WHICH}
        if not by_code["existing"] and not affinity and not anti:
            return None, Status.skip()
        s = PreFilterState(
            affinity_keys=[t.topology_key for t in affinity],
            anti_affinity_keys=[t.topology_key for t in anti],
            self_match=pod_matches_all(affinity, incoming),
            namespace_labels=ns_labels,
            by_code=by_code,
        )
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, SUCCESS

    # -- PreFilterExtensions --------------------------------------------------

    def add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """filtering.go, AddPod: ``pod_to_add`` counts on ``node``."""
        return self._update_with_pod(state, pod, pod_to_add, node, 1)

    def remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """filtering.go, RemovePod: ``pod_to_remove`` no longer counts on ``node``."""
        return self._update_with_pod(state, pod, pod_to_remove, node, -1)

    def _update_with_pod(
        self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, change: int
    ) -> Status:
        """filtering.go, preFilterState.updateWithPod: the other pod's
        required anti-affinity terms the incoming pod matches (with its
        namespace's labels as PreFilter saw them), the incoming pod's
        affinity terms when the other pod matches them all, and its
        anti-affinity terms the other pod matches, each by ``change`` on the
        node's topology pairs."""
        s = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return _NOT_FOUND
        snap = self._snapshot()
        if snap is None and isinstance(node.owner, Snapshot):
            snap = node.owner
        affinity, anti = self._required_terms(snap, pod)
        incoming, proto = pod.proto, other.proto
        inc_ns, inc_labels = incoming.namespace, dict(incoming.labels)
        labels = node.node.labels
        existing = _updated(
            s.existing_anti_affinity,
            (
                t.topology_key
                for t in parsed_terms(other).required_anti_affinity
                if t.matches_parts(inc_ns, inc_labels, s.namespace_labels)
            ),
            labels,
            change,
        )
        # The incoming pod's terms have their namespace selectors merged, so
        # the other pod's namespace labels are not needed (upstream passes nil).
        matched = pod_matches_all(affinity, proto)
        affinity_counts = _updated(
            s.affinity, (t.topology_key for t in affinity if matched), labels, change
        )
        o_ns, o_labels = proto.namespace, dict(proto.labels)
        anti_counts = _updated(
            s.anti_affinity,
            (t.topology_key for t in anti if t.matches_parts(o_ns, o_labels, None)),
            labels,
            change,
        )
        if (
            existing is not s.existing_anti_affinity
            or affinity_counts is not s.affinity
            or anti_counts is not s.anti_affinity
        ):
            state.write(
                PRE_FILTER_STATE_KEY,
                PreFilterState(
                    existing,
                    affinity_counts,
                    anti_counts,
                    s.affinity_keys,
                    s.anti_affinity_keys,
                    s.self_match,
                    s.namespace_labels,
                ),
            )
        return SUCCESS

    # -- Filter ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """filtering.go, Filter: the pod's affinity (UnschedulableAndUnresolvable),
        then its anti-affinity, then the existing pods' anti-affinity (both
        Unschedulable). Reads only the node's labels, so it works on a
        NodeInfo outside the snapshot (a clone for a what-if) as well."""
        s = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return _NOT_FOUND
        verdict = _verdict(s, node.node.labels)
        return SUCCESS if verdict == _PASS else _REJECTIONS[verdict]

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> NodeVerdicts:
        """Filter over a batch: per topology key to check, one numpy lookup
        over the snapshot's label column of the key (framework/label_index.py)
        rather than one call per node."""
        s = state.get(PRE_FILTER_STATE_KEY)
        n = len(nodes)
        if s is None:
            return NodeVerdicts.uniform(n, _NOT_FOUND)
        columns: dict[str, NodeLabels] = {}

        def labels(key: str) -> NodeLabels:
            column = columns.get(key)
            if column is None:
                column = columns[key] = nodes.labels(key)
            return column

        # Per topology key, each node's first failed check of the pod's
        # anti-affinity and the existing pods' anti-affinity (one lookup per
        # key); over several keys the earliest check wins (the lowest code).
        existing_keys = s.keys("existing")
        anti_keys = s.keys("anti")
        anti_checked = [k for k in dict.fromkeys(s.anti_affinity_keys) if k in anti_keys]
        verdicts: VerdictArray | None = None
        for key in dict.fromkeys([*anti_checked, *existing_keys]):
            got = s.verdicts(labels(key), key in anti_checked, key in existing_keys)
            verdicts = got if verdicts is None else np.minimum(verdicts, got)
        if verdicts is None:
            verdicts = np.full(n, _NONE, dtype=np.int32)
        if s.affinity_keys:
            has_keys = np.ones(n, dtype=np.bool_)
            pods_exist = np.ones(n, dtype=np.bool_)
            for key in s.affinity_keys:
                column = labels(key)
                has_keys &= column.present
                pods_exist &= s.hits("affinity", column)
            # satisfyPodAffinity's first pod of a group.
            if not s.keys("affinity") and s.self_match:
                pods_exist[:] = True
            verdicts[~(has_keys & pods_exist)] = _AFFINITY
        # How many of each rejection, then each node's index among the
        # rejections that occur, in upstream's order, by one lookup (-1
        # where the node passes).
        used = np.flatnonzero(np.bincount(verdicts, minlength=_NONE + 1)[:_NONE])
        if not len(used):
            return NodeVerdicts.all_pass(n)
        table = np.full(_NONE + 1, -1, dtype=np.int32)
        table[used] = np.arange(len(used), dtype=np.int32)
        return NodeVerdicts(table[verdicts], [_REJECTIONS[int(k)] for k in used.tolist()])

    # -- PreScore -------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> Status:
        """scoring.go, PreScore: over every node of the snapshot (not only
        the feasible ones), each existing pod adds to the score of its
        topology pairs: the incoming pod's preferred affinity (+weight) and
        anti-affinity (-weight) terms it matches; the existing pod's required
        affinity terms the incoming pod matches (+hardPodAffinityWeight) and
        its preferred terms (+/-weight). With ignorePreferredTermsOfExistingPods
        a pod without preferred terms of its own skips scoring altogether
        (existing pods' terms still count for a pod that has some, as
        upstream's processExistingPod does). Skip when nothing was counted."""
        proto = pod.proto
        has_constraints = False
        if proto.HasField("affinity"):
            a = proto.affinity
            has_constraints = bool(
                (a.HasField("pod_affinity") and a.pod_affinity.preferred)
                or (a.HasField("pod_anti_affinity") and a.pod_anti_affinity.preferred)
            )
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status.skip()
        terms = parsed_terms(pod)
        if terms.errors:
            return Status.error("failed to parse pod: " + _aggregate(terms.errors))
        snap = nodes.snapshot
        index = affinity_index(snap)
        if (
            not has_constraints
            and not index.weighted
            and not (self.hard_pod_affinity_weight > 0 and index.hard_affinity)
        ):
            # The Skip below without the work: nothing can be counted.
            return Status.skip()
        score: Counts = {}
        counted = False
        if has_constraints:
            # Every pod: the incoming pod's preferred terms it matches, as
            # (topology key, signed weight), decided once per signature.
            weighted = [(w, self._merge_namespaces(snap, t)) for w, t in terms.preferred_affinity]
            weighted += [
                (-w, self._merge_namespaces(snap, t)) for w, t in terms.preferred_anti_affinity
            ]
            for sig, slots in index.by_signature.items():
                o_ns, o_labels = sig[0], index.labels[sig]
                for w, t in weighted:
                    if t.matches_parts(o_ns, o_labels, None):
                        counted |= _add_slots(score, snap, t.topology_key, slots, w)
        # The existing pods' own terms (only pods with affinity have any).
        ns_labels = self._namespace_labels(snap, pod.namespace)
        inc_ns, inc_labels = proto.namespace, dict(proto.labels)
        hard = self.hard_pod_affinity_weight
        if hard > 0:
            for t, slots in index.hard_affinity.items():
                if t.matches_parts(inc_ns, inc_labels, ns_labels):
                    counted |= _add_slots(score, snap, t.topology_key, slots, hard)
        for (w, t), slots in index.weighted.items():
            if t.matches_parts(inc_ns, inc_labels, ns_labels):
                counted |= _add_slots(score, snap, t.topology_key, slots, w)
        if not counted:
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(score))
        return SUCCESS

    # -- Score ----------------------------------------------------------------

    def _pre_score_state(self, state: CycleState) -> PreScoreState:
        s = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            raise RuntimeError(
                f'failed to read "{PRE_SCORE_STATE_KEY.name}" from cycleState: not found'
            )
        return s

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """scoring.go, Score: the sum of the scores of the node's topology pairs."""
        return _node_score(self._pre_score_state(state).topology_score, node.node.labels)

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: NodeBatch) -> ScoreArray:
        topology = self._pre_score_state(state).topology_score
        n = len(nodes)
        scores = np.zeros(n, dtype=np.int64)
        if not topology:
            return scores
        for key, by_value in topology.items():
            # Each value's score by its code in the key's label column; a
            # node without the key (ABSENT, -1) reads the extra last entry, 0.
            column = nodes.labels(key)
            table = np.zeros(len(column.column.values) + 1, dtype=np.int64)
            for value, v_score in by_value.items():
                code = column.column.code(value)
                if code >= 0:
                    table[code] = v_score
            scores += table[column.codes]
        return scores

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch, scores: ScoreArray
    ) -> Status:
        """scoring.go, NormalizeScore: min-max scaled to 0..100, truncated;
        all 0 when every node has the same score (negative scores too)."""
        s = state.get(PRE_SCORE_STATE_KEY)
        if s is None or not s.topology_score or len(scores) == 0:
            return SUCCESS
        lo = int(scores.min())
        diff = int(scores.max()) - lo
        if diff > 0:
            scaled = float(MAX_NODE_SCORE) * ((scores - lo).astype(np.float64) / float(diff))
            scores[:] = scaled.astype(np.int64)
        else:
            scores[:] = 0
        return SUCCESS


def _count_incoming(
    index: AffinityIndex,
    snap: Snapshot,
    affinity: tuple[AffinityTerm, ...],
    anti: tuple[AffinityTerm, ...],
    sums: dict[str, CodeSums],
) -> None:
    """getIncomingAffinityAntiAffinityCounts over the index: per group of
    pods sharing namespace and labels, whether they match all the affinity
    terms (then every term's key counts them, appendWithAffinityTerms) and
    which anti-affinity terms they match; the incoming pod's terms have their
    namespace selectors merged, so no namespace labels are read."""
    affinity_keys = [t.topology_key for t in affinity]
    for sig, slots in index.by_signature.items():
        o_ns, o_labels = sig[0], index.labels[sig]
        if affinity and all(t.matches_parts(o_ns, o_labels, None) for t in affinity):
            for key in affinity_keys:
                _sum_slots(snap, key, slots, sums["affinity"])
        for t in anti:
            if t.matches_parts(o_ns, o_labels, None):
                _sum_slots(snap, t.topology_key, slots, sums["anti"])


def _aggregate(errors: tuple[str, ...]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message as it is, several
    in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


# A table over a label column's codes (one entry per value, then the ABSENT
# one), with what it is valid for: the column, its values list (a
# compaction replaces it) and that list's length (a new value lengthens it).
_Table = tuple[LabelColumn, list[str], int, npt.NDArray[Any]]


def _valid(entry: _Table | None, column: LabelColumn) -> bool:
    return (
        entry is not None
        and entry[0] is column
        and entry[1] is column.values
        and entry[2] == len(column.values)
    )


def _node_score(topology: Counts, labels: Mapping[str, str]) -> int:
    total = 0
    for key, by_value in topology.items():
        v = labels.get(key)
        if v is not None:
            total += by_value.get(v, 0)
    return total


def _verdict(s: PreFilterState, labels: Mapping[str, str]) -> int:
    """Filter's checks in upstream's order: _AFFINITY, _ANTI, _EXISTING, or
    _PASS."""
    if not _satisfy_pod_affinity(s, labels):
        return _AFFINITY
    if not _satisfy_pod_anti_affinity(s, labels):
        return _ANTI
    if not _satisfy_existing_pods_anti_affinity(s, labels):
        return _EXISTING
    return _PASS


def _satisfy_pod_affinity(s: PreFilterState, labels: Mapping[str, str]) -> bool:
    """filtering.go, satisfyPodAffinity: every affinity term's topology pair
    of the node has a matching pod; a node without a term's topology key
    fails. When no pod anywhere matches and the pod matches its own terms,
    any node with the keys passes (the first pod of a group)."""
    pods_exist = True
    for key in s.affinity_keys:
        value = labels.get(key)
        if value is None:
            return False
        if s.affinity.get(key, {}).get(value, 0) <= 0:
            pods_exist = False
    if not pods_exist:
        return not _has_counts(s.affinity) and s.self_match
    return True


def _satisfy_pod_anti_affinity(s: PreFilterState, labels: Mapping[str, str]) -> bool:
    """filtering.go, satisfyPodAntiAffinity: no anti-affinity term's
    topology pair of the node has a matching pod."""
    if not _has_counts(s.anti_affinity):
        return True
    for key in s.anti_affinity_keys:
        value = labels.get(key)
        if value is not None and s.anti_affinity.get(key, {}).get(value, 0) > 0:
            return False
    return True


def _satisfy_existing_pods_anti_affinity(s: PreFilterState, labels: Mapping[str, str]) -> bool:
    """filtering.go, satisfyExistingPodsAntiAffinity: no topology pair of
    the node is counted by an existing pod's anti-affinity term that the
    incoming pod matches."""
    for key, by_value in s.existing_anti_affinity.items():
        value = labels.get(key)
        if value is not None and by_value.get(value, 0) > 0:
            return False
    return True
