"""InterPodAffinity: required and preferred pod affinity and anti-affinity.

Port of pkg/scheduler/framework/plugins/interpodaffinity at v1.36
(filtering.go: PreFilter, Filter; scoring.go: PreScore, Score,
NormalizeScore; plugin.go: New, mergeAffinityTermNamespacesIfNotEmpty,
GetNamespaceLabelsSnapshot). Terms are parsed once per pod (terms.py).

Counts are computed per cycle from the snapshot, as upstream does: PreFilter
walks the nodes' pods with required anti-affinity (NodeInfo.
pods_with_required_anti_affinity) and, when the incoming pod has required
terms, every pod; PreScore walks the pods with affinity (NodeInfo.
pods_with_affinity), or every pod when the incoming pod has preferred terms.
Not done here: upstream's PreFilterExtensions (AddPod/RemovePod, used for
nominated pods and preemption; Berth's runtime has no such extension point),
EnqueueExtensions (the caller's queue) and SignPod.

Namespace labels (for ``namespaceSelector``) come from the core v1
Namespace objects the plugin declares in ``reads``; a namespace the snapshot
does not hold has no labels (upstream logs and assumes an empty set).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
import numpy as np

from plugins.framework.cycle_state import CycleState, StateKey
from plugins.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
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
from plugins.interpodaffinity.args import InterPodAffinityArgs
from plugins.interpodaffinity.terms import (
    AffinityTerm,
    Signature,
    parsed_terms,
    pod_matches_all,
    signature,
)

if TYPE_CHECKING:
    from plugins.framework.handle import Handle

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

# The namespaces a namespaceSelector is resolved against (plugin.go, New:
# the Namespace informer's lister).
NAMESPACES: Final = ObjectKind(
    group="", version="v1", resource="namespaces", kind="Namespace", namespaced=False
)

# topology key -> topology value -> count (upstream's
# topologyToMatchedTermCount keyed by topologyPair, and scoreMap).
Counts = dict[str, dict[str, int]]


class PreFilterState(msgspec.Struct):
    """filtering.go, preFilterState, reduced to what Filter reads: the three
    counts (only positive entries), the topology keys of the incoming pod's
    required affinity and anti-affinity terms, and whether the pod matches
    all of its own affinity terms (the first pod of a group)."""

    existing_anti_affinity: Counts
    affinity: Counts
    anti_affinity: Counts
    affinity_keys: list[str]
    anti_affinity_keys: list[str]
    self_match: bool


class PreScoreState(msgspec.Struct):
    """scoring.go, preScoreState: topology key -> value -> score."""

    topology_score: Counts


PRE_FILTER_STATE_KEY: Final = StateKey("PreFilter" + NAME, PreFilterState)
PRE_SCORE_STATE_KEY: Final = StateKey("PreScore" + NAME, PreScoreState)


def _add(counts: Counts, labels: Mapping[str, str], key: str, value: int) -> bool:
    """topologyToMatchedTermCount.update / scoreMap.processTerm's addition:
    only when the node has the topology key. Returns whether it had."""
    tv = labels.get(key)
    if tv is None:
        return False
    by_value = counts.get(key)
    if by_value is None:
        by_value = counts[key] = {}
    by_value[tv] = by_value.get(tv, 0) + value
    return True


def _has_counts(counts: Counts) -> bool:
    return any(counts.values())


class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
    """The InterPodAffinity plugin (upstream's interpodaffinity.InterPodAffinity)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = InterPodAffinityArgs

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

    def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """GetNamespaceLabelsSnapshot: the namespace's labels, none when the
        snapshot does not hold it."""
        snap = self._snapshot()
        obj = None if snap is None else snap.object("", "namespaces", "", namespace)
        if obj is None:
            log.debug("namespace %s not in the snapshot, assuming no labels", namespace)
            return {}
        return obj.labels

    def _merge_namespaces(self, term: AffinityTerm) -> AffinityTerm:
        """plugin.go, mergeAffinityTermNamespacesIfNotEmpty: unless the
        namespace selector is the empty (match-everything) one, the names of
        the namespaces it selects join the term's namespaces. Upstream's
        function gets the term by value, so the selector itself stays as it
        was (only the shared namespace set changes); so here."""
        sel = term.namespace_selector
        if sel.empty or sel.nothing:
            return term
        snap = self._snapshot()
        if snap is None:
            return term
        names = frozenset(
            name
            for (_, name), obj in snap.objects("", "namespaces").items()
            if sel.matches(obj.labels)
        )
        return term.with_namespaces(names) if names else term

    # -- PreFilter ------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: NodeBatch
    ) -> tuple[PreFilterResult | None, Status]:
        """filtering.go, PreFilter: the existing pods' required anti-affinity
        terms the incoming pod matches, counted per topology pair of their
        nodes; the incoming pod's required affinity (pods matching all terms)
        and anti-affinity (per term) counted the same way over every pod.
        Skip when there is nothing to check."""
        terms = parsed_terms(pod)
        if terms.errors:
            return None, Status.unresolvable("parsing pod: " + _aggregate(terms.errors))
        affinity = tuple(self._merge_namespaces(t) for t in terms.required_affinity)
        anti = tuple(self._merge_namespaces(t) for t in terms.required_anti_affinity)
        ns_labels = self._namespace_labels(pod.namespace)
        incoming = pod.proto
        # The incoming pod's namespace and labels, read once for every term.
        inc_ns, inc_labels = incoming.namespace, dict(incoming.labels)

        existing_anti: Counts = {}
        for ni in nodes:
            with_anti = ni.pods_with_required_anti_affinity
            if not with_anti:
                continue
            labels = ni.node.labels
            for existing in with_anti.values():
                for t in parsed_terms(existing).required_anti_affinity:
                    if t.matches_parts(inc_ns, inc_labels, ns_labels):
                        _add(existing_anti, labels, t.topology_key, 1)

        affinity_counts: Counts = {}
        anti_counts: Counts = {}
        if affinity or anti:
            affinity_keys = tuple(t.topology_key for t in affinity)
            # Signature -> (the affinity keys to count when the pod matches
            # all affinity terms, else (); the keys of the anti-affinity terms
            # it matches).
            decided: dict[Signature, tuple[tuple[str, ...], tuple[str, ...]]] = {}
            for ni in nodes:
                if not ni.pods:
                    continue
                labels = ni.node.labels
                for existing in ni.pods.values():
                    sig = signature(existing)
                    keys = decided.get(sig)
                    if keys is None:
                        o_ns, o_labels = sig[0], dict(sig[1])
                        # podMatchesAllAffinityTerms.
                        matches_all = bool(affinity) and all(
                            t.matches_parts(o_ns, o_labels, None) for t in affinity
                        )
                        keys = decided[sig] = (
                            affinity_keys if matches_all else (),
                            tuple(
                                t.topology_key
                                for t in anti
                                if t.matches_parts(o_ns, o_labels, None)
                            ),
                        )
                    for key in keys[0]:
                        _add(affinity_counts, labels, key, 1)
                    for key in keys[1]:
                        _add(anti_counts, labels, key, 1)

        if not _has_counts(existing_anti) and not affinity and not anti:
            return None, Status.skip()
        state.write(
            PRE_FILTER_STATE_KEY,
            PreFilterState(
                existing_anti_affinity=existing_anti,
                affinity=affinity_counts,
                anti_affinity=anti_counts,
                affinity_keys=[t.topology_key for t in affinity],
                anti_affinity_keys=[t.topology_key for t in anti],
                self_match=pod_matches_all(affinity, incoming),
            ),
        )
        return None, SUCCESS

    # -- Filter ---------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """filtering.go, Filter: the pod's affinity (UnschedulableAndUnresolvable),
        then its anti-affinity, then the existing pods' anti-affinity (both
        Unschedulable)."""
        s = state.get(PRE_FILTER_STATE_KEY)
        if s is None:
            return Status.error(
                f'error reading "{PRE_FILTER_STATE_KEY.name}" from cycleState: not found'
            )
        labels = node.node.labels
        if not _satisfy_pod_affinity(s, labels):
            return _REJECT_AFFINITY
        if not _satisfy_pod_anti_affinity(s, labels):
            return _REJECT_ANTI_AFFINITY
        if not _satisfy_existing_pods_anti_affinity(s, labels):
            return _REJECT_EXISTING
        return SUCCESS

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
        terms = parsed_terms(pod)
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
        if terms.errors:
            return Status.error("failed to parse pod: " + _aggregate(terms.errors))
        snap = self._snapshot()
        all_nodes = nodes if snap is None else snap.all_nodes()
        preferred = tuple((w, self._merge_namespaces(t)) for w, t in terms.preferred_affinity)
        preferred_anti = tuple(
            (w, self._merge_namespaces(t)) for w, t in terms.preferred_anti_affinity
        )
        ns_labels = self._namespace_labels(pod.namespace)
        inc_ns, inc_labels = proto.namespace, dict(proto.labels)
        hard = self.hard_pod_affinity_weight

        score: Counts = {}
        counted = False
        # Signature -> (topology key, weight) of the incoming pod's preferred
        # terms the pod matches.
        decided: dict[Signature, tuple[tuple[str, int], ...]] = {}
        for ni in all_nodes:
            pods = ni.pods if has_constraints else ni.pods_with_affinity
            if not pods:
                continue
            labels = ni.node.labels
            if not labels:
                continue
            for existing in pods.values():
                if has_constraints:
                    sig = signature(existing)
                    weights = decided.get(sig)
                    if weights is None:
                        o_ns, o_labels = sig[0], dict(sig[1])
                        weights = decided[sig] = tuple(
                            [
                                (t.topology_key, w)
                                for w, t in preferred
                                if t.matches_parts(o_ns, o_labels, None)
                            ]
                            + [
                                (t.topology_key, -w)
                                for w, t in preferred_anti
                                if t.matches_parts(o_ns, o_labels, None)
                            ]
                        )
                    for key, w in weights:
                        counted |= _add(score, labels, key, w)
                if not existing.has_pod_affinity:
                    continue
                ex = parsed_terms(existing)
                if not ex.scores_others:
                    continue
                if hard > 0:
                    for t in ex.required_affinity:
                        if t.matches_parts(inc_ns, inc_labels, ns_labels):
                            counted |= _add(score, labels, t.topology_key, hard)
                for w, t in ex.preferred_affinity:
                    if t.matches_parts(inc_ns, inc_labels, ns_labels):
                        counted |= _add(score, labels, t.topology_key, w)
                for w, t in ex.preferred_anti_affinity:
                    if t.matches_parts(inc_ns, inc_labels, ns_labels):
                        counted |= _add(score, labels, t.topology_key, -w)
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
        return np.fromiter(
            (_node_score(topology, ni.node.labels) for ni in nodes),
            dtype=np.int64,
            count=len(nodes),
        )

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


def _aggregate(errors: tuple[str, ...]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message as it is, several
    in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _node_score(topology: Counts, labels: Mapping[str, str]) -> int:
    total = 0
    for key, by_value in topology.items():
        v = labels.get(key)
        if v is not None:
            total += by_value.get(v, 0)
    return total


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
