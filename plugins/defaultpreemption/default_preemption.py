"""DefaultPreemption: when a pod fits no node, find lower-priority pods whose
eviction would make room, and nominate the node.

Port of kube-scheduler v1.36.3's PostFilter plugin
(pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go) and
the evaluator it drives (pkg/scheduler/framework/preemption/preemption.go,
Evaluator.Preempt, findCandidates, DryRunPreemption, SelectCandidate,
pickOneNodeForPreemption). Each function names the upstream one it follows.

The server holds no credentials, so step 5 of Preempt, actuation
(preemption/executor.go), is the caller's: the result carries the victims to
evict, in order, and the lower-priority pods nominated to the chosen node
whose nomination the caller clears (getLowerPriorityNominatedPods), and the
pod's nominated node (PostFilterResponse.victims, clear_nomination_pod_uids,
nominated_node_name). Like upstream's asynchronous preemption (on by default
in v1.36), the plugin answers Success as soon as it has chosen; when every
victim is already terminating there is nothing to clear
(prepareCandidateAsync returns before clearing).

A pod's start time (MoreImportantPod, the latest-start-time criterion) is
status.startTime (``Pod.start_unix_micros``); a pod without one counts as
started now (util.GetPodStartTime). "Terminating by preemption"
(podTerminatingByPreemption) is ``Pod.terminating`` with
``Pod.preempted_by_scheduler`` (the DisruptionTarget condition the caller
sets on its victims).

HTTP extenders are the caller's too (the server has none): a caller whose
extenders process preemption asks for every candidate
(``CycleState.preemption_candidates``); the plugin then stops after the dry
run and answers them all, none selected, and the caller runs its extenders
and selects among those they keep with the same criteria
(berth.framework.preemption, berth.shim.preemption).

Not ported: workload-aware and topology-aware
pod group preemption (alpha gates, off), PreEnqueue of pods whose async
preemption is still running (the caller's queue knows that, not a stateless
server), and the preemption metrics (the caller's).
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from berth.framework.cycle_state import CycleState
from berth.framework.goquote import go_quote
from berth.framework.interfaces import PostFilterPlugin, PostFilterResult
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ObjectKind
from berth.framework.preemption import (
    Candidate,
    RankedCandidate,
    VictimKey,
    pick_one_node,
    start_time,
)
from berth.framework.snapshot import Snapshot
from berth.framework.status import SUCCESS, Code, Status, fit_error_message
from berth.plugins.defaultpreemption.args import DefaultPreemptionArgs
from berth.plugins.defaultpreemption.pdb import PDB_KIND, PodDisruptionBudget, pdbs_of

if TYPE_CHECKING:
    from berth.framework.handle import Handle

__all__ = [
    "ERR_NO_VICTIMS",
    "MSG_NOT_HELPFUL",
    "NAME",
    "Candidate",
    "DefaultPreemption",
    "filter_pods_with_pdb_violation",
    "more_important_key",
    "pick_one_node_for_preemption",
    "pod_start_time",
]

log = logging.getLogger(__name__)

NAME: Final = "DefaultPreemption"

# SelectVictimsOnNode's status when the node has no lower-priority pod.
ERR_NO_VICTIMS: Final = "No preemption victims found for incoming pod"
_NO_VICTIMS: Final = Status.unresolvable(ERR_NO_VICTIMS)
# Preempt: the status of the nodes preemption did not try.
MSG_NOT_HELPFUL: Final = "Preemption is not helpful for scheduling"

_ABSENT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


def _terminating_by_preemption(pod: PodInfo) -> bool:
    """podTerminatingByPreemption: being deleted, and a DisruptionTarget
    condition with reason PreemptionByScheduler says a preemption did it."""
    return pod.proto.terminating and pod.proto.preempted_by_scheduler


def _none_lower(node: NodeInfo, priority: int) -> bool:
    """No pod on ``node`` has a priority below ``priority``."""
    lowest = node.lowest_priority
    return lowest is None or lowest >= priority


def pod_start_time(pod: PodInfo) -> float:
    """util.GetPodStartTime: status.startTime in microseconds; a pod that
    has not started (0) counts as started now, later than every known time."""
    return start_time(pod.proto.start_unix_micros)


def more_important_key(pod: PodInfo) -> tuple[int, float]:
    """util.MoreImportantPod as a sort key: higher priority first, then the
    earlier start."""
    return (-pod.priority, pod_start_time(pod))


def filter_pods_with_pdb_violation(
    pods: Sequence[PodInfo], pdbs: Sequence[PodDisruptionBudget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """default_preemption.go, filterPodsWithPDBViolation: (violating,
    non-violating), each in the input order. Every PDB covering a pod spends
    one of its allowed disruptions, unless the pod is already in its
    disruptedPods; a pod that drives a budget below zero violates it."""
    allowed = [p.disruptions_allowed for p in pdbs]
    violating: list[PodInfo] = []
    non_violating: list[PodInfo] = []
    for pod in pods:
        violated = False
        labels = pod.proto.labels
        # A pod with no labels matches no PDB.
        if labels:
            for i, pdb in enumerate(pdbs):
                if not pdb.selects(pod.namespace, labels):
                    continue
                if pod.name in pdb.disrupted_pods:
                    # The API server has processed its eviction already.
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


def pick_one_node_for_preemption(candidates: Sequence[Candidate]) -> str:
    """preemption.go, pickOneNodeForPreemption with the default criteria
    (berth.framework.preemption.pick_one_node) over the dry run's
    candidates."""
    return pick_one_node([ranked(c) for c in candidates])


def ranked(candidate: Candidate) -> RankedCandidate:
    """The candidate as the selection criteria read it."""
    return RankedCandidate(
        candidate.name,
        candidate.num_pdb_violations,
        [VictimKey(v.priority, pod_start_time(v)) for v in candidate.victims],
    )


def aggregate_errors(messages: Sequence[str]) -> str:
    """apimachinery utilerrors.NewAggregate(...).Error(): one error as it
    is; several deduplicated, joined with ", " in brackets."""
    if not messages:
        return ""
    if len(messages) == 1:
        return messages[0]
    seen = list(dict.fromkeys(messages))
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


class DefaultPreemption(PostFilterPlugin[DefaultPreemptionArgs]):
    """The DefaultPreemption plugin (upstream's defaultpreemption.DefaultPreemption
    with the preemption.Evaluator it builds)."""

    name: ClassVar[str] = NAME
    Args: ClassVar[type[Any] | None] = DefaultPreemptionArgs

    def __init__(
        self, args: DefaultPreemptionArgs | None = None, handle: Handle | None = None
    ) -> None:
        dp_args = DefaultPreemptionArgs() if args is None else args
        # New validates (ValidateDefaultPreemptionArgs).
        dp_args.validate()
        super().__init__(dp_args, handle)
        self.min_candidate_nodes_percentage = dp_args.min_candidate_nodes_percentage
        self.min_candidate_nodes_absolute = dp_args.min_candidate_nodes_absolute
        # getOffsetRand: where the dry run starts among the potential nodes;
        # replaceable so tests are deterministic, as upstream's.
        self.offset_rand: Callable[[int], int] = random.randrange

    @classmethod
    def reads(cls, args: Any) -> tuple[ObjectKind, ...]:
        """NewEvaluator: the PodDisruptionBudget lister."""
        return (PDB_KIND,)

    # -- PostFilter -------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """default_preemption.go, PostFilter: Evaluator.Preempt, its message
        prefixed with "preemption: "."""
        result, st = self.preempt(state, pod, rejected)
        if st.message:
            return result, Status(st.code, (f"preemption: {st.message}",))
        return result, st

    def preempt(
        self, state: CycleState, pod: PodInfo, rejected: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """preemption.go, Evaluator.Preempt. ``rejected`` is the cycle's
        Filter statuses by node; a node it does not name counts as
        UnschedulableAndUnresolvable (NewDefaultNodeToStatus). Returns None
        with Error or Unschedulable to leave the pod's nomination as it is, a
        result without a node with Unschedulable to clear it, and a result
        with the node and the victims with Success."""
        snapshot = self.handle.snapshot
        # 1) Is the pod eligible to preempt others?
        nominated_status = rejected.get(pod.proto.nominated_node_name, _ABSENT)
        ok, msg = self.pod_eligible_to_preempt_others(pod, nominated_status)
        if not ok:
            log.debug("pod %s is not eligible for preemption: %s", pod.key, msg)
            return None, Status.unschedulable(msg)

        # 2) Find all preemption candidates.
        num_nodes = len(snapshot.nodes)
        candidates, statuses, err = self.find_candidates(state, pod, rejected, snapshot)
        if err and not candidates:
            return None, Status.error(err)
        if not candidates:
            # A FitError over the dry run's statuses; nodes it did not try
            # are "not helpful".
            log.info("pod %s: no preemption candidate is found; preemption is not helpful", pod.key)
            msg = fit_error_message(
                num_nodes, statuses, absent_status=Status.unresolvable(MSG_NOT_HELPFUL)
            )
            return PostFilterResult(""), Status.unschedulable(msg)

        # 3) Extenders are the caller's. When it has some that process
        # preemption it asks for every candidate and selects itself, after
        # them, with the default criteria; a subclass that selects its own
        # way keeps selecting here, and the extenders see its choice.
        if state.preemption_candidates and self._selects_by_default():
            listed = tuple(
                Candidate(
                    c.name,
                    c.victims,
                    c.num_pdb_violations,
                    self._nominations_to_clear(pod, c, snapshot),
                )
                for c in candidates
            )
            log.info(
                "pod %s: %d preemption candidate(s) for the caller's extenders: %s",
                pod.key,
                len(listed),
                ", ".join(c.name for c in listed),
            )
            return PostFilterResult(candidates=listed), SUCCESS

        # 4) Find the best candidate.
        best = self.select_candidate(candidates)
        if best is None or not best.name:
            return None, Status.unschedulable("no candidate node for preemption")

        # 5) Actuation is the caller's (executor.go): the victims, and the
        # lower-priority nominations on the node to clear.
        clear = self._nominations_to_clear(pod, best, snapshot)
        log.info(
            "pod %s: preemption nominates node %s, evicting %s",
            pod.key,
            best.name,
            ", ".join(v.key for v in best.victims),
        )
        return (
            PostFilterResult(
                best.name,
                victims=best.victims,
                clear_nomination_pod_uids=clear,
                num_pdb_violations=best.num_pdb_violations,
            ),
            SUCCESS,
        )

    def _nominations_to_clear(
        self, pod: PodInfo, candidate: Candidate, snapshot: Snapshot
    ) -> tuple[str, ...]:
        """executor.go prepareCandidateAsync's getLowerPriorityNominatedPods:
        the pods nominated to the candidate's node with a lower priority,
        unless every victim is already terminating (it returns before)."""
        if all(v.proto.terminating for v in candidate.victims):
            return ()
        return tuple(
            p.uid
            for p in snapshot.nominated_pods_for_node(candidate.name).values()
            if p.priority < pod.priority
        )

    def _selects_by_default(self) -> bool:
        """Does this plugin select with upstream's default criteria (no
        SelectCandidate or candidate order of its own)?"""
        return type(self).select_candidate is DefaultPreemption.select_candidate

    # -- eligibility ------------------------------------------------------------------

    def pod_eligible_to_preempt_others(
        self, pod: PodInfo, nominated_node_status: Status
    ) -> tuple[bool, str]:
        """default_preemption.go, PodEligibleToPreemptOthers: not with
        preemptionPolicy Never; not while a lower-priority pod on its
        nominated node is terminating (an earlier preemption's victim still
        going), unless Filter found that node UnschedulableAndUnresolvable."""
        proto = pod.proto
        if proto.preemption_policy == "Never":
            return False, "not eligible due to preemptionPolicy=Never."
        nominated = proto.nominated_node_name
        if nominated:
            if nominated_node_status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            ni = self.handle.snapshot.nodes.get(nominated)
            if ni is not None:
                for p in ni.pods.values():
                    if self.is_preemption_allowed(ni, p, pod) and _terminating_by_preemption(p):
                        return False, "not eligible due to a terminating pod on the nominated node."
        return True, ""

    def is_preemption_allowed(self, node: NodeInfo, victim: PodInfo, preemptor: PodInfo) -> bool:
        """isPreemptionAllowed: the victim's priority is lower (IsEligiblePod
        is upstream's default, always true)."""
        return victim.priority < preemptor.priority

    # -- candidates ---------------------------------------------------------------------

    def find_candidates(
        self,
        state: CycleState,
        pod: PodInfo,
        rejected: Mapping[str, Status],
        snapshot: Snapshot,
    ) -> tuple[list[Candidate], dict[str, Status], str]:
        """preemption.go, findCandidates: the dry run over the nodes Filter
        found Unschedulable (nodesWherePreemptionMightHelp: not
        UnschedulableAndUnresolvable), from a random offset. Returns the
        candidates, the statuses of the nodes that are not, and the
        aggregated error message ("" for none)."""
        if not snapshot.nodes:
            return [], {}, "no nodes available"
        # The member and the lookup read once: per node of a full cluster, an
        # enum member read off its class is a metaclass call.
        unschedulable, node_of = Code.UNSCHEDULABLE, snapshot.nodes.get
        potential = [
            ni
            for name, st in rejected.items()
            if st.code is unschedulable and (ni := node_of(name)) is not None
        ]
        if not potential:
            log.debug("pod %s: preemption will not help schedule it on any node", pod.key)
            return [], {}, ""
        pdbs = pdbs_of(snapshot)
        offset, num = self.get_offset_and_num_candidates(len(potential))
        return self.dry_run_preemption(state, pod, potential, pdbs, offset, num)

    def calculate_num_candidates(self, num_nodes: int) -> int:
        """default_preemption.go, calculateNumCandidates."""
        n = num_nodes * self.min_candidate_nodes_percentage // 100
        n = max(n, self.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """default_preemption.go, GetOffsetAndNumCandidates."""
        return self.offset_rand(num_nodes), self.calculate_num_candidates(num_nodes)

    def dry_run_preemption(
        self,
        state: CycleState,
        pod: PodInfo,
        potential_nodes: Sequence[NodeInfo],
        pdbs: Sequence[PodDisruptionBudget],
        offset: int,
        num_candidates: int,
    ) -> tuple[list[Candidate], dict[str, Status], str]:
        """preemption.go, DryRunPreemption with one worker: from ``offset``
        (wrapping), SelectVictimsOnNode on a copy of each node and of the
        cycle state, until a non-violating candidate has been found and there
        are ``num_candidates`` in all (each kind capped at that number).
        Non-violating candidates come first."""
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        statuses: dict[str, Status] = {}
        errors: list[str] = []
        n = len(potential_nodes)
        # select_victims_on_node's first answer, ErrNoVictims when no pod on
        # the node may be preempted, found without copying the node and the
        # state (unless a subclass selects victims its own way). Under
        # upstream's rule (a lower priority) that is one comparison with the
        # node's lowest priority, so a full cluster of pods no lower than the
        # preemptor costs a comparison per node, not one per pod; a subclass
        # with its own rule is asked about each pod.
        cls = type(self)
        own_selection = cls.select_victims_on_node is not DefaultPreemption.select_victims_on_node
        by_priority = cls.is_preemption_allowed is DefaultPreemption.is_preemption_allowed
        priority = pod.priority
        offset %= max(n, 1)
        for ni in itertools.chain(potential_nodes[offset:], potential_nodes[:offset]):
            if not own_selection and (
                _none_lower(ni, priority)
                if by_priority
                else not any(self.is_preemption_allowed(ni, p, pod) for p in ni.pods.values())
            ):
                statuses[ni.node.name] = _NO_VICTIMS
                continue
            victims, num_violations, st = self.select_victims_on_node(
                state.clone(), pod, ni.clone(), pdbs
            )
            if st.is_success and victims:
                kept = non_violating if num_violations == 0 else violating
                if len(kept) < num_candidates:
                    kept.append(Candidate(ni.name, tuple(victims), num_violations))
                if non_violating and len(non_violating) + len(violating) >= num_candidates:
                    break
                continue
            if st.is_success:
                st = Status.error(f"expected at least one victim pod on node {go_quote(ni.name)}")
            if st.code is Code.ERROR:
                errors.append(st.message)
            statuses[ni.name] = st
        return non_violating + violating, statuses, aggregate_errors(errors)

    def select_victims_on_node(
        self,
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        pdbs: Sequence[PodDisruptionBudget],
    ) -> tuple[list[PodInfo], int, Status]:
        """default_preemption.go, SelectVictimsOnNode, on a private copy of
        the node and the state: remove every lower-priority pod (RemovePod
        extensions); if the pod then fits (Filter with nominated pods), add
        them back one by one, most important first, the PDB-violating ones
        before the others, keeping each that still lets the pod fit; the
        rest are the victims, most important first. Returns the victims, how
        many of them violate a PDB, and the status."""
        fw = self.handle.framework

        def remove(p: PodInfo) -> Status:
            node.remove_pod(p.uid)
            return fw.run_pre_filter_extension_remove_pod(state, pod, p, node)

        def add(p: PodInfo) -> Status:
            node.add_pod(p)
            return fw.run_pre_filter_extension_add_pod(state, pod, p, node)

        potential = [p for p in node.pods.values() if self.is_preemption_allowed(node, p, pod)]
        for p in potential:
            st = remove(p)
            if not st.is_success:
                return [], 0, Status.error(st.message)
        # Nothing to remove: the node is as Filter saw it.
        if not potential:
            return [], 0, Status.unresolvable(ERR_NO_VICTIMS)
        # Without every eligible pod it still does not fit: not a candidate
        # (affinity to a victim is not considered, as upstream).
        st = fw.run_filter_with_nominated_pods(state, pod, node)
        if not st.is_success:
            return [], 0, st
        potential.sort(key=more_important_key)
        violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs)
        victims: list[PodInfo] = []

        def reprieve(p: PodInfo) -> tuple[bool, Status]:
            st = add(p)
            if not st.is_success:
                return False, Status.error(st.message)
            fits = fw.run_filter_with_nominated_pods(state, pod, node).is_success
            if not fits:
                st = remove(p)
                if not st.is_success:
                    return False, Status.error(st.message)
                victims.append(p)
                log.debug("pod %s is a potential preemption victim on node %s", p.key, node.name)
            return fits, SUCCESS

        num_violating = 0
        for p in violating:
            fits, st = reprieve(p)
            if not st.is_success:
                return [], 0, st
            if not fits:
                num_violating += 1
        for p in non_violating:
            _, st = reprieve(p)
            if not st.is_success:
                return [], 0, st
        if violating and non_violating:
            # Keep the victims in order of importance.
            victims.sort(key=more_important_key)
        return victims, num_violating, SUCCESS

    def select_candidate(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """preemption.go, SelectCandidate."""
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        name = pick_one_node_for_preemption(candidates)
        for c in candidates:
            if c.name == name:
                return c
        return candidates[0]  # not reached: the name is one of theirs
