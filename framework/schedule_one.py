"""One scheduling cycle of a pod over a profile's Framework.

Follows pkg/scheduler/schedule_one.go: schedulePod (filter, score, select a
host), findNodesThatFitPod (PreFilter, the nominated node first, then
Filter), evaluateNominatedNode, findNodesThatPassFilters,
numFeasibleNodesToFind, prioritizeNodes, selectHost, and schedulingCycle's
Reserve and Permit after host selection. A cycle that finds no node answers
with upstream's FitError text (pkg/scheduler/framework/types.go,
FitError.Error). The extension points themselves run in the Framework
(framework/runtime.py); this module only decides which to run and in what
order.

A pod whose status.nominatedNodeName names a node (nominated by an earlier
preemption) is tried there first (evaluateNominatedNode); when it fits, no
other node is evaluated. Given an ``OpportunisticBatch`` (framework/batch.py),
a pod with the same signature as the last one is tried first on the next
node of the last cycle's ranking, the same way.

Deviations from v1.36.3:

- selectHost: among equal top scores Berth picks at random (seeded per
  request when asked); upstream takes the heap's maximum, which depends on the
  order parallel Filter found the nodes, so neither is reproducible.
- With ``explain`` the nominated node is not tried first: an explanation
  evaluates every node.

HTTP extenders run in the caller (the shim), which holds the full objects
they are sent: ``stop_after_filter`` ends the cycle after Filter with the
feasible nodes, and ``resume`` continues it at Score with the nodes the
extenders kept and their scores (schedule_one.go findNodesThatPassExtenders,
prioritizeNodes).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from berth.framework import observe
from berth.framework.batch import OpportunisticBatch, Signature, sign_pod, sorted_other_nodes
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import NominatingMode, ScoreArray
from berth.framework.model import PodInfo
from berth.framework.objects import ObjectWrite
from berth.framework.preemption import Candidate
from berth.framework.runtime import CycleError, Framework, ScoreOutcome, Signal
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import (
    SUCCESS,
    Code,
    Status,
    count_statuses,
    fit_error_message,
    fit_error_message_counted,
)

__all__ = [
    "MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND",
    "MIN_FEASIBLE_NODES_TO_FIND",
    "FilterOutcome",
    "NominatingMode",
    "Resume",
    "ScheduleResult",
    "find_nodes_that_pass_filters",
    "fit_error_message",
    "num_feasible_nodes_to_find",
    "schedule_pod",
    "select_host",
]

log = logging.getLogger(__name__)

# schedule_one.go: minFeasibleNodesToFind, minFeasibleNodesPercentageToFind.
MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """How many feasible nodes a cycle looks for before it stops filtering
    (schedule_one.go, numFeasibleNodesToFind). ``percentage`` 0 is the
    adaptive default: 50% minus 1% per 125 nodes, at least 5%."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = 50 - num_all_nodes // 125
        percentage = max(percentage, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * percentage // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(slots=True)
class ScheduleResult:
    status: Status
    node: str = ""
    evaluated: int = 0
    feasible: int = 0
    next_start_index: int = 0
    rejected: dict[str, Status] = field(default_factory=dict)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pre_filter_status: Status | None = None
    message: str = ""
    scores: ScoreOutcome | None = None
    reserve_status: Status | None = None
    permit_status: Status | None = None
    permit_timeouts: dict[str, float] = field(default_factory=dict)
    post_filter_status: Status | None = None
    # When a PostFilter plugin succeeded: its name, and what it asks the
    # caller to do (a preemption's victims to evict, the lower-priority
    # nominations on its node to clear).
    post_filter_plugin: str = ""
    victims: tuple[PodInfo, ...] = ()
    clear_nomination_pod_uids: tuple[str, ...] = ()
    num_pdb_violations: int = 0
    # Every preemption candidate, unselected, when the caller asked for them
    # (CycleState.preemption_candidates; PostFilterResult.candidates).
    preemption_candidates: tuple[Candidate, ...] = ()
    # ScheduleResult.nominatingInfo: OVERRIDE with an empty name clears the
    # pod's nominated node (clearNominatedNode); NOOP leaves it as it is.
    nominated_node: str = ""
    nominating_mode: NominatingMode = NominatingMode.NOOP
    # Diagnosis.PendingPlugins: plugins that answered Pending.
    pending_plugins: set[str] = field(default_factory=set)
    # What the cycle's plugins ask of pods waiting at Permit, by the point
    # that asked: PostFilter (the pod fits no node); Reserve and Permit (the
    # pod was reserved); the Unreserve after a failed Reserve or a Permit
    # rejection (with what the failing Reserve asked before it failed).
    post_filter_signals: list[Signal] = field(default_factory=list)
    # (plugin, write) the PostFilter plugins asked for, in order (e.g.
    # DynamicResources deallocating a claim).
    post_filter_writes: list[tuple[str, ObjectWrite]] = field(default_factory=list)
    permit_signals: list[Signal] = field(default_factory=list)
    unreserve_signals: list[Signal] = field(default_factory=list)
    # With reserve_and_permit, when Permit answered Success or Wait: the pods
    # the cycle's plugins asked to activate (schedule_one.go,
    # prepareForBindingCycle: podsToActivate after Permit).
    activate_pod_uids: list[str] = field(default_factory=list)
    # With reserve_and_permit, when Permit answered Success or Wait: what
    # RunPreBindPreFlights answered (Success, Skip or Error), and whether
    # every PreBind plugin answered Skip (the caller need not call PreBind).
    pre_bind_pre_flight_status: Status | None = None
    pre_bind_skip: bool = False
    # With stop_after_filter, when the cycle stopped: the nodes that passed
    # Filter, the status of the nodes PreFilter excluded (absent from
    # ``rejected``), and the node count of the snapshot.
    stopped_feasible: tuple[str, ...] | None = None
    absent_status: Status | None = None
    num_all_nodes: int = 0


@dataclass(frozen=True, slots=True)
class Resume:
    """The rest of a cycle stopped after Filter: the nodes the caller's
    extenders kept (at least one) and the scores they add per node."""

    nodes: tuple[str, ...]
    extra_scores: Mapping[str, int] = field(default_factory=dict)
    evaluated: int = 0


# The rejected nodes of one chunk of the filter walk, not yet named: the chunk's
# batch, the positions in it of the rejected nodes and the index of each one's
# Status in ``statuses``.
_RejectedPart = tuple[
    NodeBatch, np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[Any]], list[Status]
]


class FilterOutcome:
    """Result of filtering: feasible candidates and the rejected nodes.

    ``rejected`` (node name to Status, in walk order) is built on first read
    from the parts the walk kept: a pod that is placed, the common case, never
    needs the names of the nodes that rejected it (upstream's Diagnosis is read
    only when no node fits)."""

    __slots__ = ("_parts", "_rejected", "error", "feasible", "processed")

    def __init__(
        self,
        feasible: NodeBatch,
        rejected: dict[str, Status],
        processed: int,
        error: Status | None = None,
        parts: list[_RejectedPart] | None = None,
    ) -> None:
        self.feasible = feasible
        # How many candidates were evaluated (for nextStartNodeIndex).
        self.processed = processed
        # A Filter plugin's Error: the walk stopped at the node that hit it;
        # ``processed`` counts the nodes decided before it.
        self.error = error
        self._rejected = rejected
        self._parts = parts

    @property
    def rejected(self) -> dict[str, Status]:
        parts = self._parts
        if parts:
            self._parts = None
            rejected = self._rejected
            for batch, bad, shown, statuses in parts:
                rejected.update(
                    zip(
                        batch.take(bad).names,
                        map(statuses.__getitem__, shown.tolist()),
                        strict=True,
                    )
                )
        return self._rejected

    def rejected_counts(self) -> list[tuple[Status, int]]:
        """Each distinct Status among the rejected nodes with how many nodes
        it rejected (as ``count_statuses`` of ``rejected``'s values, in no
        particular order). While the names are not built yet, counted from
        the walk's parts by their status indices, without a pass over the
        nodes: a failed cycle over thousands of nodes has a handful."""
        parts = self._parts
        if not parts or self._rejected:
            return count_statuses(self.rejected.values())
        counts: dict[int, list[Any]] = {}
        for _, _, shown, statuses in parts:
            per_index = np.bincount(shown, minlength=len(statuses))
            for k in np.flatnonzero(per_index).tolist():
                st = statuses[k]
                entry = counts.get(id(st))
                if entry is None:
                    counts[id(st)] = [st, int(per_index[k])]
                else:
                    entry[1] += int(per_index[k])
        return [(st, n) for st, n in counts.values()]


def schedule_pod(
    fw: Framework,
    snapshot: Snapshot,
    state: CycleState,
    pod: PodInfo,
    start_index: int = 0,
    reserve_and_permit: bool = False,
    rng: random.Random | None = None,
    explain: bool = False,
    stop_after_filter: bool = False,
    resume: Resume | None = None,
    batch: OpportunisticBatch | None = None,
    cycle: int = 0,
) -> ScheduleResult:
    """schedule_one.go, schedulePod: filter, score, select a host;
    optionally Reserve and Permit (schedulingCycle). ``stop_after_filter``
    and ``resume``: the two halves of a cycle with the caller's extenders
    between them (module docstring). With ``batch``, the profile's
    opportunistic batching state, and ``cycle``, the caller's number for
    this scheduling cycle (consecutive across the caller's profiles), a pod
    like the last one may reuse its ranking."""
    if explain or stop_after_filter or resume is not None:
        # An explanation evaluates every node and leaves the ranking alone;
        # a profile whose caller runs extenders does not batch (upstream's
        # computeBatchablePlugins turns signatures off with extenders).
        batch = None
    fw.handle.bind_snapshot(snapshot)
    # A new sample for the metrics; the request's deadline stays.
    fw.begin_request(fw.deadline)
    # With the caller's extenders the algorithm runs as two calls with the
    # extenders between them, neither of which sees it whole: not observed.
    timer = _AlgorithmTimer(enabled=resume is None and not stop_after_filter)
    try:
        if resume is not None:
            return _resume(fw, snapshot, state, pod, start_index, reserve_and_permit, rng, resume)
        result = _schedule_pod(
            fw,
            snapshot,
            state,
            pod,
            start_index,
            reserve_and_permit,
            rng,
            explain,
            stop_after_filter and not explain,
            batch,
            cycle,
            timer,
        )
        if batch is not None and not result.status.is_success:
            batch.failed(cycle)
        return result
    except CycleError as exc:
        if batch is not None:
            batch.failed(cycle)
        return ScheduleResult(
            exc.status,
            message=exc.status.message,
            next_start_index=start_index,
            nominating_mode=NominatingMode.OVERRIDE,
        )
    finally:
        timer.stop()
        fw.handle.bind_snapshot(None)


class _AlgorithmTimer:
    """scheduler_scheduling_algorithm_duration_seconds for one pod: from the
    start of schedule_pod to Reserve, or to its end when there is no Reserve
    (schedule_one.go schedulingAlgorithm's deferred observation); observed
    once."""

    __slots__ = ("start", "stopped")

    def __init__(self, *, enabled: bool = True) -> None:
        self.start = time.perf_counter()
        self.stopped = not enabled

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            observe.observe_algorithm(time.perf_counter() - self.start)


def _schedule_pod(
    fw: Framework,
    snapshot: Snapshot,
    state: CycleState,
    pod: PodInfo,
    start_index: int,
    reserve_and_permit: bool,
    rng: random.Random | None,
    explain: bool,
    stop_after_filter: bool = False,
    batch: OpportunisticBatch | None = None,
    cycle: int = 0,
    timer: _AlgorithmTimer | None = None,
) -> ScheduleResult:
    if timer is None:
        timer = _AlgorithmTimer(enabled=False)
    # Failures other than a FitError clear the pod's nominated node
    # (schedulingAlgorithm's clearNominatedNode).
    clear = NominatingMode.OVERRIDE
    all_nodes = snapshot.all_nodes()
    num_all = len(all_nodes)
    if num_all == 0:
        # schedulingCycle: ErrNoNodesAvailable is UnschedulableAndUnresolvable.
        st = Status.unresolvable("no nodes available to schedule pods")
        return ScheduleResult(
            st, message=st.message, next_start_index=start_index, nominating_mode=clear
        )

    pf_result, st, restricting = fw.run_pre_filter_with_plugins(state, pod, all_nodes)
    if not st.is_success:
        if not st.is_rejected:
            return ScheduleResult(
                st, message=st.message, next_start_index=start_index, nominating_mode=clear
            )
        # Every node takes the PreFilter rejection (findNodesThatFitPod);
        # the cycle's status is Unschedulable with the FitError text
        # (schedulingCycle). Diagnosis.UnschedulablePlugins: the plugins
        # whose PreFilterResult narrowed the nodes, and the rejecting one.
        result = ScheduleResult(
            Status(Code.UNSCHEDULABLE, st.reasons, st.plugin),
            next_start_index=start_index,
            pre_filter_status=st,
            unschedulable_plugins=restricting | ({st.plugin} if st.plugin else set()),
            # AddPluginStatus: a Pending PreFilter goes to PendingPlugins too.
            pending_plugins={st.plugin} if st.plugin and st.code is Code.PENDING else set(),
        )
        _post_filter(fw, state, pod, result, {n: st for n in all_nodes.names})
        result.message = fit_error_message(num_all, {}, st.message, _post_filter_msg(result))
        result.status = Status(Code.UNSCHEDULABLE, (result.message,), st.plugin)
        return result

    # findNodesThatFitPod: the batch's hint, when the pod is like the last
    # one (GetNodeHint, asked even for a nominated pod).
    signature: Signature | None = None
    hint = ""
    if batch is not None:
        signature = sign_pod(fw.name, fw.signers, pod)
        hint = batch.node_hint(
            lambda name: fw.filter_rejects(state, pod, snapshot, name), snapshot, signature, cycle
        )
    # A pod nominated by an earlier preemption tries its nominated node
    # first, else the hint (evaluateNominatedNode); when it fits, no other
    # node is evaluated and the start index stays.
    nominated = pod.proto.nominated_node_name or hint
    nominated_rejection: Status | None = None
    if nominated and not explain:
        fits, nominated_rejection = _evaluate_nominated_node(fw, snapshot, state, pod, nominated)
        if fits and stop_after_filter:
            # evaluateNominatedNode runs the extenders on it too.
            return ScheduleResult(
                SUCCESS,
                evaluated=1,
                feasible=1,
                next_start_index=start_index,
                stopped_feasible=(nominated,),
                num_all_nodes=num_all,
            )
        if fits:
            result = ScheduleResult(
                SUCCESS, node=nominated, evaluated=1, feasible=1, next_start_index=start_index
            )
            if batch is not None:
                # schedulePod: one feasible node, stored without a ranking.
                batch.store(signature, hint, nominated, None, cycle)
            if reserve_and_permit:
                timer.stop()
                _reserve_and_permit(fw, state, pod, result)
            return result

    candidates = all_nodes
    if pf_result is not None and pf_result.node_names is not None:
        keep = [k for k, name in enumerate(all_nodes.names) if name in pf_result.node_names]
        candidates = all_nodes.take(keep)
    if fw.score or stop_after_filter:
        num_to_find = num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, len(candidates))
    else:
        # findNodesThatPassFilters: with neither scoring nor extender
        # filters the first feasible node will do.
        num_to_find = 1
    if explain:
        # A what-if explanation evaluates every node.
        num_to_find = len(candidates)
    outcome = find_nodes_that_pass_filters(fw, state, pod, candidates, start_index, num_to_find)
    feasible = outcome.feasible
    processed = outcome.processed
    if (
        nominated_rejection is not None
        and nominated not in outcome.rejected
        and nominated not in feasible.names
    ):
        # The nominated node's rejection stays in the diagnosis even when
        # the walk did not reach it again (upstream's NodeToStatus is
        # shared), and counts as processed.
        outcome.rejected[nominated] = nominated_rejection
        processed += 1
    # findNodesThatFitPod: the walk wraps over the candidates, the next
    # start over all nodes (len(allNodes)), even when PreFilter narrowed
    # them, and it advances even when a Filter plugin failed.
    next_start = (start_index + processed) % num_all
    if outcome.error is not None:
        return ScheduleResult(
            outcome.error,
            message=outcome.error.message,
            next_start_index=next_start,
            nominating_mode=clear,
        )

    if len(feasible) == 0:
        # Diagnosis: the PreFilterResult plugins, then every plugin that
        # rejected a node (AddPluginStatus); Pending ones also go to
        # PendingPlugins.
        counted = outcome.rejected_counts()
        plugins, pending, absent = _diagnosis(restricting, counted, len(candidates), num_all)
        rejected = outcome.rejected
        # A FitError is Unschedulable whatever the per-node codes
        # (schedulingCycle); those stay in the diagnosis for PostFilter.
        result = ScheduleResult(
            Status(Code.UNSCHEDULABLE, ("no node passed Filter",)),
            evaluated=processed,
            next_start_index=next_start,
            rejected=rejected,
            unschedulable_plugins=plugins,
            pending_plugins=pending,
        )
        _post_filter(fw, state, pod, result, rejected)
        result.message = fit_error_message_counted(
            num_all, counted, "", _post_filter_msg(result), absent
        )
        result.status = Status(result.status.code, (result.message,), result.status.plugin)
        return result

    if stop_after_filter:
        plugins, pending, absent = _diagnosis(
            restricting, outcome.rejected_counts(), len(candidates), num_all
        )
        rejected = outcome.rejected
        return ScheduleResult(
            SUCCESS,
            evaluated=processed,
            feasible=len(feasible),
            next_start_index=next_start,
            rejected=rejected,
            unschedulable_plugins=plugins,
            pending_plugins=pending,
            stopped_feasible=tuple(feasible.names),
            absent_status=absent,
            num_all_nodes=num_all,
        )

    result = ScheduleResult(
        SUCCESS,
        evaluated=processed,
        feasible=len(feasible),
        next_start_index=next_start,
        rejected=outcome.rejected if explain else {},
    )
    if len(feasible) == 1 and not explain:
        # schedulePod: one feasible node needs no scoring.
        result.node = feasible.names[0]
        if batch is not None:
            batch.store(signature, hint, result.node, None, cycle)
    elif not fw.score:
        # prioritizeNodes: without score plugins (or extenders) neither
        # PreScore nor Score runs and every node scores 1; the first node
        # of the walk is what upstream's max-heap pops among equal scores.
        result.node = feasible.names[0]
        if batch is not None:
            others = list(feasible.names[1:]) if signature is not None else None
            batch.store(signature, hint, result.node, others, cycle, len(feasible) - 1)
    else:
        st = fw.run_pre_score(state, pod, feasible)
        if not st.is_success:
            result.status = st
            result.message = st.message
            result.nominating_mode = clear
            return result
        scores = fw.run_score(state, pod, feasible)
        result.scores = scores
        result.node = select_host(feasible, scores.totals, rng)
        if batch is not None:
            # StoreScheduleResults with the rest of the ranking, built only
            # for a pod that can batch.
            others = (
                sorted_other_nodes(feasible, scores.totals, result.node, rng)
                if signature is not None
                else None
            )
            batch.store(signature, hint, result.node, others, cycle, len(feasible) - 1)

    if reserve_and_permit:
        timer.stop()
        _reserve_and_permit(fw, state, pod, result)
    return result


def _resume(
    fw: Framework,
    snapshot: Snapshot,
    state: CycleState,
    pod: PodInfo,
    start_index: int,
    reserve_and_permit: bool,
    rng: random.Random | None,
    resume: Resume,
) -> ScheduleResult:
    """schedulePod after findNodesThatPassExtenders: one node is taken as
    it is; otherwise prioritizeNodes (PreScore and Score, which upstream
    runs whenever extenders are configured) with the extenders' scores
    added to each node's total, then selectHost; then Reserve and Permit."""
    nodes = snapshot.batch(list(resume.nodes))
    result = ScheduleResult(
        SUCCESS,
        evaluated=resume.evaluated,
        feasible=len(nodes),
        next_start_index=start_index,
    )
    clear = NominatingMode.OVERRIDE
    if len(nodes) == 1:
        result.node = nodes.names[0]
    else:
        extra = np.array([resume.extra_scores.get(n, 0) for n in nodes.names], dtype=np.int64)
        if fw.score:
            st = fw.run_pre_score(state, pod, nodes)
            if not st.is_success:
                result.status = st
                result.message = st.message
                result.nominating_mode = clear
                return result
            scores = fw.run_score(state, pod, nodes)
            scores.totals = scores.totals + extra
            result.scores = scores
            result.node = select_host(nodes, scores.totals, rng)
        else:
            result.node = select_host(nodes, extra, rng)
    if reserve_and_permit:
        _reserve_and_permit(fw, state, pod, result)
    return result


def _evaluate_nominated_node(
    fw: Framework, snapshot: Snapshot, state: CycleState, pod: PodInfo, name: str
) -> tuple[bool, Status | None]:
    """schedule_one.go, evaluateNominatedNode: Filter (with nominated
    pods) on the pod's nominated node alone. Returns whether it fits, and
    its rejection when it does not. A node the snapshot lacks, or a
    Filter Error there, is only logged: the cycle goes on over every
    node."""
    if name not in snapshot.nodes:
        log.info(
            "pod %s: nominated node %s is not in the snapshot; evaluating every node",
            pod.key,
            name,
        )
        return False, None
    with fw.extension_point("Filter") as ep:
        verdicts, first_error = fw.filter_verdicts(state, pod, snapshot.batch([name]))
        st = verdicts.status_of(0)
        if not st.is_success:
            ep.append(st)
    if first_error >= 0:
        log.warning("pod %s: evaluation failed on nominated node %s: %s", pod.key, name, st)
        return False, None
    if st.is_success:
        return True, None
    return False, st


def _post_filter(
    fw: Framework,
    state: CycleState,
    pod: PodInfo,
    result: ScheduleResult,
    rejected: Mapping[str, Status],
) -> None:
    """schedulingAlgorithm after a FitError: no PostFilter plugins clears
    the nominated node; otherwise the result PostFilter kept decides."""
    if not fw.post_filter:
        result.nominating_mode = NominatingMode.OVERRIDE
        return
    mark = len(state.permit_signals)
    writes = len(state.plugin_writes)
    pf, st = fw.run_post_filter(state, pod, rejected)
    result.post_filter_signals = state.permit_signals[mark:]
    result.post_filter_writes = state.plugin_writes[writes:]
    state.drop_writes_after(writes)
    result.post_filter_status = st
    if pf is not None:
        result.nominating_mode = NominatingMode.OVERRIDE
        result.nominated_node = pf.nominated_node_name
        if st.is_success:
            # Preempt's step 5, actuation, is the caller's (the server
            # holds no credentials): the victims and the nominations to
            # clear travel in the result.
            result.post_filter_plugin = pf.plugin
            result.victims = pf.victims
            result.clear_nomination_pod_uids = pf.clear_nomination_pod_uids
            result.num_pdb_violations = pf.num_pdb_violations
            result.preemption_candidates = pf.candidates


def _post_filter_msg(result: ScheduleResult) -> str:
    """Diagnosis.PostFilterMsg: the message of RunPostFilterPlugins'
    status, whatever its code."""
    st = result.post_filter_status
    return "" if st is None else st.message


def _reserve_and_permit(
    fw: Framework, state: CycleState, pod: PodInfo, result: ScheduleResult
) -> None:
    """schedule_one.go, schedulingCycle after host selection
    (prepareForBindingCycle): Reserve, Permit, and Unreserve when either
    turns the pod away. The signals each raised are sorted out by point;
    the pods to activate are handed over only when Permit lets the pod on
    (Success or Wait), as upstream activates them at the end of a
    successful scheduling cycle and drops them otherwise."""
    mark = len(state.permit_signals)
    try:
        st = fw.run_reserve(state, pod, result.node)
    except CycleError as exc:
        # A plugin that raised: an Error status, unreserved like any
        # other failure (RunReservePluginsReserve returns it as one).
        st = exc.status
        state.assume_annotations.clear()
    result.reserve_status = st
    if not st.is_success:
        before = len(state.plugin_writes)
        fw.run_unreserve(state, pod, result.node)
        # Unreserve's writes undo PreBind's, which this attempt never ran:
        # the composite call does not return them (the binding cycle's
        # Unreserve call does, server/handlers.py unreserve).
        state.drop_writes_after(before)
        result.unreserve_signals = state.permit_signals[mark:]
        result.nominating_mode = NominatingMode.OVERRIDE
        state.take_activations()
        return
    try:
        st, waits = fw.run_permit(state, pod, result.node)
    except CycleError as exc:
        st, waits = exc.status, {}
    result.permit_status = st
    result.permit_timeouts = waits
    result.permit_signals = state.permit_signals[mark:]
    if not st.is_success and not st.is_wait:
        after_permit = len(state.permit_signals)
        before = len(state.plugin_writes)
        fw.run_unreserve(state, pod, result.node)
        state.drop_writes_after(before)
        result.unreserve_signals = state.permit_signals[after_permit:]
        result.nominating_mode = NominatingMode.OVERRIDE
        state.take_activations()
        return
    result.activate_pod_uids = state.take_activations()
    # schedule_one.go bindingCycle: RunPreBindPreFlights, before
    # WaitOnPermit (so also for a pod that waits), with the state as
    # Permit left it. Run here, at the end of the scheduling cycle, so the
    # caller learns in the same answer whether PreBind has work.
    pre_flight = fw.run_pre_bind_pre_flights(state, pod, result.node)
    result.pre_bind_pre_flight_status = pre_flight
    result.pre_bind_skip = pre_flight.is_skip


def _diagnosis(
    restricting: Iterable[str],
    counted: Sequence[tuple[Status, int]],
    candidates: int,
    num_all: int,
) -> tuple[set[str], set[str], Status | None]:
    """Diagnosis's plugins (upstream's AddPluginStatus): the PreFilterResult
    plugins, then every plugin that rejected a node (``counted``: the
    rejected nodes' statuses, FilterOutcome.rejected_counts), the Pending
    ones also as PendingPlugins; and, when PreFilterResult excluded nodes,
    the status those nodes count with (unresolvable)."""
    plugins = set(restricting)
    pending: set[str] = set()
    for rejection, _ in counted:
        if rejection.plugin and rejection.is_rejected:
            plugins.add(rejection.plugin)
            if rejection.code is Code.PENDING:
                pending.add(rejection.plugin)
    absent = None
    if candidates < num_all:
        # Nodes PreFilterResult excluded count as unresolvable.
        absent = Status.unresolvable(
            f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(restricting))}]"
        )
    return plugins, pending, absent


def find_nodes_that_pass_filters(
    fw: Framework,
    state: CycleState,
    pod: PodInfo,
    candidates: NodeBatch,
    start_index: int,
    num_to_find: int,
) -> FilterOutcome:
    """schedule_one.go, findNodesThatPassFilters: walk candidates from
    start_index (wrapping), stop once num_to_find nodes pass. Evaluates in
    chunks so that per-node plugins do not visit every node.

    The walk is upstream's with one worker: a Filter Error stops it at the
    node that hit it, and the nodes decided before that node still count
    as processed (findNodesThatFitPod advances nextStartNodeIndex by them
    whether or not an error occurred)."""
    n = len(candidates)
    if n == 0:
        return FilterOutcome(candidates.take([]), {}, 0)
    start = start_index % n

    def order(lo: int, hi: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Positions lo..hi of the walk that starts at ``start`` and wraps."""
        end = start + min(hi, n)
        idx = np.arange(start + lo, end, dtype=np.int64)
        if end > n:
            idx[idx >= n] -= n
        return idx

    if not fw.filter:
        chosen = order(0, num_to_find)
        return FilterOutcome(candidates.take(chosen), {}, len(chosen))
    feasible_parts: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    found = 0
    rejected_parts: list[_RejectedPart] = []
    error: Status | None = None
    pos = 0
    # The first chunk: enough nodes to find num_to_find at the recent walks'
    # pass ratio (fewer rounds of Filter calls when most nodes are
    # rejected), from num_to_find to 4 times it. Evaluating nodes past the
    # one that completes the set costs time only: the outcome and
    # ``processed`` stop at that node.
    ratio = max(fw.filter_pass_ratio, 0.25)
    chunk = max(num_to_find, min(int(num_to_find / ratio), n), 64)
    with fw.extension_point("Filter") as ep:
        while pos < n and found < num_to_find and error is None:
            part = order(pos, pos + chunk)
            batch = candidates.take(part)
            verdicts, first_error = fw.filter_verdicts(state, pod, batch)
            ok = verdicts.passed()
            # Nodes after the first Error are never reached.
            decided = len(part) if first_error < 0 else first_error
            ok_pos = np.flatnonzero(ok[:decided])
            need = num_to_find - found
            if len(ok_pos) >= need:
                # Stop at the node that completed the set, like upstream's
                # early cancel; later nodes in this chunk count as unprocessed.
                cut = int(ok_pos[need - 1]) + 1
                ok_pos = ok_pos[:need]
            else:
                cut = decided
                if first_error >= 0:
                    error = verdicts.status_of(first_error)
            feasible_parts.append(part[ok_pos])
            found += len(ok_pos)
            bad = np.flatnonzero(~ok[:cut])
            if len(bad):
                # Each rejected node's Status by its index in the verdicts (all
                # >= 0 here); the names only when ``rejected`` is read.
                shown = verdicts.status_index[bad]
                rejected_parts.append((batch, bad, shown, verdicts.statuses))
            pos += cut
            chunk = max(chunk * 2, 64)
        if error is not None:
            ep.append(error)
    if pos:
        # Smoothed over walks, so that one pod of another kind moves it half way.
        fw.filter_pass_ratio = (fw.filter_pass_ratio + found / pos) / 2
    feasible = np.concatenate(feasible_parts) if feasible_parts else np.empty(0, np.int64)
    return FilterOutcome(candidates.take(feasible), {}, pos, error, rejected_parts)


def select_host(nodes: NodeBatch, totals: ScoreArray, rng: random.Random | None = None) -> str:
    """schedule_one.go, selectHost: the highest total; among equal totals one
    at random (upstream's reservoir sampling gives each an equal chance)."""
    best = np.flatnonzero(totals == totals.max())
    pick = int(best[0]) if len(best) == 1 else int(best[(rng or random).randrange(len(best))])
    return nodes.snapshot.slot(int(nodes.idx[pick])).name
