"""Framework values to and from their messages (protos/berth/v1/scheduling.proto):
Status, CycleState, and a whole cycle's ScheduleResponse."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.cycle_state import CycleState
from berth.framework.interfaces import NominatingMode
from berth.framework.model import PodInfo
from berth.framework.preemption import Candidate
from berth.framework.status import Code, Status

if TYPE_CHECKING:
    from berth.framework.runtime import Signal
    from berth.framework.schedule_one import ScheduleResult


def status_to_pb(st: Status) -> pb.Status:
    out = pb.Status()
    fill_status(out, st)
    return out


def fill_status(out: pb.Status, st: Status) -> None:
    """``st`` written into ``out``: a new Status (``status_to_pb``) or an
    empty Status field of a response, built in place instead of copied there."""
    # Present though all its fields are defaults (a response's status field).
    out.SetInParent()
    if st.code:
        out.code = int(st.code)  # type: ignore[assignment]
    if st.reasons:
        out.reasons.extend(st.reasons)
    if st.plugin:
        out.plugin = st.plugin


def status_from_pb(st: pb.Status) -> Status:
    return Status(Code(st.code), tuple(st.reasons), st.plugin)


def cycle_to_pb(state: CycleState) -> pb.CycleState:
    out = pb.CycleState()
    fill_cycle(out, state, state.encode())
    return out


def fill_cycle(out: pb.CycleState, state: CycleState, data: Mapping[str, bytes]) -> None:
    """``state`` written into ``out`` (an empty CycleState field), its entries
    already encoded (``data``: state.encode(), encoded once for a response
    that carries the cycle twice)."""
    out.SetInParent()
    if state.skip_filter_plugins:
        out.skip_filter_plugins.extend(sorted(state.skip_filter_plugins))
    if state.skip_score_plugins:
        out.skip_score_plugins.extend(sorted(state.skip_score_plugins))
    if data:
        out.data.update(data)


def cycle_from_pb(msg: pb.CycleState) -> CycleState:
    return CycleState.decode(msg.data, msg.skip_filter_plugins, msg.skip_score_plugins)


def schedule_response(
    result: ScheduleResult,
    state: CycleState,
    generation: int,
    explain: bool,
    out: pb.ScheduleResponse | None = None,
    group_rejected: bool = False,
) -> pb.ScheduleResponse:
    """The cycle's response, written into ``out`` when given (an empty
    ScheduleResponse inside the message that carries it, a batch's result
    or a stream's answer, so it is built where it is sent, not copied there).
    ``group_rejected``: the rejected nodes as Diagnosis.rejected_groups."""
    if out is None:
        out = pb.ScheduleResponse()
    fill_status(out.status, result.status)
    out.node = result.node
    out.evaluated_nodes = result.evaluated
    out.feasible_nodes = result.feasible
    out.next_start_index = result.next_start_index
    out.generation = generation
    # Encoded once: a placed pod's response carries the cycle twice (here and
    # in Permit's answer).
    data: Mapping[str, bytes] | None = None
    if result.node or result.stopped_feasible is not None:
        # A placed pod's state goes to the binding cycle only: without the
        # entries only the scheduling cycle reads (StateKey.scheduling_only).
        # Stopped for the extenders, the scheduling cycle goes on with it.
        data = state.encode(binding=result.stopped_feasible is None)
        fill_cycle(out.cycle, state, data)
    if result.stopped_feasible is not None:
        # Stopped after Filter for the caller's extenders: what it needs to
        # go on, or to compose the FitError if they reject every node.
        out.feasible.extend(result.stopped_feasible)
        d = out.diagnosis
        d.num_all_nodes = result.num_all_nodes
        if result.absent_status is not None:
            fill_status(d.absent_status, result.absent_status)
    if not result.status.is_success or explain or result.stopped_feasible is not None:
        d = out.diagnosis
        # Many nodes share one Status object (a batch Filter's verdicts):
        # each is built once and copied into its nodes' entries (by identity:
        # ``result`` holds every one for the loop's length).
        if group_rejected:
            # One group per Status object, its nodes in the order met.
            groups: dict[int, tuple[Status, list[str]]] = {}
            for name, st in result.rejected.items():
                entry = groups.get(id(st))
                if entry is None:
                    entry = groups[id(st)] = (st, [])
                entry[1].append(name)
            for st, names in groups.values():
                group = d.rejected_groups.add()
                fill_status(group.status, st)
                group.nodes.extend(names)
        else:
            built: dict[int, pb.Status] = {}
            add = d.rejected.add
            for name, st in result.rejected.items():
                msg = built.get(id(st))
                if msg is None:
                    msg = built[id(st)] = status_to_pb(st)
                add(node=name, status=msg)
        d.unschedulable_plugins.extend(sorted(result.unschedulable_plugins))
        d.pending_plugins.extend(sorted(result.pending_plugins))
        if result.pre_filter_status is not None:
            fill_status(d.pre_filter_status, result.pre_filter_status)
        d.message = result.message
    if result.post_filter_status is not None:
        fill_status(out.post_filter.status, result.post_filter_status)
        out.post_filter.nominated_node_name = result.nominated_node
        out.post_filter.nominating_mode = (
            pb.NOMINATING_MODE_OVERRIDE
            if result.nominating_mode is NominatingMode.OVERRIDE
            else pb.NOMINATING_MODE_NOOP
        )
        add_signals(out.post_filter.signals, result.post_filter_signals)
        for plugin, write in result.post_filter_writes:
            out.post_filter.writes.append(write.to_proto(plugin))
        add_preemption(
            out.post_filter,
            result.post_filter_plugin,
            result.victims,
            result.clear_nomination_pod_uids,
            result.num_pdb_violations,
            result.preemption_candidates,
        )
    if result.reserve_status is not None:
        fill_status(out.reserve_status, result.reserve_status)
        if result.reserve_status.is_success and state.assume_annotations:
            out.assume_annotations.update(state.assume_annotations)
    if result.permit_status is not None:
        fill_permit(
            out.permit,
            result.permit_status,
            result.permit_timeouts,
            state,
            result.permit_signals,
            result.activate_pod_uids,
            data,
        )
        # Permit let the pod on and every PreBind plugin's PreBindPreFlight
        # answered Skip: the caller need not call PreBind (the skipped plugins
        # are also recorded in `cycle`, so a PreBind call skips them too).
        out.pre_bind_skip = result.pre_bind_skip
        pre_flight = result.pre_bind_pre_flight_status
        if pre_flight is not None and not (pre_flight.is_success or pre_flight.is_skip):
            fill_status(out.pre_bind_pre_flight_error, pre_flight)
    # Reserve failed or Permit rejected: what the Unreserve that followed asked.
    add_signals(out.unreserve_signals, result.unreserve_signals)
    if explain and result.scores is not None:
        sc = result.scores
        names = sc.nodes.names
        order = sorted(range(len(names)), key=lambda k: (-int(sc.totals[k]), names[k]))
        per_plugin = {p: s.tolist() for p, s in sc.weighted.items()}
        raw = {p: s.tolist() for p, s in sc.raw.items()}
        weights = {p: sc.weights.get(p, 1) or 1 for p in per_plugin}
        totals = sc.totals.tolist()
        for k in order:
            ns = out.scores.add(node=names[k], total=totals[k])
            for p, s in per_plugin.items():
                ns.plugins[p] = s[k]
                # The weight multiplied the normalised score (normalize_and_weigh).
                ns.normalized[p] = s[k] // weights[p]
                if p in raw:
                    ns.raw[p] = raw[p][k]
    return out


def permit_pb(
    st: Status,
    waits: Mapping[str, float],
    state: CycleState,
    signals: Iterable[Signal],
    activate: Iterable[str],
) -> pb.PermitResponse:
    out = pb.PermitResponse()
    fill_permit(out, st, waits, state, signals, activate)
    return out


def fill_permit(
    out: pb.PermitResponse,
    st: Status,
    waits: Mapping[str, float],
    state: CycleState,
    signals: Iterable[Signal],
    activate: Iterable[str],
    data: Mapping[str, bytes] | None = None,
) -> None:
    """Permit's answer written into ``out`` (an empty PermitResponse field);
    ``data``: the cycle's entries when already encoded."""
    fill_status(out.status, st)
    fill_cycle(out.cycle, state, state.encode() if data is None else data)
    for plugin, seconds in waits.items():
        out.wait_timeout_millis[plugin] = int(seconds * 1000)
    add_signals(out.signals, signals)
    out.activate_pod_uids.extend(activate)


def add_signals(out: Any, signals: Iterable[Signal]) -> None:
    """PostFilter/Permit/Unreserve: the waiting-pod signals plugins raised."""
    for uid, plugin, allow, message in signals:
        out.add(pod_uid=uid, plugin=plugin, allow=allow, message=message)


def add_preemption(
    out: pb.PostFilterResponse,
    plugin: str,
    victims: Iterable[PodInfo],
    clear: Iterable[str],
    num_pdb_violations: int = 0,
    candidates: Iterable[Candidate] = (),
) -> None:
    """A successful PostFilter's plugin and what it asks of the caller: the
    victims to evict, in order, and the nominations to clear; or, when the
    caller asked for them, every preemption candidate to select from."""
    out.plugin = plugin
    out.num_pdb_violations = num_pdb_violations
    for v in victims:
        out.victims.add(uid=v.uid, namespace=v.namespace, name=v.name)
    out.clear_nomination_pod_uids.extend(clear)
    for c in candidates:
        listed = out.candidates.add(
            node_name=c.name,
            num_pdb_violations=c.num_pdb_violations,
            clear_nomination_pod_uids=c.clear_nomination_pod_uids,
        )
        for v in c.victims:
            listed.victims.add(uid=v.uid, namespace=v.namespace, name=v.name)


def add_writes(out: pb.StatusResponse, state: CycleState) -> None:
    """PreBind/PostBind: the writes plugins asked for, in order."""
    for plugin, write in state.take_writes():
        out.writes.append(write.to_proto(plugin))
