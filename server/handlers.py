"""The handlers of the RPCs that run one extension point of a profile (and
Sync, DescribeProfiles). Each runs whole on the worker with its ``Call``
(server/prologue.py), checks its request in order, resolving its profile and
its state through the call, runs the profile's plugins (framework/runtime.py)
and returns statuses, CycleState and the generation it used. Plugin verdicts,
plugin errors included, travel inside the response as Status, as upstream's
framework returns them (pkg/scheduler/framework/runtime/framework.go)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.events import ActionType, ClusterEvent
from berth.framework.interfaces import QueuedPodInfo
from berth.framework.model import NodeInfo, PodInfo
from berth.framework.objects import ClusterObject
from berth.framework.runtime import CycleError, DeadlineExceeded, Framework
from berth.framework.snapshot import NodeBatch, Snapshot
from berth.framework.status import Status
from berth.server import errors
from berth.server.convert import (
    add_preemption,
    add_signals,
    add_writes,
    cycle_from_pb,
    cycle_to_pb,
    permit_pb,
    status_from_pb,
    status_to_pb,
)
from berth.server.prologue import Call

# The extension points DescribeProfiles lists, in the order a cycle runs them.
EXTENSION_POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
)


class NamesProfile(Protocol):
    profile: str


def named_profile(call: Call, request: NamesProfile) -> Framework:
    """What a handler that names a profile checks before it reads the state."""
    return call.profile(request.profile)


def describe_profiles(profiles: Mapping[str, Framework]) -> pb.DescribeProfilesResponse:
    out = pb.DescribeProfilesResponse()
    for name, fw in profiles.items():
        prof = out.profiles.add(
            scheduler_name=name, percentage_of_nodes_to_score=fw.percentage_of_nodes_to_score
        )
        for point in EXTENSION_POINTS:
            plugins = fw.plugins_at(point)
            if plugins:
                ep = prof.extension_points.add(name=point)
                for plugin, weight in plugins:
                    ep.plugins.add(name=plugin, weight=weight)
        for reg in fw.registrations:
            prof.events.add(
                plugin=reg.plugin,
                resource=reg.event.resource,
                action_type=int(reg.event.action_type),
                has_hint=reg.hint is not None,
            )
        for read in fw.reads:
            k = read.kind
            prof.reads.add(
                group=k.group,
                version=k.version,
                resource=k.resource,
                kind=k.kind,
                namespaced=k.namespaced,
                poll_seconds=k.poll_seconds,
                plugins=read.plugins,
                label_selector=k.label_selector,
                if_served=k.if_served,
            )
    return out


def sync(call: Call, request: pb.SyncRequest) -> pb.SyncResponse:
    snap, gen = call.cluster(request.HasField("state"), request.state)
    return pb.SyncResponse(
        generation=gen,
        node_count=len(snap.nodes),
        pod_count=len(snap.pods),
        object_count=snap.object_count,
    )


def pre_enqueue_checks(call: Call, request: pb.PreEnqueueRequest) -> PodInfo:
    """What PreEnqueue refuses before it reads the state: its profile, its pod."""
    call.profile(request.profile)
    return pod_of(request.HasField("pod"), request.pod)


def pre_enqueue(call: Call, request: pb.PreEnqueueRequest) -> pb.PreEnqueueResponse:
    """RunPreEnqueuePlugins; over the request's cluster state when it carries
    one (PreEnqueue plugins that read objects: DynamicResources' claims),
    else on the pod alone."""
    fw = call.framework(request.profile)
    pod = pre_enqueue_checks(call, request)
    if not request.HasField("state"):
        st = _guard(lambda: fw.run_pre_enqueue(pod))
        return pb.PreEnqueueResponse(status=status_to_pb(st))
    snap, gen = call.cluster(True, request.state)
    with _bound(fw, snap):
        st = _guard(lambda: fw.run_pre_enqueue(pod))
    return pb.PreEnqueueResponse(status=status_to_pb(st), generation=gen)


# Most pods one QueueingHints call may carry (protos: QueueingHintsRequest.pods).
MAX_HINT_PODS = 16384


def queueing_hints_checks(call: Call, request: pb.QueueingHintsRequest) -> ClusterEvent:
    """What QueueingHints refuses: the event, every pod's profile, pod and
    plugins, and more pods than MAX_HINT_PODS."""
    if len(request.pods) > MAX_HINT_PODS:
        raise errors.batch_too_large(len(request.pods), MAX_HINT_PODS)
    if not request.resource:
        raise errors.invalid("resource", "must name the event's resource")
    value = request.action_type
    if value <= 0 or value & ~int(ActionType.ALL) or value.bit_count() != 1:
        raise errors.invalid(
            "action_type",
            f"must be exactly one ActionType bit (1, 2, 4, ... 4096), got {request.action_type}",
        )
    for i, hp in enumerate(request.pods):
        fw = call.profile(hp.profile)
        if not hp.HasField("pod") or not hp.pod.uid:
            raise errors.invalid(f"pods[{i}].pod.uid", "must not be empty")
        for j, plugin in enumerate(hp.plugins):
            if plugin not in fw.instances:
                raise errors.invalid(
                    f"pods[{i}].plugins[{j}]",
                    f"plugin {plugin!r} is not in profile {fw.name!r}",
                )
    return ClusterEvent(request.resource, ActionType(value))


def queueing_hints(call: Call, request: pb.QueueingHintsRequest) -> pb.QueueingHintsResponse:
    """Each pod's rejecting plugins asked about one event
    (Framework.queueing_hints; upstream's isPodWorthRequeuing). The hints
    see no cluster state; the call's deadline is checked between pods."""
    event = queueing_hints_checks(call, request)
    old = _event_object(request.old_object) if request.HasField("old_object") else None
    new = _event_object(request.new_object) if request.HasField("new_object") else None
    out = pb.QueueingHintsResponse()
    for hp in request.pods:
        if call.deadline is not None:
            late = time.perf_counter() - call.deadline
            if late > 0:
                raise DeadlineExceeded("QueueingHint", ",".join(hp.plugins), late)
        fw = call.profiles[hp.profile]
        queued = fw.queueing_hints(PodInfo(hp.pod), hp.plugins, event, old, new)
        out.pods.add(
            queue=bool(queued),
            queueing_plugins=queued,
        )
    return out


def _event_object(obj: pb.EventObject) -> Any:
    """What a hint receives for the event's object (framework/events.py): a
    NodeInfo of the node alone, a PodInfo, or a ClusterObject."""
    which = obj.WhichOneof("object")
    if which == "node":
        return NodeInfo(obj.node)
    if which == "pod":
        return PodInfo(obj.pod)
    if which == "cluster_object":
        return ClusterObject.from_proto(obj.cluster_object)
    return None


def queue_sort_checks(call: Call, request: pb.QueueSortRequest) -> list[QueuedPodInfo]:
    """What QueueSort refuses before it reads the state: its profile, its pods."""
    call.profile(request.profile)
    pods = []
    for i, qp in enumerate(request.pods):
        if not qp.HasField("pod") or not qp.pod.uid:
            raise errors.invalid(f"pods[{i}].pod.uid", "must not be empty")
        pods.append(QueuedPodInfo(PodInfo(qp.pod), qp.enqueued_unix_micros, qp.attempts))
    return pods


def queue_sort(call: Call, request: pb.QueueSortRequest) -> pb.QueueSortResponse:
    fw = call.framework(request.profile)
    pods = queue_sort_checks(call, request)
    snap: Snapshot | None = None
    if request.HasField("state"):
        snap, _gen = call.cluster(True, request.state)
    elif fw.queue_sort_reads:
        raise errors.invalid(
            "state",
            f"required: queueSort plugin {fw.queue_sort.name!r} of profile "
            f"{fw.name!r} reads objects (DescribeProfiles lists them in Profile.reads)",
        )
    try:
        if snap is None:
            keys = fw.queue_sort_keys(pods)
        else:
            with _bound(fw, snap):
                keys = fw.queue_sort_keys(pods)
    except CycleError as exc:
        raise errors.internal(exc.status.message) from exc
    out = pb.QueueSortResponse()
    for key in keys:
        sk = out.keys.add()
        for part in key:
            if isinstance(part, int):
                sk.parts.add(int=int(part))
            elif isinstance(part, float):
                sk.parts.add(float=part)
            else:
                sk.parts.add(str=str(part))
    return out


def pre_filter(call: Call, request: pb.CycleRequest) -> pb.PreFilterResponse:
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    state = cycle_from_pb(request.cycle)
    with _bound(fw, snap):
        res, st = _guard2(lambda: fw.run_pre_filter(state, pod, snap.all_nodes()))
    out = pb.PreFilterResponse(status=status_to_pb(st), cycle=cycle_to_pb(state), generation=gen)
    if res is not None and res.node_names is not None:
        out.restrict_nodes = True
        out.nodes.extend(sorted(res.node_names))
    return out


def filter_nodes(call: Call, request: pb.NodesRequest) -> pb.FilterResponse:
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    nodes = nodes_of(snap, gen, request.nodes, request.all_nodes)
    state = cycle_from_pb(request.cycle)
    out = pb.FilterResponse(generation=gen)
    with _bound(fw, snap):
        try:
            with fw.extension_point("Filter"):
                verdicts = fw.run_filter(state, pod, nodes)
        except CycleError as exc:
            # An Error from a plugin fails every node (the cycle).
            for name in nodes.names:
                out.rejected.add(node=name, status=status_to_pb(exc.status))
            return out
    names = nodes.names
    for k, name in enumerate(names):
        st = verdicts.status_of(k)
        if st.is_success:
            out.feasible.append(name)
        else:
            out.rejected.add(node=name, status=status_to_pb(st))
    return out


def post_filter(call: Call, request: pb.PostFilterRequest) -> pb.PostFilterResponse:
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    state = cycle_from_pb(request.cycle)
    state.preemption_candidates = request.preemption_candidates
    rejected = {ns.node: status_from_pb(ns.status) for ns in request.rejected}
    with _bound(fw, snap):
        res, st = _guard2(lambda: fw.run_post_filter(state, pod, rejected))
    out = pb.PostFilterResponse(status=status_to_pb(st), cycle=cycle_to_pb(state), generation=gen)
    # A result overrides the pod's nomination (upstream's
    # NewPostFilterResultWithNominatedNode); none leaves it (ModeNoop).
    out.nominating_mode = pb.NOMINATING_MODE_NOOP if res is None else pb.NOMINATING_MODE_OVERRIDE
    if res is not None:
        out.nominated_node_name = res.nominated_node_name
        if st.is_success:
            add_preemption(
                out,
                res.plugin,
                res.victims,
                res.clear_nomination_pod_uids,
                res.num_pdb_violations,
                res.candidates,
            )
    add_signals(out.signals, state.permit_signals)
    for plugin, write in state.take_writes():
        out.writes.append(write.to_proto(plugin))
    return out


def pre_score(call: Call, request: pb.NodesRequest) -> pb.PreScoreResponse:
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    nodes = nodes_of(snap, gen, request.nodes, request.all_nodes)
    state = cycle_from_pb(request.cycle)
    with _bound(fw, snap):
        st = _guard(lambda: fw.run_pre_score(state, pod, nodes))
    return pb.PreScoreResponse(status=status_to_pb(st), cycle=cycle_to_pb(state), generation=gen)


def score(call: Call, request: pb.NodesRequest) -> pb.ScoreResponse:
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    nodes = nodes_of(snap, gen, request.nodes, request.all_nodes)
    state = cycle_from_pb(request.cycle)
    out = pb.ScoreResponse(nodes=nodes.names, generation=gen)
    with _bound(fw, snap):
        try:
            with fw.extension_point("Score"):
                raw = fw.run_score_raw(state, pod, nodes)
        except CycleError as exc:
            out.status.CopyFrom(status_to_pb(exc.status))
            return out
    for name, scores in raw.items():
        out.plugins.add(plugin=name, weight=fw.score_weights[name], scores=scores.tolist())
    return out


def normalize_score(call: Call, request: pb.NormalizeScoreRequest) -> pb.NormalizeScoreResponse:
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    nodes = nodes_of(snap, gen, request.nodes, None)
    state = cycle_from_pb(request.cycle)
    raw = {}
    for i, ps in enumerate(request.plugins):
        if ps.plugin not in fw.score_weights:
            raise errors.invalid(
                f"plugins[{i}].plugin",
                f"{ps.plugin!r} is not a score plugin of profile {fw.name!r}",
            )
        if len(ps.scores) != len(nodes):
            raise errors.invalid(
                f"plugins[{i}].scores",
                f"has {len(ps.scores)} scores for {len(nodes)} nodes",
            )
        raw[ps.plugin] = np.asarray(ps.scores, dtype=np.int64)
    out = pb.NormalizeScoreResponse(generation=gen)
    with _bound(fw, snap):
        try:
            weighted = fw.normalize_and_weigh(state, pod, nodes, raw)
        except CycleError as exc:
            out.status.CopyFrom(status_to_pb(exc.status))
            return out
    totals = np.zeros(len(nodes), dtype=np.int64)
    for name, scores in weighted.items():
        totals += scores
        out.plugins.add(plugin=name, weight=fw.score_weights[name], scores=scores.tolist())
    out.totals.extend(totals.tolist())
    return out


class _NodeCall:
    """What a call on one node (Reserve ... PostBind) works with."""

    def __init__(self, call: Call, request: pb.NodeRequest) -> None:
        self.fw = call.framework(request.profile)
        self.snap, self.generation = call.cluster(request.HasField("state"), request.state)
        self.pod = pod_of(request.HasField("pod"), request.pod)
        self.node = node_of(self.snap, self.generation, request.node)
        self.state = cycle_from_pb(request.cycle)


def reserve(call: Call, request: pb.NodeRequest) -> pb.StatusResponse:
    c = _NodeCall(call, request)
    fw, state = c.fw, c.state
    with _bound(fw, c.snap):
        st = _guard(lambda: fw.run_reserve(state, c.pod, c.node))
    out = pb.StatusResponse(
        status=status_to_pb(st), cycle=cycle_to_pb(state), generation=c.generation
    )
    if st.is_success:
        out.assume_annotations.update(state.assume_annotations)
    return out


def unreserve(call: Call, request: pb.NodeRequest) -> pb.StatusResponse:
    c = _NodeCall(call, request)
    state = c.state
    with _bound(c.fw, c.snap):
        c.fw.run_unreserve(state, c.pod, c.node)
    # A failed cycle activates nothing (its pods to activate are dropped).
    state.take_activations()
    out = pb.StatusResponse(status=pb.Status(), cycle=cycle_to_pb(state), generation=c.generation)
    add_signals(out.signals, state.permit_signals)
    # Writes undoing PreBind's (e.g. DynamicResources removing the pod from a
    # claim's reservedFor), performed by the caller best effort.
    add_writes(out, state)
    return out


def permit(call: Call, request: pb.NodeRequest) -> pb.PermitResponse:
    c = _NodeCall(call, request)
    state = c.state
    with _bound(c.fw, c.snap):
        try:
            st, waits = c.fw.run_permit(state, c.pod, c.node)
        except CycleError as exc:
            st, waits = exc.status, {}
    # The end of the scheduling cycle: what its plugins asked to activate
    # (carried in the cycle state since PreFilter) goes to the caller when
    # the pod goes on, and is dropped otherwise.
    activate = state.take_activations()
    if not (st.is_success or st.is_wait):
        activate = []
    out = permit_pb(st, waits, state, state.permit_signals, activate)
    out.generation = c.generation
    return out


def pre_bind(call: Call, request: pb.NodeRequest) -> pb.StatusResponse:
    c = _NodeCall(call, request)
    fw, state = c.fw, c.state
    with _bound(fw, c.snap):
        st = _guard(lambda: fw.run_pre_bind(state, c.pod, c.node))
    if st.is_wait:
        # A plugin waits (CycleState.recheck_pre_bind_after): the writes so far
        # are performed now and the caller calls again after the delay; the
        # pods to activate stay in the cycle for the call that succeeds.
        out = pb.StatusResponse(
            status=status_to_pb(st), cycle=cycle_to_pb(state), generation=c.generation
        )
        add_writes(out, state)
        out.recheck_after_ms = max(1, round(state.pre_bind_recheck_after * 1000))
        return out
    activate = state.take_activations()
    out = pb.StatusResponse(
        status=status_to_pb(st), cycle=cycle_to_pb(state), generation=c.generation
    )
    if st.is_success:
        add_writes(out, state)
        out.activate_pod_uids.extend(activate)
    return out


def bind(call: Call, request: pb.NodeRequest) -> pb.BindResponse:
    c = _NodeCall(call, request)
    with _bound(c.fw, c.snap):
        try:
            st, plugin = c.fw.run_bind(c.state, c.pod, c.node)
        except CycleError as exc:
            st, plugin = exc.status, None
    out = pb.BindResponse(status=status_to_pb(st), node=c.node, generation=c.generation)
    if plugin is not None:
        out.bound_by = plugin.name
        out.caller_binds = plugin.caller_binds
    return out


def post_bind(call: Call, request: pb.NodeRequest) -> pb.StatusResponse:
    c = _NodeCall(call, request)
    state = c.state
    with _bound(c.fw, c.snap):
        c.fw.run_post_bind(state, c.pod, c.node)
    activate = state.take_activations()
    out = pb.StatusResponse(status=pb.Status(), cycle=cycle_to_pb(state), generation=c.generation)
    add_writes(out, state)
    out.activate_pod_uids.extend(activate)
    return out


# -- request checks ------------------------------------------------------------


def pod_of(has_pod: bool, pod: cpb.Pod) -> PodInfo:
    if not has_pod:
        raise errors.invalid("pod", "required")
    if not pod.uid:
        raise errors.invalid("pod.uid", "must not be empty")
    if not pod.name:
        raise errors.invalid("pod.name", "must not be empty")
    return PodInfo(pod)


def nodes_of(snapshot: Snapshot, generation: int, names: Any, all_nodes: bool | None) -> NodeBatch:
    """The request's candidate nodes; ``all_nodes`` None for a request
    without that field."""
    if all_nodes:
        if len(names):
            raise errors.invalid("nodes", "must be empty when all_nodes is set")
        return snapshot.all_nodes()
    if not len(names):
        raise errors.invalid(
            "nodes",
            "must name at least one node"
            + ("" if all_nodes is None else " (or set all_nodes for every node)"),
        )
    for i, name in enumerate(names):
        if name not in snapshot.nodes:
            raise errors.unknown_node(
                f"nodes[{i}]",
                name,
                generation,
                f"nodes[{i}]: node {name!r} is not in the snapshot (generation {generation})",
            )
    return snapshot.batch(names)


def node_of(snapshot: Snapshot, generation: int, name: str) -> str:
    if not name:
        raise errors.invalid("node", "must not be empty")
    if name not in snapshot.nodes:
        raise errors.unknown_node(
            "node",
            name,
            generation,
            f"node: {name!r} is not in the snapshot (generation {generation})",
        )
    return name


class _bound:
    """Points the profile's handle at the request's snapshot for a block."""

    def __init__(self, fw: Framework, snap: Snapshot) -> None:
        self.fw = fw
        self.snap = snap

    def __enter__(self) -> None:
        self.fw.handle.bind_snapshot(self.snap)

    def __exit__(self, *exc: object) -> None:
        self.fw.handle.bind_snapshot(None)


def _guard(fn: Callable[[], Status]) -> Status:
    """A plugin error becomes the call's Error status, as upstream returns it."""
    try:
        return fn()
    except CycleError as exc:
        return exc.status


def _guard2(fn: Callable[[], tuple[Any, Status]]) -> tuple[Any, Status]:
    try:
        return fn()
    except CycleError as exc:
        return None, exc.status
