"""The RPCs that run whole cycles: Schedule, one pod's scheduling cycle (as
upstream's pkg/scheduler/schedule_one.go, ScheduleOne up to the binding
cycle), and ScheduleBatch, a queue of pods scheduled in order, each seeing
what the pods before it assumed. A batch runs on the worker in slices
(``Worker.slice_seconds``) while its call holds its cluster's lock
(server/prologue.py), so other clusters' calls get turns and no other call
sees the pods it assumes; when it ends, however it ends, the snapshot is put
back as the batch found it: the caller owns the truth."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, field

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.framework.batch import OpportunisticBatch, batch_for
from berth.framework.cycle_state import CycleState
from berth.framework.model import PodInfo
from berth.framework.runtime import Framework
from berth.framework.schedule_one import NominatingMode, Resume, ScheduleResult, schedule_pod
from berth.framework.snapshot import Snapshot
from berth.server import errors
from berth.server.convert import cycle_from_pb, schedule_response
from berth.server.handlers import pod_of
from berth.server.prologue import Call, Worker

log = logging.getLogger(__name__)


def schedule(
    call: Call, request: pb.ScheduleRequest, out: pb.ScheduleResponse | None = None
) -> pb.ScheduleResponse:
    """One pod's cycle; its response written into ``out`` when given."""
    fw = call.framework(request.profile)
    snap, gen = call.cluster(request.HasField("state"), request.state)
    pod = pod_of(request.HasField("pod"), request.pod)
    if request.start_index < 0:
        raise errors.invalid("start_index", f"must be >= 0, got {request.start_index}")
    rng = random.Random(request.seed) if request.seed else None
    resume = None
    if request.HasField("resume"):
        resume = _resume_of(request.resume, snap, gen)
        state = cycle_from_pb(request.resume.cycle)
    else:
        state = CycleState()
    state.preemption_candidates = request.preemption_candidates
    result = schedule_pod(
        fw,
        snap,
        state,
        pod,
        start_index=request.start_index,
        reserve_and_permit=request.reserve_and_permit,
        rng=rng,
        explain=request.explain,
        stop_after_filter=request.stop_after_filter,
        resume=resume,
        # Opportunistic batching needs the caller's cycle numbers to tell
        # whether this cycle follows the profile's last one.
        batch=batch_for(snap, fw.name) if request.cycle else None,
        cycle=request.cycle,
    )
    return schedule_response(result, state, gen, request.explain, out, request.group_rejected)


# Bounds the extenders' scores a caller adds (ScheduleResume.extra_scores), so
# a total cannot wrap around int64.
MAX_EXTRA_SCORE = 2**53


def _resume_of(msg: pb.ScheduleResume, snap: Snapshot, gen: int) -> Resume:
    """ScheduleRequest.resume, checked: at least one node, each known once."""
    if not msg.nodes:
        raise errors.invalid("resume.nodes", "must name at least one node")
    seen: set[str] = set()
    for i, name in enumerate(msg.nodes):
        where = f"resume.nodes[{i}]"
        if name in seen:
            raise errors.invalid(where, f"node {name!r} repeats")
        seen.add(name)
        if name not in snap.nodes:
            raise errors.unknown_node(
                where,
                name,
                gen,
                f"{where}: node {name!r} is not in the snapshot (generation {gen})",
            )
    for name, score in msg.extra_scores.items():
        if abs(score) > MAX_EXTRA_SCORE:
            raise errors.invalid(
                f"resume.extra_scores[{name!r}]",
                f"{score} is out of range (at most {MAX_EXTRA_SCORE} either way)",
            )
    return Resume(tuple(msg.nodes), dict(msg.extra_scores), msg.evaluated_nodes)


def schedule_streamed(call: Call, request: pb.ScheduleRequest) -> pb.ScheduleStreamResponse:
    """``schedule`` for a ScheduleStream message: the response built inside
    the stream's answer."""
    out = pb.ScheduleStreamResponse()
    schedule(call, request, out.response)
    return out


def check_batch(request: pb.ScheduleBatchRequest, max_pods: int) -> None:
    """What a batch is refused for before anything else (berth serve
    --max-batch-pods bounds how long one call holds its cluster)."""
    if len(request.pods) > max_pods:
        raise errors.batch_too_large(len(request.pods), max_pods)
    if not request.HasField("state"):
        raise errors.invalid("state", "required")


async def schedule_batch(
    call: Call, request: pb.ScheduleBatchRequest, worker: Worker
) -> pb.ScheduleBatchResponse:
    """The batch, on ``worker`` a slice at a time; the caller holds the
    cluster's lock (and built a large full state) for ``call``."""

    def begin() -> _Batch:
        fw = call.framework(request.profile)
        snap, gen = call.cluster(True, request.state)
        b = _Batch(fw, snap, gen, _batch_pods(request), call.deadline)
        b.start = request.start_index
        # With the caller's cycle numbers the profile's batching state carries
        # over between calls; without, the batch's pods batch among
        # themselves only (their cycles are consecutive by construction).
        b.batching = batch_for(snap, fw.name) if request.cycle else OpportunisticBatch(fw.name)
        b.first_cycle = request.cycle or 1
        return b

    batch = await worker.run(begin)
    try:
        while not await worker.run_slices(
            lambda: _batch_slice(batch, request, worker.slice_seconds)
        ):
            pass
        batch.answered = True
    finally:
        # Also when the deadline or a cancellation stopped the batch.
        await worker.run(lambda: _undo_batch(batch))
    batch.out.next_start_index = batch.start
    return batch.out


@dataclass(slots=True)
class _Batch:
    """A ScheduleBatch in progress (its slices run on the worker)."""

    fw: Framework
    snap: Snapshot
    gen: int
    pods: list[PodInfo]
    deadline: float | None
    out: pb.ScheduleBatchResponse = field(default_factory=pb.ScheduleBatchResponse)
    start: int = 0
    # The next pod, and the first pod of the current slice.
    i: int = 0
    first: int = 0
    # The fastest cycle so far: with fewer seconds left than the pods left
    # need at that pace, the answer cannot arrive in time.
    fastest: float = 0.0
    # Pods placed in this batch, with what the snapshot held for them
    # before, so the snapshot can be put back: the caller owns the truth.
    placed: list[tuple[str, cpb.Pod | None]] = field(default_factory=list)
    answered: bool = False
    batching: OpportunisticBatch | None = None
    first_cycle: int = 1

    def __post_init__(self) -> None:
        self.out.generation = self.gen


def _batch_pods(request: pb.ScheduleBatchRequest) -> list[PodInfo]:
    if request.start_index < 0:
        raise errors.invalid("start_index", f"must be >= 0, got {request.start_index}")
    seen: set[str] = set()
    pods: list[PodInfo] = []
    for i, msg in enumerate(request.pods):
        if not msg.uid or not msg.name:
            field_name = "uid" if not msg.uid else "name"
            raise errors.invalid(f"pods[{i}].{field_name}", "must not be empty")
        if msg.uid in seen:
            raise errors.invalid(f"pods[{i}].uid", f"{msg.uid!r} repeats")
        seen.add(msg.uid)
        pods.append(PodInfo(msg))
    return pods


def _undo_batch(b: _Batch) -> None:
    """Puts the snapshot back as the batch found it (on the worker)."""
    undo = cpb.ClusterDelta()
    added: list[str] = []
    for uid, previous in reversed(b.placed):
        if previous is not None:
            undo.upsert_pods.append(previous)
        elif b.answered:
            added.append(uid)
        else:
            undo.delete_pods.append(uid)
    b.snap.apply(undo)
    # The pods of an answered batch that were new to the snapshot go when it
    # is next used, unless the caller's next delta brings them back as they
    # were assumed here (Snapshot.remove_later): most do, and stay without
    # being removed and added again. A batch stopped early is answered with
    # an error: its pods go at once.
    b.snap.remove_later(added)


def _batch_slice(b: _Batch, request: pb.ScheduleBatchRequest, slice_seconds: float) -> bool:
    """Schedules the batch's next pods on the worker for up to a slice;
    True when every pod is done."""
    fw, snap, gen, pods = b.fw, b.snap, b.gen, b.pods
    fw.begin_request(b.deadline)
    began = time.perf_counter()
    while b.i < len(pods):
        i, pod = b.i, pods[b.i]
        now = time.perf_counter()
        if b.deadline is not None and b.deadline - now <= (len(pods) - i) * b.fastest:
            log.info("a ScheduleBatch stopped by its deadline after %d of %d pods", i, len(pods))
            raise errors.deadline(
                f"deadline: {max(b.deadline - now, 0.0) * 1000:.0f} ms left, too little "
                f"for the {len(pods) - i} pods still to schedule ({i} of {len(pods)} "
                "done); the batch stopped and the replica's snapshot is as the batch "
                "found it: send a smaller batch or a longer deadline"
            )
        if i > b.first and now - began >= slice_seconds:
            b.first = i
            return False  # other calls get a turn
        state = CycleState()
        state.preemption_candidates = request.preemption_candidates
        rng = random.Random(request.seed + i) if request.seed else None
        result = schedule_pod(
            fw,
            snap,
            state,
            pod,
            start_index=b.start,
            reserve_and_permit=request.reserve_and_permit,
            rng=rng,
            batch=b.batching,
            cycle=b.first_cycle + i,
        )
        took = time.perf_counter() - now
        b.fastest = took if not i else min(b.fastest, took)
        b.start = result.next_start_index
        schedule_response(result, state, gen, False, b.out.results.add(), request.group_rejected)
        b.i += 1
        if result.node and _holds_node(result):
            held = snap.pods.get(pod.uid)
            b.placed.append((pod.uid, None if held is None else held.proto))
            # One copy of the pod; its PodInfo keeps what the cycle worked
            # out of the spec.
            assumed = cpb.Pod()
            assumed.CopyFrom(pod.proto)
            assumed.node_name = result.node
            # What Reserve annotated travels with the assumed pod, marked as
            # the caller's assumed copy (cluster.proto Pod.assumed).
            reserved = b.out.results[-1].assume_annotations
            if reserved:
                assumed.annotations.update(reserved)
                assumed.assumed = True
            snap.upsert_pod(pod.placed(assumed))
        elif _renominates(result, pod, snap):
            # handleSchedulingFailure: the nominator takes the
            # PostFilter's nomination (or drops the pod's, after any
            # other failure) at once, so the later pods of the batch
            # see it.
            held = snap.pods.get(pod.uid)
            b.placed.append((pod.uid, None if held is None else held.proto))
            nominated = cpb.Pod()
            nominated.CopyFrom(pod.proto)
            nominated.node_name = ""
            nominated.nominated_node_name = result.nominated_node
            snap.upsert_pod(pod.placed(nominated))
    return True


def _renominates(result: ScheduleResult, pod: PodInfo, snap: Snapshot) -> bool:
    """Does a failed cycle change the pod's nomination as the snapshot holds
    it (NominatingMode OVERRIDE to another node, or to none)?"""
    if result.nominating_mode is not NominatingMode.OVERRIDE:
        return False
    held = snap.pods.get(pod.uid)
    current = pod.proto.nominated_node_name if held is None else held.proto.nominated_node_name
    if held is not None and held.node_name:
        # The snapshot holds the pod on a node (a caller's stale record):
        # leave it to the caller.
        return False
    return result.nominated_node != current


def _holds_node(result: ScheduleResult) -> bool:
    """Does a placed pod count on its node for the next cycle? Yes unless
    Reserve or Permit turned it away (then upstream forgets the assumption)."""
    if result.reserve_status is not None and not result.reserve_status.is_success:
        return False
    st = result.permit_status
    return st is None or st.is_success or st.is_wait
