"""How the shim acts on what plugins ask of other pods (shim/schedule_one.py,
shim/binding.py), with a fake plugin service and API server:

- PostFilter's signals (ScheduleResponse.post_filter.signals) reject pods waiting at
  Permit at once, and a rejected pod's binding cycle unreserves it (upstream's
  WaitingPod.Reject from Coscheduling.PostFilter, then WaitOnPermit's rejection);
- the Unreserve after a failed Reserve signals through ScheduleResponse.unreserve_signals;
- PermitResponse.activate_pod_uids moves the named pods out of backoff at the end of the
  scheduling cycle (schedule_one.go prepareForBindingCycle → SchedulingQueue.Activate),
  and PreBind's/PostBind's at the end of a binding cycle that bound the pod (bindingCycle).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import pytest
from opentelemetry import trace

from berth.api.v1 import cluster_pb2 as cpb
from berth.api.v1 import scheduling_pb2 as pb
from berth.client import ClusterStateLog
from berth.framework.events import ActionType, ClusterEvent, EventResource
from berth.framework.testing import make_node, make_pod
from berth.kube.rest import KubeApi
from berth.shim.events import EventRecorder, ObjectRef
from berth.shim.hints import HintMap, Registered
from berth.shim.queue import ACTIVE, BACKOFF, UNSCHEDULABLE, QueuedPod
from berth.shim.scheduler import Scheduler
from berth.shim.service import PluginService, SortKey

PROFILE = "gang"
TIMEOUT = 5.0


class FakeService:
    """What the Scheduler uses of PluginService: queue calls and node calls."""

    def __init__(self) -> None:
        self.state = ClusterStateLog()
        self.profiles: dict[str, Any] = {}
        self.address = "fake"
        self.calls: list[tuple[str, str]] = []
        # Responses to node calls by (method, pod name); default: empty Success.
        self.answers: dict[tuple[str, str], Any] = {}

    async def sort_keys(self, profile: str, pods: Sequence[pb.QueuedPod]) -> list[SortKey]:
        return [(-qp.pod.priority, qp.enqueued_unix_micros) for qp in pods]

    async def pre_enqueue(self, profile: str, pod: cpb.Pod) -> pb.Status:
        return pb.Status()

    async def node_call(
        self, method: str, profile: str, pod: cpb.Pod, node: str, cycle: pb.CycleState
    ) -> Any:
        self.calls.append((method, pod.name))
        answer = self.answers.get((method, pod.name))
        if answer is not None:
            return answer
        if method == "Bind":
            return pb.BindResponse(bound_by="DefaultBinder", caller_binds=True, node=node)
        return pb.StatusResponse()


class FakeApi:
    """Takes status patches and bindings."""

    def __init__(self) -> None:
        self.bound: list[str] = []

    def strategic_patch(self, path: str, patch: Any) -> None:
        return None

    def wait_for_token(self) -> None:
        return None

    def request(self, method: str, path: str, **_: Any) -> None:
        self.bound.append(path)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def record(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding.name, reason, note))


@pytest.fixture
async def sched() -> AsyncIterator[tuple[Scheduler, FakeService, FakeRecorder]]:
    service = FakeService()
    recorder = FakeRecorder()
    s = Scheduler(
        cast(KubeApi, FakeApi()),
        cast(PluginService, service),
        [PROFILE],
        recorder=cast(EventRecorder, recorder),
        # Long: no pod leaves the backoff queue by itself during a test.
        initial_backoff=60.0,
        max_backoff=60.0,
    )
    s.cache.upsert_node(make_node("n1").capacity(cpu="8").obj())
    try:
        yield s, service, recorder
    finally:
        await s.stop()


async def queued(s: Scheduler, *names: str) -> list[QueuedPod]:
    """The pods, added, admitted and popped (in flight), in order."""
    for k, name in enumerate(names):
        pod = make_pod(name).uid(name).priority(len(names) - k).obj()
        pod.scheduler_name = PROFILE
        s.queue.add(pod, PROFILE)
    await s.queue.admit_incoming()
    batch = await asyncio.wait_for(s.queue.pop_batch(len(names)), TIMEOUT)
    assert [qp.uid for qp in batch] == list(names)
    return batch


async def backed_off(s: Scheduler, name: str) -> None:
    (qp,) = await queued(s, name)
    s.queue.done_error(qp)
    assert where(s, name) == BACKOFF


def where(s: Scheduler, uid: str) -> str:
    qp = s.queue.get(uid)
    return "gone" if qp is None else qp.where


def handle(s: Scheduler, qp: QueuedPod, resp: pb.ScheduleResponse) -> None:
    s.scheduling_cycle.handle_result(
        qp, PROFILE, resp, trace.get_tracer("test").start_span("t"), time.perf_counter()
    )


def waits(*activate: str) -> pb.ScheduleResponse:
    return pb.ScheduleResponse(
        status=pb.Status(),
        node="n1",
        reserve_status=pb.Status(),
        permit=pb.PermitResponse(
            status=pb.Status(code=pb.CODE_WAIT),
            wait_timeout_millis={"Gang": 60_000},
            activate_pod_uids=list(activate),
        ),
    )


def reject(uid: str, message: str) -> pb.WaitingPodSignal:
    return pb.WaitingPodSignal(pod_uid=uid, plugin="Gang", allow=False, message=message)


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_post_filter_signals_reject_waiting_pods_which_are_unreserved(
    sched: tuple[Scheduler, FakeService, FakeRecorder],
) -> None:
    s, service, recorder = sched
    # The gang plugin registers what Coscheduling does (a pod added), so the
    # forgotten members' room moves none of them.
    s.queue.set_hints(
        HintMap(
            {PROFILE: [Registered("Gang", ClusterEvent(EventResource.POD, ActionType.ADD), False)]}
        )
    )
    a, b, last = await queued(s, "a", "b", "last")
    handle(s, a, waits())
    handle(s, b, waits())
    assert set(s.waiting) == {"a", "b"}
    failed = pb.ScheduleResponse(
        status=pb.Status(code=pb.CODE_UNSCHEDULABLE),
        diagnosis=pb.Diagnosis(message="0/1 nodes are available: gang broken"),
        post_filter=pb.PostFilterResponse(
            status=pb.Status(code=pb.CODE_UNSCHEDULABLE),
            signals=[reject("a", "gang broken"), reject("b", "gang broken")],
        ),
    )
    handle(s, last, failed)
    # Rejected at once, not after the 60 s wait: unreserved, forgotten, requeued.
    await until(lambda: not s.waiting, "the waiting pods released")
    assert sorted(c for c in service.calls if c[0] == "Unreserve") == [
        ("Unreserve", "a"),
        ("Unreserve", "b"),
    ]
    assert not s.cache.is_assumed("a") and not s.cache.is_assumed("b")
    # bindingCycle: rejected at Permit is a FitError over the node, the plugin
    # recorded: Unschedulable, retried by the events Gang registered.
    assert (where(s, "a"), where(s, "b")) == (UNSCHEDULABLE, UNSCHEDULABLE)
    assert s.queue.get("a").unschedulable_plugins == frozenset({"Gang"})  # type: ignore[union-attr]
    notes = {name: note for name, reason, note in recorder.events if reason == "FailedScheduling"}
    assert notes["a"] == notes["b"] == "0/1 nodes are available: 1 gang broken."
    assert s.counters.bound == 0


async def test_failed_reserve_applies_unreserve_signals(
    sched: tuple[Scheduler, FakeService, FakeRecorder],
) -> None:
    s, _, _ = sched
    w, p = await queued(s, "w", "p")
    handle(s, w, waits())
    resp = pb.ScheduleResponse(
        status=pb.Status(),
        node="n1",
        reserve_status=pb.Status(code=pb.CODE_UNSCHEDULABLE, reasons=["no room"]),
        unreserve_signals=[reject("w", "p unreserved")],
    )
    handle(s, p, resp)
    w_pod = s.waiting.get("w")
    assert w_pod is None or w_pod.done.done()
    await until(lambda: "w" not in s.waiting, "w released")
    assert where(s, "p") != "in_flight"


async def test_permit_activations_leave_backoff_at_the_end_of_the_scheduling_cycle(
    sched: tuple[Scheduler, FakeService, FakeRecorder],
) -> None:
    s, _, _ = sched
    await backed_off(s, "sibling")
    await backed_off(s, "stranger")
    (first,) = await queued(s, "first")
    handle(s, first, waits("sibling", "unknown-uid"))
    assert "first" in s.waiting
    assert where(s, "sibling") == ""  # on its way to the activeQ, through admission
    assert where(s, "stranger") == BACKOFF
    await s.queue.admit_incoming()
    assert where(s, "sibling") == ACTIVE


async def test_binding_cycle_activations_wait_until_the_pod_is_bound(
    sched: tuple[Scheduler, FakeService, FakeRecorder],
) -> None:
    s, service, _ = sched
    service.profiles = {}
    for name in ("from-prebind", "from-postbind", "from-failed-prebind"):
        await backed_off(s, name)
    ok, bad = await queued(s, "ok", "bad")
    service.answers[("PreBind", "ok")] = pb.StatusResponse(activate_pod_uids=["from-prebind"])
    service.answers[("PostBind", "ok")] = pb.StatusResponse(activate_pod_uids=["from-postbind"])
    service.answers[("PreBind", "bad")] = pb.StatusResponse(
        status=pb.Status(code=pb.CODE_ERROR, reasons=["cannot"], plugin="Gang"),
        activate_pod_uids=["from-failed-prebind"],
    )
    placed = pb.ScheduleResponse(
        status=pb.Status(),
        node="n1",
        reserve_status=pb.Status(),
        permit=pb.PermitResponse(status=pb.Status()),
    )
    handle(s, ok, placed)
    handle(s, bad, placed)
    await until(lambda: s.counters.bound == 1 and s.counters.bind_failures == 1, "both done")
    assert where(s, "from-prebind") == ""
    assert where(s, "from-postbind") == ""
    # A binding cycle that failed activates nothing.
    assert where(s, "from-failed-prebind") == BACKOFF


@pytest.mark.parametrize(
    ("point", "code", "pending", "place"),
    [
        ("permit", pb.CODE_UNSCHEDULABLE, False, UNSCHEDULABLE),
        ("permit", pb.CODE_PENDING, True, UNSCHEDULABLE),
        ("reserve", pb.CODE_UNSCHEDULABLE_AND_UNRESOLVABLE, False, UNSCHEDULABLE),
        ("permit", pb.CODE_ERROR, False, BACKOFF),
    ],
)
async def test_a_reserve_or_permit_rejection_is_unschedulable_with_its_plugin(
    sched: tuple[Scheduler, FakeService, FakeRecorder],
    point: str,
    code: int,
    pending: bool,
    place: str,
) -> None:
    """schedulingCycle: a Reserve or Permit rejection is a FitError over the
    chosen node with the rejecting plugin recorded (Diagnosis.AddPluginStatus),
    so handleSchedulingFailure makes the pod Unschedulable, retried by the
    events that plugin registered; an Error is retried after a backoff."""
    s, _service, recorder = sched
    s.queue.set_hints(
        HintMap(
            {PROFILE: [Registered("Gang", ClusterEvent(EventResource.POD, ActionType.ADD), False)]}
        )
    )
    (qp,) = await queued(s, "p")
    st = pb.Status(code=code, reasons=["not now"], plugin="Gang")  # type: ignore[arg-type]
    resp = pb.ScheduleResponse(status=pb.Status(), node="n1", reserve_status=pb.Status())
    if point == "reserve":
        resp.reserve_status.CopyFrom(st)
    else:
        resp.permit.status.CopyFrom(st)
    handle(s, qp, resp)
    assert where(s, "p") == place
    (note,) = [n for name, reason, n in recorder.events if reason == "FailedScheduling"]
    if place == UNSCHEDULABLE:
        assert qp.unschedulable_plugins == frozenset({"Gang"})
        assert qp.pending_plugins == (frozenset({"Gang"}) if pending else frozenset())
        assert note == "0/1 nodes are available: 1 not now."
    else:
        assert qp.consecutive_errors == 1
        assert note == "not now"
